"""A hot delta: the one open delta of a versioned table, written by one holder.

`HotDelta` turns each write into versions (the rules are `writes.py`) and stores them as
immutable Parquet files under the delta's folder; nothing is visible until the delta is
committed (`commit`, or `commit.py` for several tables in one transaction) or rolled
back. `HotTable` is what a hot delta needs of its table (`VersionedTable` has it).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Protocol

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from offset_assets.control_plane.database import ControlPlane
from offset_assets.control_plane.delta_catalog import DeltaCatalog
from offset_assets.control_plane.delta_catalog.records import COMMITTED, DeltaInfo, HotCommit, SnapshotInfo
from offset_assets.versioned import writes
from offset_assets.versioned.caching import storage_level
from offset_assets.versioned.errors import (
    ConflictingStatesError,
    DeltaClosedError,
    InvalidSysOpError,
    NullKeyError,
    SchemaMismatchError,
)
from offset_assets.versioned.layout import OP_DELETE, SYS_OP, WarehouseFiles, noop_path, write_path
from offset_assets.versioned.reads import TableReader
from offset_assets.versioned.table_schema import conform
from offset_assets.versioned.writes import Refusal, WriteStats

__all__ = ["HotDelta", "HotTable"]

# Versions per Parquet file written by one write (more files only for very large writes).
ROWS_PER_FILE = 1_000_000
MAX_EXAMPLES = 5


class HotTable(Protocol):
    """What a hot delta uses of its table (`VersionedTable` is one)."""

    name: str
    plane: ControlPlane
    primary_key: list[str]
    schema: StructType
    catalog: DeltaCatalog
    files: WarehouseFiles
    reader: TableReader

    @property
    def data_columns(self) -> list[str]: ...

    def actual_sources(
        self, as_of_delta: int | None, check_committed: bool = False
    ) -> tuple[SnapshotInfo | None, list[DeltaInfo], list[DeltaInfo]]: ...


class HotDelta:
    """The open (hot) delta of one table: written by one holder, invisible until committed."""

    def __init__(self, table: HotTable, info: DeltaInfo) -> None:
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
              last: bool = False, large: bool = False) -> WriteStats:
        """Write rows (the data columns, optional `sys_op`: 0 upsert, 1 delete).

        `actual`: the caller's read of the actual rows (data columns, sys_op, sys_from) of
        at least the keys it writes, when it has one (the engine read them to find the
        rows a processed key no longer yields): the write then reads nothing else.
        `refusal`: rows the caller refuses (flagged in a column of `df`); one refuses the
        whole write, like bad input.
        `last`: no write into this delta follows (a later one is refused), so the rows
        that created no version get no file: that file only lets a later write into the
        same delta refuse another state of those keys (a Spark job saved).
        `large`: the rows may not fit in memory (a batch above the catalog's limit): the
        frames the write reads twice are cached on disk only (`caching.storage_level`)."""
        self._check_writable("write to")
        table = self.table
        keep = [refusal.column] if refusal else []
        stats = self._write(conform(table.name, df, table.schema, table.primary_key, keep=keep), actual, refusal,
                            keep_unchanged=not last, large=large)
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
               refusal: Refusal | None = None, keep_unchanged: bool = True, large: bool = False) -> WriteStats:
        table = self.table
        # Persisted: the incoming keys select the candidate actual versions (a semi-join)
        # and the rows are classified, without computing the caller's DataFrame twice.
        level = storage_level(large)
        incoming = incoming.persist(level)
        try:
            if actual is None:
                candidates = self._candidates(incoming.select(*table.primary_key))
            else:
                candidates = actual.select(*table.data_columns, SYS_OP, "sys_from")
            classified = writes.classify(
                incoming, self._prior_states(), candidates, table.schema, table.primary_key,
                refused=refusal.column if refusal else None,
            ).persist(level)
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
        snapshot, after, _ = table.actual_sources(self.delta_num - 1)
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
        """Make this delta visible (`commit.py` commits several tables at once)."""
        commit_ts = self.table.catalog.commit([self.commit_entry()])
        self.mark_committed(commit_ts)
        return self.info

    def commit_entry(self) -> HotCommit:
        """This delta as the catalog commits it: table, number, versions and data path
        (`DeltaClosedError` when it is no longer open)."""
        self._check_open("commit")
        return (self.table.name, self.delta_num, self.rows_upserted, self.rows_deleted, self.data_path)

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

    def mark_committed(self, commit_ts: float) -> None:
        """Close this delta as committed at `commit_ts`, once the catalog's commit
        transaction has ended: no write may follow, and `info` is its committed row."""
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
