"""Ingesting one data range into a versioned table, exactly once.

claim the range (ordered, atomic) -> read the source rows of the range -> write them
into the target table's hot delta -> commit that delta in the control-plane transaction
that also writes job_log SUCCESS and the step_log rows. Either the data and SUCCESS
are both committed or neither is: a crash anywhere before leaves the range RUNNING
(taken over once its holder is found dead) or FAILURE, and the retry writes it again.

Rows equal to the table's actual state create no version (versioned-table rule), so a
re-run or refresh of a range that changed nothing at the source commits no delta.

A range is a fixed slice once it has run: an end left to the run (a Kafka range's, an id
range's max id) is decided once the range is claimed and recorded in job_log before a row
is read, and every later run of the range (retry, takeover, refresh, a Dagster partition
launched again) reads exactly to it. A run that died holding the target's hot delta
(killed during the write or inside the commit) blocks nothing: the next writer finds the
delta's holder dead in job_log and discards it (`_open_target_delta`).

A time window that has not ended yet (today's, for daily windows) can be ingested too:
always as a refresh, and its job_log row records end = start, the mark of a range that
holds nothing. Its rows are committed, but the pointer does not move past the window,
and once the window has closed the planner runs it again, whole: rows that changed after
the early run are ingested then, the others create no version.

What a range's rows become (`_shape`, `_write`):
- several rows of one key are reduced to the last by the source's own order
  (`SourceBatch.order`: a Kafka partition's offsets, a declared `order_by` column) in the
  write's own grouping (`versioned.writes.StateOrder`): no Spark job of its own. The
  order's columns go through a `transform` as columns of its output; a transform that
  drops them leaves the rows unordered, and a key's different states then refuse the
  range, saying which columns to keep;
- a row with `sys_op` 1 deletes its key (a Kafka tombstone);
- a record whose values do not fit (`SourceBatch.malformed`) fails the range naming it
  (`on_malformed="fail"`), or goes with its raw value and the reason to the job's
  quarantine table (`"quarantine"`), committed in the range's transaction.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from pyspark.errors import PythonException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import DataType, LongType, StringType, StructField, StructType
from sqlalchemy import Connection

from offset_assets.control_plane.database import ControlPlane
from offset_assets.control_plane.delta_catalog import HotDeltaHeldError
from offset_assets.control_plane.delta_catalog.records import DeltaInfo
from offset_assets.control_plane.job_log import JobLog
from offset_assets.control_plane.job_log.errors import ClaimLostError
from offset_assets.control_plane.job_log.records import Claim, JobRecord, JobStatus, StepRecord, check_job_names
from offset_assets.ranges.claims import ClaimPolicy, Heartbeat, claim_range
from offset_assets.ranges.errors import IngestionError, MalformedValueError, PlanningError, SeveralStatesError
from offset_assets.ranges.planners import (
    AutoIncrementIdPlanner,
    DataRange,
    KafkaOffsetPlanner,
    PlanInputs,
    Planner,
    RangeKind,
    TimeWindowPlanner,
    UpstreamPlanner,
    parse_time,
    recorded_end,
)
from offset_assets.ranges.sources.batch import MALFORMED, RangeSource, SourceBatch
from offset_assets.run_profile import Profiler, RunProfile
from offset_assets.versioned.commit import commit_transaction
from offset_assets.versioned.errors import ConflictingStatesError, UnorderedStatesError
from offset_assets.versioned.evaluation import DEFAULT_SMALL_RUN_ROWS_LIMIT, small_run_settings
from offset_assets.versioned.hot_delta import HotDelta
from offset_assets.versioned.sql_text import string_literal
from offset_assets.versioned.table import VersionedTable
from offset_assets.versioned.table_schema import column_types, validate_table_name
from offset_assets.versioned.writes import StateOrder, WriteStats

logger = logging.getLogger(__name__)

TARGET_TYPE = "versioned_table"
SYS_OP = "sys_op"
# The holder of an ingestion's hot delta: `ingestion:<job name>` (run id beside it).
HOLDER_PREFIX = "ingestion:"

# The quarantine table of a job's malformed records: one row per record of a source
# (a Kafka message's `topic/partition@offset`, a SQL row's key as JSON), with the value as
# the source sent it, why it does not fit, and the job_log row of the range that read it.
QUARANTINE_KEY = ["job_name", "source_key"]
QUARANTINE_SCHEMA = StructType([
    StructField("job_name", StringType(), False),
    StructField("source_key", StringType(), False),
    StructField("raw_value", StringType(), True),
    StructField("reason", StringType(), True),
    StructField("job_id", LongType(), True),
])


class OnMalformed(StrEnum):
    """What a range does with a record whose values do not fit their declared type: fail
    (naming it: nothing is committed, and the range is retried as it is once the source or
    the job is fixed), or set it aside in the job's quarantine table and ingest the rest."""

    FAIL = "fail"
    QUARANTINE = "quarantine"


@dataclass(frozen=True)
class TargetTable:
    """The versioned table a job ingests into."""

    name: str
    primary_key: Sequence[str]
    schema: StructType


@dataclass(frozen=True)
class IngestionJob:
    """What to ingest (source), in which ranges (planner), into which table (target).

    `name` is the job_name of its job_log rows (the Dagster asset name). `transform`
    shapes source rows into the target's columns; without it the target's columns (and
    `sys_op` when present) are selected from the source rows. A transform keeps `sys_op`
    (a Kafka tombstone's delete) and the source's order columns (a Kafka range's
    `kafka_partition` and `kafka_offset`, a declared `order_by`) in its output: they
    decide which of several rows of one key is its state, and are not stored unless the
    target has them.

    `on_malformed` (`OnMalformed`): a record whose values do not fit fails the range
    (`"fail"`), or goes to `quarantine_table` (default `<target>__quarantine`,
    `QUARANTINE_SCHEMA`) in the range's commit (`"quarantine"`).
    """

    name: str
    source: RangeSource
    planner: Planner
    target: TargetTable
    workflow_name: str | None = None
    load_type: str = "incremental"
    transform: Callable[[DataFrame], DataFrame] | None = None
    claim_policy: ClaimPolicy = field(default_factory=ClaimPolicy)
    on_malformed: OnMalformed | str = OnMalformed.FAIL
    quarantine_table: str | None = None

    def __post_init__(self) -> None:
        # Refused here, before any range is claimed or any table registered.
        check_job_names(job_name=self.name, workflow_name=self.workflow_name, load_type=self.load_type)
        validate_table_name(self.target.name)
        try:
            object.__setattr__(self, "on_malformed", OnMalformed(self.on_malformed))
        except ValueError:
            raise PlanningError(f"job {self.name!r}: on_malformed must be one of "
                                f"{[str(p) for p in OnMalformed]}, got {self.on_malformed!r}") from None
        if self.on_malformed == OnMalformed.QUARANTINE:
            validate_table_name(self.quarantine_name)

    @property
    def quarantine_name(self) -> str:
        """The versioned table of the job's malformed records."""
        return self.quarantine_table or f"{self.target.name}__quarantine"


@dataclass(frozen=True)
class RangeResult:
    """How one range run ended (always successfully: failures raise)."""

    job_id: int
    attempt: int
    data_range: DataRange  # end: the end actually reached (job_log's, except for an open window)
    rows_read: int
    rows_upserted: int
    rows_deleted: int
    rows_unchanged: int
    delta_num: int | None  # None: nothing changed, no delta committed
    commit_ts: float | None
    took_over_run_id: str | None = None
    open_window: bool = False  # ingested before its end: job_log holds end = start
    profile: RunProfile | None = None  # where the range's time went: claim, source_read, write, commit
    keys_written: int = 0  # keys the range gave a state (a version, or unchanged)
    superseded_in_range: int = 0  # rows that gave their key no state: a later row of the key won
    rows_quarantined: int = 0  # malformed records set aside in the job's quarantine table
    quarantine_delta_num: int | None = None  # the quarantine table's delta, when one was committed


class _Steps:
    """The steps of one attempt, written to step_log with the attempt's outcome."""

    def __init__(self, clock: Callable[[], float], source_type: str) -> None:
        self._clock = clock
        self._source_type = source_type
        self.done: list[StepRecord] = []
        self.current: tuple[str, float] | None = None

    def start(self, step_id: str) -> None:
        self.current = (step_id, self._clock())

    def finish(self, **counts: Any) -> None:
        step_id, started = self.current or ("?", self._clock())
        self.done.append(StepRecord(step_id, JobStatus.SUCCESS, started, self._clock(),
                                    source_type=self._source_type, target_type=TARGET_TYPE,
                                    **counts))
        self.current = None

    def failed(self, error: str) -> list[StepRecord]:
        if self.current is None:
            return self.done
        step_id, started = self.current
        return [*self.done, StepRecord(step_id, JobStatus.FAILURE, started, self._clock(),
                                       error=error, source_type=self._source_type,
                                       target_type=TARGET_TYPE)]


@dataclass(frozen=True)
class _Shaped:
    """A range's rows as its write takes them: the target's columns, `sys_op`, the order
    columns; their types; the order (None: none, or `dropped` by the transform)."""

    rows: DataFrame
    types: dict[str, DataType]
    order: StateOrder | None
    dropped: list[str] = field(default_factory=list)


class RangeIngestion:
    """Runs the ranges of one `IngestionJob` against a control plane and a warehouse.

    `small_run_rows_limit`: a range whose rows and target table's stored versions are at
    most this many in all is written as a small run: Spark's expressions interpreted, not
    compiled, without adaptive execution (as a transformation's run,
    `offset_assets.versioned.evaluation`)."""

    def __init__(
        self,
        spark: SparkSession,
        plane: ControlPlane,
        job: IngestionJob,
        warehouse: str | None = None,
        clock: Callable[[], float] = time.time,
        small_run_rows_limit: int = DEFAULT_SMALL_RUN_ROWS_LIMIT,
    ) -> None:
        self.spark = spark
        self.plane = plane
        self.job = job
        self.warehouse = warehouse
        self.small_run_rows_limit = small_run_rows_limit
        self.log = JobLog(plane, clock=clock)
        self._clock = clock

    # -- planning -----------------------------------------------------------------------

    def history(self) -> list[JobRecord]:
        return self.log.history(self.job.name)

    def plan(self, now: datetime | None = None) -> list[DataRange]:
        """The ranges due now, in the order they must run (a failed one first)."""
        return plan_ranges(self.job, self.log, now)

    # -- running ------------------------------------------------------------------------

    def run_pending(
        self, now: datetime | None = None, run_id: str | None = None
    ) -> list[RangeResult]:
        """Run the due ranges in order (one plan's worth: a planner lists at most its
        `max_ranges_per_plan`); the first failure stops the run (and is raised), and the
        next run retries that range first."""
        results = []
        for data_range in self.plan(now):
            results.append(self.run_range(data_range, run_id=run_id, now=now))
        return results

    def refresh(self, ranges: Sequence[DataRange], run_id: str | None = None) -> list[RangeResult]:
        """Re-ingest explicit ranges, done or not, without moving the pointer past a gap."""
        return [self.run_range(replace(r, refresh=True), run_id=run_id) for r in ranges]

    def run_range(
        self,
        data_range: DataRange,
        run_id: str | None = None,
        now: datetime | None = None,
        runtime_args: dict[str, Any] | None = None,
    ) -> RangeResult:
        """Claim, read, write and commit one range; raises on failure (range logged FAILURE).

        A time window that has not ended at `now` (default: the current time) runs as a
        refresh that leaves the window due (see the module docstring)."""
        run_id = run_id or f"local-{uuid.uuid4().hex}"
        window_open = is_open_window(data_range, now or datetime.now(UTC))
        if window_open:
            data_range = replace(data_range, refresh=True)
        data_range = self._as_recorded(data_range)
        pending = [] if data_range.refresh else self.plan(now)
        planned = pending[0] if pending and pending[0].start == data_range.start else None
        if planned is not None:
            data_range = _as_planned(data_range, planned)
        if data_range.max_size is None:  # a Kafka range from a partition key: the planner's cap
            data_range = replace(data_range, max_size=getattr(self.job.planner,
                                                              "max_offsets_per_partition", None))
        profiler = Profiler.start(self.spark)
        try:
            return self._run_claimed(data_range, pending, planned, window_open, run_id, runtime_args, profiler)
        finally:
            profiler.stop()  # a range that raised leaves no tag on the jobs that follow

    def _run_claimed(self, data_range: DataRange, pending: list[DataRange], planned: DataRange | None,
                     window_open: bool, run_id: str, runtime_args: dict[str, Any] | None,
                     profiler: Profiler) -> RangeResult:
        with profiler.phase("claim"):
            claim = self._claim(data_range, pending, planned, window_open, run_id, runtime_args)
        steps = _Steps(self._clock, self.job.source.source_type)
        hot: HotDelta | None = None
        quarantine: HotDelta | None = None
        try:
            with Heartbeat(self.log, claim, self.job.claim_policy.heartbeat_interval_s):
                steps.start("read")
                with profiler.phase("source_read"):
                    data_range = self._record_end(data_range, claim)
                    batch = self._read(data_range)
                    records, malformed = self._records(batch)
                    shaped = self._shape(batch, records)
                    rows_read = batch.row_count if batch.row_count is not None else shaped.rows.count()
                steps.finish(source_count=rows_read)

                steps.start("write")
                with profiler.phase("write"):
                    table = VersionedTable(self.spark, self.plane, self.job.target.name,
                                           self.job.target.primary_key, self.job.target.schema,
                                           warehouse=self.warehouse)
                    hot = self._open_target_delta(table, run_id)
                    stats = self._write(hot, table, batch, shaped, rows_read)
                changed = stats.rows_upserted + stats.rows_deleted
                steps.finish(
                    source_count=rows_read, target_count=changed,
                    success_count=changed + stats.rows_unchanged, failure_count=batch.malformed or 0,
                    output=json.dumps({"table": table.name,
                                       "delta_num": hot.delta_num if changed else None,
                                       "rows_unchanged": stats.rows_unchanged,
                                       "keys_written": stats.keys_written,
                                       "superseded_in_range": stats.rows_superseded}),
                )
                if malformed is not None:
                    steps.start("quarantine")
                    with profiler.phase("write"):
                        quarantine, set_aside = self._quarantine(malformed, batch.malformed or 0, claim, run_id)
                    steps.finish(source_count=batch.malformed, target_count=set_aside,
                                 success_count=batch.malformed, failure_count=0,
                                 output=json.dumps({"table": self.job.quarantine_name,
                                                    "delta_num": quarantine.delta_num if quarantine else None}))
                end = batch.end if batch.end is not None else data_range.end
                # An open window holds nothing yet: end = start keeps it due until it closes.
                logged_end = data_range.start if window_open else end

                def log_success(conn: Connection) -> None:
                    self.log.mark_success(claim.job_id, logged_end, conn=conn, run_id=run_id)
                    for step in steps.done:
                        self.log.record_step(claim.job_id, claim.attempt, step, conn=conn)

                commit_ts: float | None = None
                delta_num: int | None = None
                with profiler.phase("commit"):
                    if not changed:
                        hot.rollback()  # nothing changed: no empty delta for readers to process
                        hot = None
                    committed = [h for h in (hot, quarantine) if h is not None]
                    if committed:  # job_log SUCCESS with the deltas
                        with commit_transaction(committed) as commit:
                            log_success(commit.conn)
                        commit_ts, delta_num = commit.commit_ts, hot.delta_num if hot is not None else None
                    else:
                        with self.plane.begin() as conn:
                            log_success(conn)
        except ClaimLostError:
            self._discard(hot)
            self._discard(quarantine)
            raise
        except Exception as exc:
            self._discard(hot)
            self._discard(quarantine)
            self._record_failure(claim, steps, exc)
            raise IngestionError(
                f"job {self.job.name!r} range {data_range.start!r}..{data_range.end!r} failed "
                f"(job_id {claim.job_id}, attempt {claim.attempt}): {_one_line(exc)}"
            ) from exc
        profile = profiler.finish()
        logger.debug("ingestion %s range %r..%r: %s", self.job.name, data_range.start, end, profile.describe())
        return RangeResult(
            claim.job_id, claim.attempt, replace(data_range, end=end), rows_read,
            stats.rows_upserted, stats.rows_deleted, stats.rows_unchanged, delta_num, commit_ts,
            claim.previous_run_id if claim.took_over else None, window_open, profile,
            keys_written=stats.keys_written, superseded_in_range=stats.rows_superseded,
            rows_quarantined=batch.malformed or 0,
            quarantine_delta_num=quarantine.delta_num if quarantine is not None else None,
        )

    def _claim(self, data_range: DataRange, pending: list[DataRange], planned: DataRange | None,
               window_open: bool, run_id: str, runtime_args: dict[str, Any] | None) -> Claim:
        return claim_range(
            self.log, self.job.name, data_range, pending, run_id=run_id,
            policy=self.job.claim_policy, workflow_name=self.job.workflow_name,
            period=getattr(self.job.planner, "period_minutes", None),
            load_type=self.job.load_type,
            runtime_args={**(runtime_args or {}), "refresh": data_range.refresh,
                          **({"open_window": True} if window_open else {}),
                          **_backlog_args(planned)},
        )

    def _as_recorded(self, data_range: DataRange) -> DataRange:
        """A range that has run keeps the end job_log recorded for it: ids and Kafka
        offsets, whose ends are decided when a range runs (time windows and upstream
        ranges are their own bounds). Another end asked for such a range is refused."""
        if data_range.kind not in (RangeKind.AUTO_INC_ID, RangeKind.KAFKA_OFFSET):
            return data_range
        end = recorded_end(self.log.get_range(self.job.name, data_range.start))
        if end is None or data_range.end == end:
            return data_range
        if data_range.end is not None:
            raise PlanningError(
                f"job {self.job.name!r} range {data_range.start!r} has run as "
                f"{data_range.start!r}..{end!r} (job_log); a range keeps its bounds once it has "
                f"run, so it cannot run to {data_range.end!r}: run it with its end (or none)"
            )
        return replace(data_range, end=end)

    def _record_end(self, data_range: DataRange, claim: Claim) -> DataRange:
        """The range with its end decided, when it has none (the head range: a Kafka
        range's offsets, an id range's max id, read from the source now), and recorded in
        job_log before a row is read, so that whatever runs the range next reads this same
        slice. A source without `range_end` decides its end as it reads."""
        decide = getattr(self.job.source, "range_end", None)
        if data_range.end is not None or decide is None:
            return data_range
        end = decide(data_range)
        if end is None:
            return data_range
        self.log.record_end(claim.job_id, end, run_id=claim.run_id)
        return replace(data_range, end=end)

    @property
    def holder(self) -> str:
        """The holder name of the hot deltas this job opens."""
        return f"{HOLDER_PREFIX}{self.job.name}"

    def _open_target_delta(self, table: VersionedTable, run_id: str) -> HotDelta:
        """Open the target's hot delta for `run_id`. One left open by an ingestion run that
        died (killed during its write or inside its commit) is discarded first: its run
        holds no range any more, or only ranges whose holder is found dead, as a claim
        finds it (`ClaimPolicy`); a takeover of the dead run's range has just made it so."""
        try:
            return table.open_delta(holder=self.holder, run_id=run_id)
        except HotDeltaHeldError as held:
            if not self._left_by_dead_run(held.hot, run_id):
                raise
            discarded = table.catalog.discard_hot(table.name, held.hot.holder or "", held.hot.run_id or "")
        if discarded is not None:
            logger.warning("job %s: discarded hot delta %s of %s left by dead run %r (%s)", self.job.name,
                           discarded.delta_num, table.name, discarded.run_id, discarded.holder)
            _delete_quietly(table, discarded)
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

    def _read(self, data_range: DataRange) -> SourceBatch:
        """The range's rows from the source; for a job that quarantines, read with its
        malformed records marked and counted (`SourceBatch.read_marked`) where the source's
        plain read would fail on them."""
        batch = self.job.source.read_range(self.spark, data_range)
        if self.job.on_malformed == OnMalformed.QUARANTINE and batch.malformed is None:
            if batch.read_marked is None:
                raise IngestionError(f"job {self.job.name!r}: a {self.job.source.source_type} source cannot set "
                                     "malformed records aside; on_malformed='quarantine' needs a SQL or Kafka source")
            batch = batch.read_marked()
        return batch

    def _records(self, batch: SourceBatch) -> tuple[DataFrame, DataFrame | None]:
        """The range's records whose values fit, and those that do not (`MALFORMED`'s
        fields) when the job quarantines them. A job that does not fails here, naming the
        first such record (by source key); a range without any costs no Spark job."""
        if batch.malformed is None:
            return batch.df, None
        records = batch.df.drop(MALFORMED)
        if not batch.malformed:
            return records, None
        marked = batch.df.where(f"{MALFORMED} IS NOT NULL")
        if self.job.on_malformed == OnMalformed.FAIL:
            (first,) = marked.selectExpr(f"min_by({MALFORMED}.reason, {MALFORMED}.source_key)").first()
            raise MalformedValueError(
                f"{first} ({batch.malformed} malformed record(s) in the range; on_malformed='quarantine' "
                f"would set them aside in {self.job.quarantine_name!r})")
        return batch.df.where(f"{MALFORMED} IS NULL").drop(MALFORMED), marked.select(f"{MALFORMED}.*")

    def _shape(self, batch: SourceBatch, records: DataFrame) -> _Shaped:
        """The range's rows as the target's columns (and `sys_op` and the source's order
        columns), their types, and the order the write keeps the last row of a key by.
        The schema is asked once, since over Spark Connect every ask is a round trip in
        which the server analyses the plan, the source's read included; the write takes
        the types as given."""
        target = self.job.target
        given = column_types(records.schema)
        if not given:  # an empty source without a schema (no file landed)
            return _Shaped(self.spark.createDataFrame([], target.schema), column_types(target.schema), None)
        order = batch.order
        if self.job.transform is not None:
            rows = self.job.transform(records)
            types = column_types(rows.schema)
            if batch.deletes and SYS_OP not in types:
                raise IngestionError(
                    f"job {self.job.name!r}: the range holds {batch.deletes} delete(s) (sys_op 1: Kafka tombstones) "
                    f"and the transform's output has no {SYS_OP!r} column: keep it, or they would be written "
                    "as upserts")
        else:
            absent = [c for c in order.columns if c not in given] if order else []
            if absent:
                raise IngestionError(f"job {self.job.name!r}: the source orders a key's rows by column(s) {absent}, "
                                     f"which its rows lack (they have {sorted(given)})")
            wanted = list(dict.fromkeys(c for c in [*target.schema.fieldNames(), SYS_OP,
                                                    *(order.columns if order else [])] if c in given))
            missing = [c for c in target.primary_key if c not in batch.deletes_keyed_by]
            if batch.deletes and missing:
                raise IngestionError(
                    f"job {self.job.name!r}: the range holds {batch.deletes} tombstone(s) (a key, a null value) and "
                    f"the source does not say which of the target's key column(s) {missing} their message key "
                    "holds: declare KafkaSource(message_key=...), or tombstones=False to skip them")
            rows, types = records.select(*[f"`{c}`" for c in wanted]), {c: given[c] for c in wanted}
        dropped = [c for c in order.columns if c not in types] if order else []
        return _Shaped(rows, types, None if dropped else order, dropped)

    def _write(self, hot: HotDelta, table: VersionedTable, batch: SourceBatch, shaped: _Shaped,
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

    def _quarantine(self, malformed: DataFrame, count: int, claim: Claim, run_id: str
                    ) -> tuple[HotDelta | None, int]:
        """Write the range's `count` malformed records into the job's quarantine table;
        its hot delta (None: every record was there already, a refresh) and the versions
        written."""
        table = VersionedTable(self.spark, self.plane, self.job.quarantine_name, QUARANTINE_KEY, QUARANTINE_SCHEMA,
                               warehouse=self.warehouse)
        hot = self._open_target_delta(table, run_id)
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

    @staticmethod
    def _discard(hot: HotDelta | None) -> None:
        if hot is not None and hot.is_open:
            hot.rollback()

    def _record_failure(self, claim: Claim, steps: _Steps, exc: BaseException) -> None:
        error = _one_line(exc)
        with self.plane.begin() as conn:
            if self.log.mark_failure(claim.job_id, error, conn=conn, run_id=claim.run_id):
                for step in steps.failed(error):
                    self.log.record_step(claim.job_id, claim.attempt, step, conn=conn)


def _as_planned(requested: DataRange, planned: DataRange) -> DataRange:
    """The requested range, run as the planner planned the range at its start: due again
    (an empty or upstream re-run) is a refresh; an end left to the run (`id:100-`, an old
    partition key) is the planned end, so it stays within the planner's bound."""
    if planned.refresh:
        requested = replace(requested, refresh=True)
    if requested.end is None:
        requested = replace(requested, end=planned.end)
    return requested


def _delete_quietly(table: VersionedTable, discarded: DeltaInfo) -> None:
    """Delete a discarded delta's files; a failure leaves orphans that table maintenance
    removes (`offset_assets.versioned.maintenance`), never a reason to stop the range."""
    try:
        table.files.delete(discarded.data_path)
    except Exception:  # noqa: BLE001 - the files are garbage either way
        logger.exception("files of discarded hot delta %s of %s not deleted", discarded.delta_num,
                         discarded.table_name)


def _key_range(batch: SourceBatch, target: TargetTable) -> tuple[Any, Any] | None:
    """The source's range of the target's first key column, when it has one."""
    if batch.key_range is None or batch.row_count is None:
        return None
    column, lowest, highest = batch.key_range
    return (lowest, highest) if column == target.primary_key[0] else None


def _backlog_args(planned: DataRange | None) -> dict[str, Any]:
    """The backlog the range belongs to, recorded in job_log's runtime_args for progress."""
    if planned is None or planned.backlog is None:
        return {}
    return {"backlog_end": planned.backlog.end, "backlog_ranges": planned.backlog.ranges}


def is_open_window(data_range: DataRange, now: datetime) -> bool:
    """Whether `data_range` is a time window that has not ended at `now`: rows can still
    arrive in it, so ingesting it cannot complete it."""
    if data_range.kind != RangeKind.TIME_WINDOW or data_range.end is None:
        return False
    moment = now.astimezone(UTC).replace(tzinfo=None) if now.tzinfo else now
    return parse_time(data_range.end) > moment


def plan_inputs(job: IngestionJob, log: JobLog, now: datetime | None = None) -> PlanInputs:
    """Read the outside facts the job's planner needs (source max id, Kafka offsets,
    upstream job log); no Spark, so sensors can call it."""
    planner = job.planner
    if isinstance(planner, TimeWindowPlanner):
        return PlanInputs(now=now or datetime.now(UTC))
    if isinstance(planner, AutoIncrementIdPlanner):
        max_id = getattr(job.source, "max_id", None)
        if max_id is None:
            raise PlanningError(f"job {job.name!r}: id ranges need a source with max_id()")
        return PlanInputs(source_max_id=max_id())
    if isinstance(planner, KafkaOffsetPlanner):
        latest = getattr(job.source, "latest_offsets", None)
        return PlanInputs(latest_offsets=latest() if latest else None)
    if isinstance(planner, UpstreamPlanner):
        return PlanInputs(upstream_history=log.history(planner.upstream_job))
    raise PlanningError(f"job {job.name!r}: unknown planner {planner!r}")


def plan_ranges(job: IngestionJob, log: JobLog, now: datetime | None = None) -> list[DataRange]:
    """The job's due ranges from its job_log history, in run order."""
    return job.planner.plan(log.history(job.name), plan_inputs(job, log, now))


def _one_line(exc: BaseException) -> str:
    """What failed, in one line for job_log. An error raised in an executor's Python
    worker (a source's read) arrives as a PythonException whose first line only says so;
    its last line is the worker's own error."""
    text = str(exc).strip()
    lines = text.splitlines()
    if isinstance(exc, PythonException) and lines:
        return lines[-1]
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"
