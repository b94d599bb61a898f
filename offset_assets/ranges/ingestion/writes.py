"""A range's writes: its rows into the target table's hot delta, its malformed records
into the job's quarantine table, each opened under the job's holder name; a hot delta
left by an ingestion run that died is discarded first (see the package's docstring)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from offset_assets.control_plane.database import ControlPlane
from offset_assets.control_plane.delta_catalog import HotDeltaHeldError
from offset_assets.control_plane.delta_catalog.records import DeltaInfo
from offset_assets.control_plane.job_log import JobLog
from offset_assets.control_plane.job_log.records import Claim, JobStatus
from offset_assets.lazy_session import LazySession
from offset_assets.ranges.errors import SeveralStatesError
from offset_assets.ranges.ingestion.held import HeldRange
from offset_assets.ranges.ingestion.job import QUARANTINE_KEY, QUARANTINE_SCHEMA, IngestionJob, TargetTable
from offset_assets.ranges.ingestion.rows import ShapedRows
from offset_assets.ranges.sources.batch import SourceBatch
from offset_assets.versioned.errors import ConflictingStatesError, UnorderedStatesError
from offset_assets.versioned.evaluation import small_run_settings
from offset_assets.versioned.hot_delta import HotDelta
from offset_assets.versioned.sql_text import string_literal
from offset_assets.versioned.table import VersionedTable
from offset_assets.versioned.table_schema import column_types
from offset_assets.versioned.writes import StateOrder, WriteStats

logger = logging.getLogger(__name__)

# The holder of an ingestion's hot delta: `ingestion:<job name>` (run id beside it).
HOLDER_PREFIX = "ingestion:"


@dataclass(frozen=True)
class RangeWrites:
    """The writes of one job's ranges into its tables (`RangeIngestion` holds one; its
    session started when a write needs Spark)."""

    session: LazySession
    plane: ControlPlane
    job: IngestionJob
    warehouse: str | None
    log: JobLog
    small_run_rows_limit: int

    @property
    def spark(self) -> SparkSession:
        return self.session.get()

    @property
    def holder(self) -> str:
        """The holder name of the hot deltas this job opens."""
        return f"{HOLDER_PREFIX}{self.job.name}"

    def open_target_delta(self, table: VersionedTable, run_id: str) -> HotDelta:
        """Open the target's hot delta for `run_id`. One left open by an ingestion run that
        died (killed during its write or inside its commit) is discarded first: its run
        holds no range any more, or only ranges whose holder is found dead, as a claim
        finds it (`ClaimPolicy`); a takeover of the dead run's range has just made it so."""
        try:
            return table.open_delta(holder=self.holder, run_id=run_id)
        except HotDeltaHeldError as held:
            if not self._left_by_dead_run(held.hot, run_id):
                raise
            table.discard_dead_hot(held.hot)
        return table.open_delta(holder=self.holder, run_id=run_id)

    def _left_by_dead_run(self, hot: DeltaInfo, run_id: str) -> bool:
        """Whether `hot` is an ingestion's (this job's or another's writing the same table)
        under a run other than `run_id` that holds no live range of that job."""
        holder = hot.holder or ""
        if not holder.startswith(HOLDER_PREFIX) or hot.run_id is None or hot.run_id == run_id:
            return False
        policy = self.job.claim_policy
        running = self.log.jobs(holder.removeprefix(HOLDER_PREFIX), status=JobStatus.RUNNING)
        return all(self.log.is_stale(row, policy.stale_after_s, policy.is_run_dead)
                   for row in running if row.run_id == hot.run_id)

    def write(self, hot: HotDelta, table: VersionedTable, batch: SourceBatch, shaped: ShapedRows,
               rows_read: int) -> WriteStats:
        """The range's one write, then the commit (last: no file for unchanged rows), in
        one pass: the range's count sizes it (a transform's rows are sized by the source's
        count: the write's partitions, never what it keeps). Without a transform, an id
        range of the primary key's first column bounds its lookups."""
        key_range = None if self.job.transform is not None else _key_range(batch, self.job.target)
        sizes = [*table.catalog.versions_stored([table.name]).values(), rows_read]
        try:
            with small_run_settings(self.spark, sizes, self.small_run_rows_limit):
                return hot.write(shaped.rows, last=True, rows=rows_read, key_range=key_range,
                                 column_types=shaped.types, order=shaped.order)
        except ConflictingStatesError as exc:
            raise SeveralStatesError(f"{exc}; {self._order_hint(exc, batch.order, shaped.dropped)}") from exc

    def write_held(self, hot: HotDelta, held: HeldRange) -> WriteStats:
        """`write` for a range the driver read (`held.py`): written by it, no Spark job."""
        try:
            return hot.write_held(held.rows, last=True, key_range=held.key_range, order=held.order)
        except ConflictingStatesError as exc:
            raise SeveralStatesError(f"{exc}; {self._order_hint(exc, held.order, [])}") from exc

    def _order_hint(self, refused: ConflictingStatesError, order: StateOrder | None, dropped: list[str]) -> str:
        """How to order the rows of one key that a range's write refused."""
        source = type(self.job.source).__name__
        if isinstance(refused, UnorderedStatesError) and order is not None:
            return (f"{order.order_by!r} orders a key's rows within one {order.within!r} only: declare "
                    f"{source}(order_by=<a column that orders them across {order.within!r}>), or send a key's "
                    f"messages to one partition")
        if dropped:
            return (f"the transform drops {dropped}, which order{'s' if len(dropped) == 1 else ''} the rows of a "
                    "key: keep them in its output (they are not stored unless the target has them)")
        if order is not None:
            return f"{order.order_by!r} must tell a key's rows apart"
        return (f"{source} gives the rows of a key no order: declare {source}(order_by=<column>) (an append-only "
                "change log: the last row of a key wins), and the range is retried with it")

    def quarantine(self, malformed: DataFrame, count: int, claim: Claim, run_id: str
                    ) -> tuple[HotDelta | None, int]:
        """Write the range's `count` malformed records into the job's quarantine table;
        its hot delta (None: every record was there already, a refresh) and the versions
        written."""
        table = VersionedTable(self.session.get, self.plane, self.job.quarantine_name, QUARANTINE_KEY,
                               QUARANTINE_SCHEMA, warehouse=self.warehouse)
        hot = self.open_target_delta(table, run_id)
        try:
            rows = malformed.selectExpr(f"{string_literal(self.job.name)} AS job_name", "source_key", "raw_value",
                                        "reason", f"CAST({int(claim.job_id)} AS BIGINT) AS job_id")
            stats = hot.write(rows, last=True, rows=count, column_types=column_types(QUARANTINE_SCHEMA))
        except BaseException:
            hot.rollback()
            raise
        written = stats.rows_upserted + stats.rows_deleted
        if not written:
            hot.rollback()
            return None, 0
        return hot, written



def _key_range(batch: SourceBatch, target: TargetTable) -> tuple[Any, Any] | None:
    """The source's range of the target's first key column, when it has one."""
    if batch.key_range is None or batch.row_count is None:
        return None
    column, lowest, highest = batch.key_range
    return (lowest, highest) if column == target.primary_key[0] else None
