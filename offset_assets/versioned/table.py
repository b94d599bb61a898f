"""A versioned table: every state of each key, kept as numbered deltas.

Writers open the table's one hot delta, write Spark DataFrames into it and commit (the
delta becomes visible atomically, numbered last committed + 1) or roll back. Readers
see committed deltas only: the actual state, the state as of a delta or a timestamp,
versions started or finished in a range of deltas, and changes since an update_ts.
Storage is described in `layout.py`, read plans in `reads.py`, the rules that turn a
write into versions in `writes.py`.
"""

from __future__ import annotations

import json
import math
import os
import socket
from collections.abc import Mapping, Sequence

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from offset_assets.config import default_warehouse
from offset_assets.control_plane.database import ControlPlane
from offset_assets.control_plane.delta_catalog import (
    COMMITTED,
    DeltaCatalog,
    DeltaInfo,
    SnapshotInfo,
)
from offset_assets.versioned import writes
from offset_assets.versioned.errors import (
    ConflictingStatesError,
    DeltaClosedError,
    InvalidSysOpError,
    NullKeyError,
    SchemaMismatchError,
    TableDefinitionError,
    VersionedTableError,
)
from offset_assets.versioned.layout import (
    OP_DELETE,
    SYS_OP,
    WarehouseFiles,
    check_warehouse_location,
    new_delta_path,
    noop_path,
    table_root,
    write_path,
)
from offset_assets.versioned.reads import ActualFilter, TableReader
from offset_assets.versioned.table_schema import conform, evolve, validate_definition
from offset_assets.versioned.writes import Refusal, WriteStats

__all__ = ["HotDelta", "VersionedTable", "WriteStats"]

# Versions per Parquet file written by one write (more files only for very large writes).
ROWS_PER_FILE = 1_000_000
MAX_EXAMPLES = 5
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
        spark: SparkSession,
        plane: ControlPlane,
        name: str,
        primary_key: Sequence[str],
        schema: StructType,
        warehouse: str | None = None,
    ) -> None:
        validate_definition(name, primary_key, schema)
        self.spark = spark
        self.plane = plane
        self.name = name
        self.primary_key = list(primary_key)
        self.schema = schema
        self.catalog = DeltaCatalog(plane)
        self.warehouse = check_warehouse_location(spark, warehouse or default_warehouse())
        self.root = table_root(self.warehouse, name)
        self.files = WarehouseFiles()
        self.reader = TableReader(spark, name, schema, self.primary_key)
        self._register()

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

    def rollback_hot(self) -> DeltaInfo | None:
        """Discard the hot delta, whoever holds it (cleanup after a crashed holder)."""
        info = self.catalog.hot(self.name)
        if info is None:
            return None
        if self.catalog.rollback(self.name, info.delta_num, data_path=info.data_path):
            self.files.delete(info.data_path)
        return info

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
        `where_in`: column -> allowed values, pushed down to the Parquet scan.
        """
        if as_of_delta is not None and as_of_delta < 0:
            raise VersionedTableError(self.name, f"as_of_delta must be >= 0, got {as_of_delta}")
        deltas = self.catalog.committed(self.name, up_to_delta=as_of_delta)
        last = deltas[-1].delta_num if deltas else 0
        if as_of_delta is not None and as_of_delta > last:
            raise VersionedTableError(self.name, f"delta {as_of_delta} is not committed (last committed: {last})")
        snapshot, after, readable = self._actual_sources(deltas)
        return self.reader.actual(snapshot, after, readable, ActualFilter(where_in, keys))

    def _actual_sources(self, deltas: list[DeltaInfo]) -> tuple[SnapshotInfo | None, list[DeltaInfo], list[DeltaInfo]]:
        """(latest snapshot, non-empty deltas after it, all non-empty deltas) for the actual
        state at the last of `deltas` (committed deltas 1..n)."""
        last = deltas[-1].delta_num if deltas else 0
        snapshot = self.catalog.snapshot_at(self.name, last) if last else None
        base = snapshot.delta_num if snapshot else 0
        readable = [d for d in deltas if not d.is_empty]
        return snapshot, [d for d in readable if d.delta_num > base], readable

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

    # -- maintenance -------------------------------------------------------------------------

    def compact(self) -> int:
        """Snapshot the actual state at the last committed delta; returns its number."""
        from offset_assets.versioned.compaction import compact

        return compact(self)

    def cleanup(self, min_age_seconds: float | None = None) -> list[str]:
        """Remove snapshots superseded and folders unreferenced (crashed or rolled-back
        writes) for longer than `min_age_seconds` (default a day); returns their paths."""
        from offset_assets.versioned.maintenance import DEFAULT_RETENTION_S, cleanup

        age = DEFAULT_RETENTION_S if min_age_seconds is None else min_age_seconds
        return cleanup(self, age).removed_paths


class HotDelta:
    """The open (hot) delta of one table: written by one holder, invisible until committed."""

    def __init__(self, table: VersionedTable, info: DeltaInfo) -> None:
        self.table = table
        self.info = info
        self.rows_upserted = 0
        self.rows_deleted = 0
        self.rows_unchanged = 0
        self._status = "open"
        self._version_paths: list[str] = []
        self._unchanged_paths: list[str] = []
        self._writes = 0
        self._last_written = False  # a write said it was the last: no other may follow

    @property
    def delta_num(self) -> int:
        return self.info.delta_num

    @property
    def data_path(self) -> str:
        return self.info.data_path

    @property
    def is_open(self) -> bool:
        return self._status == "open"

    def __repr__(self) -> str:
        return f"HotDelta({self.table.name!r}, {self.delta_num}, {self._status})"

    def write(self, df: DataFrame, actual: DataFrame | None = None, refusal: Refusal | None = None,
              last: bool = False) -> WriteStats:
        """Write rows (the data columns, optional `sys_op`: 0 upsert, 1 delete).

        `actual`: the caller's read of the actual rows (data columns, sys_op, sys_from) of
        at least the keys it writes, when it has one (the engine read them to find the
        rows a processed key no longer yields): the write then reads nothing else.
        `refusal`: rows the caller refuses (flagged in a column of `df`); one refuses the
        whole write, like bad input.
        `last`: no write into this delta follows (a later one is refused), so the rows
        that created no version get no file: that file only lets a later write into the
        same delta refuse another state of those keys (a Spark job saved)."""
        self._check_writable("write to")
        table = self.table
        keep = [refusal.column] if refusal else []
        stats = self._write(conform(table.name, df, table.schema, table.primary_key, keep=keep), actual, refusal,
                            keep_unchanged=not last)
        self._last_written = last
        return stats

    def write_new_versions(self, df: DataFrame, rows: int) -> WriteStats:
        """Append `rows` upserts that the caller knows are new states of distinct keys not
        written earlier into this delta (a transformation's meta: every processed key gets
        a new process_ts), skipping the classification and its read of the actual state."""
        self._check_writable("write to")
        table = self.table
        incoming = conform(table.name, df, table.schema, table.primary_key)
        versions = incoming.select(*[F.col(f"`{c}`") for c in table.data_columns],
                                   F.lit(0).alias(SYS_OP), F.lit(self.delta_num).cast("long").alias("sys_from"))
        number = self._writes + 1
        path = write_path(self.data_path, number)
        try:
            _write_parquet(versions, path, rows, table.primary_key)
        except BaseException:
            table.files.delete(path)
            raise
        self._writes = number
        self._version_paths.append(path)
        self.rows_upserted += rows
        return WriteStats(rows, 0, 0)

    def savepoint(self) -> tuple[int, int, int, int, int]:
        """A point to return to with `restore`: the writes made so far."""
        return (len(self._version_paths), len(self._unchanged_paths),
                self.rows_upserted, self.rows_deleted, self.rows_unchanged)

    def restore(self, point: tuple[int, int, int, int, int]) -> None:
        """Undo the writes made since `point` (their folders are deleted): a caller whose
        related write into another table failed keeps this delta usable without them."""
        self._check_open("restore")
        versions, unchanged, upserted, deleted, same = point
        for path in self._version_paths[versions:] + self._unchanged_paths[unchanged:]:
            self.table.files.delete(path)
        del self._version_paths[versions:]
        del self._unchanged_paths[unchanged:]
        self.rows_upserted, self.rows_deleted, self.rows_unchanged = upserted, deleted, same

    def delete(self, keys_df: DataFrame) -> WriteStats:
        """Delete the keys in `keys_df` (primary-key columns only): tombstones at commit."""
        self._check_writable("delete from")
        table = self.table
        extra = [c for c in keys_df.columns if c not in table.primary_key]
        if extra:
            raise SchemaMismatchError(
                table.name,
                f"delete takes the primary-key columns {table.primary_key} only, got {extra} too",
            )
        keys = keys_df.withColumn(SYS_OP, F.lit(OP_DELETE))
        others = [c for c in table.data_columns if c not in table.primary_key]
        return self._write(conform(table.name, keys, table.schema, table.primary_key, others))

    def _write(self, incoming: DataFrame, actual: DataFrame | None = None,
               refusal: Refusal | None = None, keep_unchanged: bool = True) -> WriteStats:
        table = self.table
        # Persisted: the incoming keys select the candidate actual versions (a semi-join)
        # and the rows are classified, without computing the caller's DataFrame twice.
        incoming = incoming.persist(StorageLevel.MEMORY_AND_DISK)
        try:
            if actual is None:
                candidates = self._candidates(incoming.select(*table.primary_key))
            else:
                candidates = actual.select(*table.data_columns, SYS_OP, "sys_from")
            classified = writes.classify(
                incoming, self._prior_states(), candidates, table.schema, table.primary_key,
                refused=refusal.column if refusal else None,
            ).persist(StorageLevel.MEMORY_AND_DISK)
            try:
                counts = {row[0]: row[1] for row in classified.groupBy(writes.KIND).count().collect()}
                self._refuse_bad_rows(classified, counts, refusal)
                stats = WriteStats(
                    counts.get(writes.UPSERT, 0),
                    counts.get(writes.DELETE, 0),
                    counts.get(writes.UNCHANGED, 0),
                )
                self._store(classified, stats, keep_unchanged)
            finally:
                classified.unpersist()
        finally:
            incoming.unpersist()
        self.rows_upserted += stats.rows_upserted
        self.rows_deleted += stats.rows_deleted
        self.rows_unchanged += stats.rows_unchanged
        return stats

    def _prior_states(self) -> DataFrame | None:
        """States already written into this hot delta (versions and unchanged rows)."""
        if not self._version_paths and not self._unchanged_paths:
            return None
        table = self.table
        versions = writes.state_of(table.reader.scan(self._version_paths), table.schema, table.primary_key)
        unchanged = table.reader.scan(self._unchanged_paths).select(*table.data_columns, SYS_OP)
        return versions.unionByName(unchanged)

    def _candidates(self, keys: DataFrame) -> DataFrame | None:
        """Committed versions of `keys` that may be actual before this delta: those in the
        latest snapshot and in the deltas after it (None when nothing is committed)."""
        table = self.table
        deltas = table.catalog.committed(table.name, up_to_delta=self.delta_num - 1)
        snapshot, after, _ = table._actual_sources(deltas)
        if snapshot is None and not after:
            return None
        paths = ([snapshot.data_path] if snapshot else []) + [d.data_path for d in after]
        return table.reader.scan(paths).join(keys, on=table.primary_key, how="left_semi")

    def _refuse_bad_rows(self, classified: DataFrame, counts: dict[str, int], refusal: Refusal | None) -> None:
        table = self.table
        pk = table.primary_key
        if refusal is not None and counts.get(writes.REFUSED):
            example = classified.where(F.col(writes.KIND) == writes.REFUSED).select(*refusal.example_columns)
            raise refusal.error(example.first().asDict())

        def rows_of(kind: str, *columns: str) -> list[dict]:
            found = classified.where(F.col(writes.KIND) == kind).select(*columns).distinct()
            return [row.asDict() for row in found.limit(MAX_EXAMPLES).collect()]

        if counts.get(writes.BAD_KEY):
            raise NullKeyError(table.name, f"null primary-key value in {pk}; nothing written")
        if counts.get(writes.BAD_OP):
            values = sorted(row[writes.BAD_OP_VALUE] for row in rows_of(writes.BAD_OP, writes.BAD_OP_VALUE))
            raise InvalidSysOpError(
                table.name,
                f"sys_op must be 0 (upsert) or 1 (delete), found {', '.join(values)} "
                f"for key(s) {rows_of(writes.BAD_OP, *pk)}; nothing written",
            )
        if counts.get(writes.BAD_NULL):
            required = [f.name for f in table.schema.fields if not f.nullable and f.name not in pk]
            raise NullKeyError(
                table.name,
                f"null in non-nullable column(s) {required} for key(s) "
                f"{rows_of(writes.BAD_NULL, *pk)}; nothing written",
            )
        if counts.get(writes.CONFLICT_IN_WRITE):
            keys = rows_of(writes.CONFLICT_IN_WRITE, *pk)
            raise ConflictingStatesError(
                table.name,
                f"different states of key(s) {keys} in one write to delta {self.delta_num} "
                f"({counts[writes.CONFLICT_IN_WRITE]} key(s) in all); nothing written",
                keys,
            )
        if counts.get(writes.CONFLICT_IN_DELTA):
            keys = rows_of(writes.CONFLICT_IN_DELTA, *pk)
            raise ConflictingStatesError(
                table.name,
                f"key(s) {keys} already have a different state in hot delta {self.delta_num} "
                f"({counts[writes.CONFLICT_IN_DELTA]} key(s) in all); nothing of this write written",
                keys,
            )

    def _store(self, classified: DataFrame, stats: WriteStats, keep_unchanged: bool) -> None:
        table = self.table
        number = self._writes + 1
        versions_at, unchanged_at = (
            write_path(self.data_path, number),
            noop_path(self.data_path, number),
        )
        versions = stats.rows_upserted + stats.rows_deleted
        try:
            if versions:
                frame = writes.versions_of(classified, table.schema, table.primary_key, self.delta_num)
                _write_parquet(frame, versions_at, versions, table.primary_key)
            if stats.rows_unchanged and keep_unchanged:
                frame = writes.unchanged_of(classified, table.schema)
                _write_parquet(frame, unchanged_at, stats.rows_unchanged, table.primary_key)
        except BaseException:
            # A failed write leaves no file: the delta stays usable, or is rolled back.
            table.files.delete(versions_at)
            table.files.delete(unchanged_at)
            raise
        self._writes = number
        if versions:
            self._version_paths.append(versions_at)
        if stats.rows_unchanged and keep_unchanged:
            self._unchanged_paths.append(unchanged_at)

    def commit(self) -> DeltaInfo:
        """Make this delta visible (see `commit_deltas` for several tables at once)."""
        from offset_assets.versioned.commit import commit_deltas

        commit_deltas([self])
        return self.info

    def rollback(self) -> None:
        """Discard the delta and its files; its number is free again."""
        self._check_open("roll back")
        self.table.catalog.rollback(self.table.name, self.delta_num, data_path=self.data_path)
        self.table.files.delete(self.data_path)
        self._status = "rolled back"

    def _check_writable(self, action: str) -> None:
        self._check_open(action)
        if self._last_written:
            raise DeltaClosedError(
                self.table.name, f"cannot {action} delta {self.delta_num}: its last write is done",
            )

    def _check_open(self, action: str) -> None:
        if self._status != "open":
            raise DeltaClosedError(
                self.table.name,
                f"cannot {action} delta {self.delta_num}: it is already {self._status}",
            )

    def _mark_committed(self, commit_ts: float) -> None:
        self._status = COMMITTED
        self.info = DeltaInfo(
            self.table.name,
            self.delta_num,
            COMMITTED,
            self.data_path,
            commit_ts,
            self.info.holder,
            self.info.run_id,
            self.rows_upserted,
            self.rows_deleted,
            self.info.opened_at,
        )


def _write_parquet(frame: DataFrame, path: str, rows: int, primary_key: Sequence[str]) -> None:
    files = max(1, math.ceil(rows / ROWS_PER_FILE))
    # "error", not its alias "errorifexists": Spark Connect accepts only the former.
    frame.coalesce(files).sortWithinPartitions(*primary_key).write.mode("error").parquet(path)


def _finite(table: str, what: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise VersionedTableError(table, f"{what} must be a finite number, got {value!r}")
    return float(value)
