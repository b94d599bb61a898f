"""A versioned table: every state of each key, kept as numbered deltas.

Writers open the table's one hot delta, write Spark DataFrames into it and commit (the
delta becomes visible atomically, numbered last committed + 1) or roll back. Readers
see committed deltas only: the actual state, the state as of a delta or a timestamp,
versions started or finished in a range of deltas, and changes since an update_ts.
The hot delta is `hot_delta.py`, storage `layout.py`, read plans `reads.py`, the rules
that turn a write into versions `writes.py`. Compaction and cleanup are functions that
take the table (`compaction.py`, `maintenance.py`).
"""

from __future__ import annotations

import json
import logging
import math
import os
import socket
import sys
from collections.abc import Mapping, Sequence

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType

from offset_assets.config import default_warehouse
from offset_assets.control_plane.database import ControlPlane
from offset_assets.control_plane.delta_catalog import DeltaCatalog
from offset_assets.control_plane.delta_catalog.records import DeltaInfo, SnapshotInfo
from offset_assets.lazy_session import LazySession, SessionSource
from offset_assets.versioned.errors import TableDefinitionError, VersionedTableError
from offset_assets.versioned.hot_delta import HotDelta
from offset_assets.versioned.layout import WarehouseFiles, check_warehouse_location, new_delta_path, table_root
from offset_assets.versioned.reads import ActualFilter, TableReader, actual_bound
from offset_assets.versioned.table_schema import evolve, validate_definition

log = logging.getLogger(__name__)

__all__ = ["VersionedTable"]

REGISTER_ATTEMPTS = 3


def default_holder() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


class VersionedTable:
    """A table keyed by `primary_key` whose every state is kept, delta by delta.

    Registered in the delta catalog on first use. A definition that disagrees with the
    registered one (another primary key, a dropped column, a changed type) is refused;
    new nullable columns are added to the catalog schema (earlier versions read them as
    null).
    """

    def __init__(
        self,
        spark: SessionSource,
        plane: ControlPlane,
        name: str,
        primary_key: Sequence[str],
        schema: StructType,
        warehouse: str | None = None,
    ) -> None:
        validate_definition(name, primary_key, schema)
        self._session = LazySession(spark)
        self.plane = plane
        self.name = name
        self.primary_key = list(primary_key)
        self.schema = schema
        self.catalog = DeltaCatalog(plane)
        self.warehouse = check_warehouse_location(self._session.get, warehouse or default_warehouse())
        self.root = table_root(self.warehouse, name)
        self.files = WarehouseFiles()
        self.reader = TableReader(self._session.get, name, schema, self.primary_key)
        self._register()

    @property
    def spark(self) -> SparkSession:
        """The table's Spark session, started now when it was given as the function that
        starts it (a table the driver alone reads and writes never starts one)."""
        return self._session.get()

    def _register(self) -> None:
        for _ in range(REGISTER_ATTEMPTS):
            spec = self.catalog.register_table(self.name, self.primary_key, self.schema.json())
            if spec.primary_key != self.primary_key:
                raise TableDefinitionError(
                    self.name,
                    f"primary key {self.primary_key} differs from the registered primary key {spec.primary_key}",
                )
            stored = StructType.fromJson(json.loads(spec.schema_json))
            evolved = evolve(self.name, stored, self.schema)
            if evolved is None or self.catalog.update_schema(self.name, spec.schema_json, evolved.json()):
                return
        raise TableDefinitionError(self.name, "schema changed concurrently; try again")

    @property
    def data_columns(self) -> list[str]:
        return self.schema.fieldNames()

    def __repr__(self) -> str:
        return f"VersionedTable({self.name!r}, primary_key={self.primary_key})"

    # -- writing -------------------------------------------------------------------------

    def open_delta(self, holder: str | None = None, run_id: str | None = None) -> HotDelta:
        """Open the table's hot delta (`HotDeltaHeldError` names the holder of an open one)."""
        info = self.catalog.open_hot(
            self.name,
            holder or default_holder(),
            run_id,
            lambda num: new_delta_path(self.root, num),
        )
        return HotDelta(self, info)

    def write_delta(self, df: DataFrame, holder: str | None = None, run_id: str | None = None) -> DeltaInfo:
        """Open a delta, write `df` into it and commit it; nothing stays hot on failure."""
        hot = self.open_delta(holder=holder, run_id=run_id)
        try:
            hot.write(df)
            return hot.commit()
        except BaseException:
            if hot.is_open:
                hot.rollback()
            raise

    def discard_dead_hot(self, left: DeltaInfo | None = None) -> DeltaInfo | None:
        """Discard the hot delta a dead writer left: `left` (as the caller found it), or
        the table's hot delta now, whoever holds it. The catalog drops it only while the
        same holder and run still hold it (a writer that took the table in between keeps
        its delta), then its files are deleted; a failure to delete them leaves orphans
        that `cleanup` removes. The caller decides that the holder is dead: this is the
        one way every writer (transformations, ingestion, revert) and a person clean up
        after one. The delta discarded, or None when there was none to discard."""
        left = left if left is not None else self.catalog.hot(self.name)
        if left is None:
            return None
        discarded = self.catalog.discard_hot(self.name, left.holder, left.run_id)
        if discarded is None:
            return None
        log.warning("table %s: discarded hot delta %s left by dead writer %r (run %r)", self.name,
                    discarded.delta_num, discarded.holder, discarded.run_id)
        try:
            self.files.delete(discarded.data_path)
        except Exception:  # noqa: BLE001 - the files are garbage either way; cleanup removes them
            log.exception("table %s: files of discarded hot delta %s not deleted", self.name, discarded.delta_num)
        return discarded

    # -- delta information -----------------------------------------------------------------

    def last_committed(self) -> DeltaInfo | None:
        return self.catalog.last_committed(self.name)

    def hot(self) -> DeltaInfo | None:
        return self.catalog.hot(self.name)

    def delta(self, delta_num: int) -> DeltaInfo | None:
        return self.catalog.by_num(self.name, delta_num)

    def delta_at(self, ts: float) -> DeltaInfo | None:
        """The last delta committed at or before `ts`."""
        return self.catalog.by_timestamp(self.name, ts)

    # -- reads ---------------------------------------------------------------------------

    def read_actual(
        self,
        as_of_delta: int | None = None,
        keys: DataFrame | None = None,
        where_in: Mapping[str, Sequence] | None = None,
    ) -> DataFrame:
        """Actual records (as of committed delta `as_of_delta`, default the last one).

        `keys`: only records matching a row of `keys` on the table columns it has;
        `where_in`: column -> allowed values, pushed down to the Parquet scan. Both match
        NULL to NULL (a None value, a `keys` row holding NULL): a NULL key is a key.
        """
        return self.read_actual_bounded(as_of_delta, keys, where_in)[0]

    def read_actual_bounded(
        self,
        as_of_delta: int | None = None,
        keys: DataFrame | None = None,
        where_in: Mapping[str, Sequence] | None = None,
    ) -> tuple[DataFrame, int | None]:
        """`read_actual`, and the versions its plan scans by the catalog's row counts
        (None when one is unknown): a caller plans on that bound, never on a count."""
        if as_of_delta is not None and as_of_delta < 0:
            raise VersionedTableError(self.name, f"as_of_delta must be >= 0, got {as_of_delta}")
        snapshot, after, spanned = self.actual_sources(as_of_delta, check_committed=True)
        frame = self.reader.actual(snapshot, after, spanned, ActualFilter(where_in, keys))
        return frame, actual_bound(snapshot, after)

    def actual_sources(self, as_of_delta: int | None, check_committed: bool = False,
                       ) -> tuple[SnapshotInfo | None, list[DeltaInfo], list[DeltaInfo]]:
        """(latest snapshot, non-empty deltas after it, the deltas whose commit times the
        read looks up) for the actual state at committed delta `as_of_delta` (None: the
        last). A snapshot that stores its rows' update_ts bounds both lists to the deltas
        after it, however old the table; an older snapshot needs every delta's commit time.
        `check_committed`: refuse an `as_of_delta` beyond the last committed delta."""
        snapshot = self.catalog.snapshot_at(self.name, sys.maxsize if as_of_delta is None else as_of_delta)
        stored = snapshot is not None and snapshot.stores_update_ts
        listed = self.catalog.committed(self.name, up_to_delta=as_of_delta,
                                        after_delta=snapshot.delta_num if stored else None)
        base = snapshot.delta_num if snapshot else 0
        if check_committed and as_of_delta is not None:
            last = listed[-1].delta_num if listed else base
            if as_of_delta > last:
                raise VersionedTableError(self.name, f"delta {as_of_delta} is not committed (last committed: {last})")
        readable = [d for d in listed if not d.is_empty]
        after = [d for d in readable if d.delta_num > base]
        return snapshot, after, after if stored else readable

    def read_latest_uncommitted(self, hot: HotDelta) -> DataFrame:
        """The actual state the hot delta `hot` will leave once committed (Prostore's
        `AS OF LATEST_UNCOMMITTED_DELTA`), for its writer: the last committed state with
        the versions written into `hot` so far. Those versions have no update_ts yet
        (null): their commit time is not known before the commit."""
        if hot.table.name != self.name:
            raise VersionedTableError(self.name, f"{hot!r} is the hot delta of another table")
        if not hot.is_open:
            raise VersionedTableError(self.name, f"{hot!r} is no longer open: only an open hot delta is read")
        snapshot, after, spanned = self.actual_sources(hot.delta_num - 1)
        if hot.rows_upserted or hot.rows_deleted:  # else no file yet: the state is the last committed one
            after, spanned = [*after, hot.info], [*spanned, hot.info]
        return self.reader.actual(snapshot, after, spanned, ActualFilter())

    def read_as_of_timestamp(self, ts: float) -> DataFrame:
        """The actual state as a reader saw it at `ts` (deltas committed at or before it)."""
        info = self.delta_at(_finite(self.name, "ts", ts))
        return self.read_actual(as_of_delta=info.delta_num if info else 0)

    def read_started_in(self, d1: int, d2: int) -> DataFrame:
        """Versions (not deletions) created by deltas d1..d2 inclusive."""
        return self.reader.started_in(self._range(d1, d2))

    def read_finished_in(self, d1: int, d2: int) -> DataFrame:
        """Keys deleted by deltas d1..d2 inclusive: their tombstones (sys_op = 1), which
        carry the data of the version they deleted."""
        return self.reader.finished_in(self._range(d1, d2))

    def read_changes_since(self, update_ts: float, up_to_delta: int | None = None) -> DataFrame:
        """Every version (tombstones included) with update_ts >= `update_ts` (inclusive),
        up to delta `up_to_delta`; reads only the files of those deltas."""
        since = _finite(self.name, "update_ts", update_ts)
        return self.reader.history(self.catalog.committed(self.name, since_ts=since, up_to_delta=up_to_delta))

    def _range(self, d1: int, d2: int) -> list[DeltaInfo]:
        if d1 > d2:
            raise VersionedTableError(self.name, f"empty delta range ({d1}, {d2}): d1 > d2")
        return [d for d in self.catalog.committed(self.name, up_to_delta=d2) if d.delta_num >= d1]


def _finite(table: str, what: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise VersionedTableError(table, f"{what} must be a finite number, got {value!r}")
    return float(value)
