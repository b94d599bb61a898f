"""A hot delta: the one open delta of a versioned table, written by one holder.

`HotDelta` turns each write into versions (the rules are `writes.py`) and stores them as
immutable Parquet files under the delta's folder; nothing is visible until the delta is
committed (`commit`, or `commit.py` for several tables in one transaction) or rolled
back. `HotTable` is what a hot delta needs of its table (`VersionedTable` has it).

A write runs one of two ways:
- its row count unknown: the classification is cached, counted by one Spark job (its
  counts refuse it before any file is written), then its versions are written;
- its row count given by the caller (`rows`: a source that counted its range) or held
  by its plan (rows the driver holds, `local_frames.local_rows`): one pass, the
  classification counted while its versions are written (an observation of the write's
  own job, no count job); a refused write's files are deleted before the error is
  raised. A write of at most `SMALL_WRITE_ROWS` rows is classified in one
  partition: no shuffle, so its pass is one Spark job with or without adaptive
  execution; a larger one is shuffled once by key into one partition per core (at
  least one per `ROWS_PER_FILE`), each classified, sorted and written as one file.
Either way nothing of a refused write is kept.

The committed versions a write is classified against (its candidates) are those of its
keys in the snapshot and the deltas after it. When the catalog counts more than
`WHOLE_SCAN_ROWS` of those, the scan is bounded by the written keys first (one Spark
job), so that Parquet skips the files (sorted by key) that cannot hold them: by the min
and max of the first key column, or its values for a write of a few rows. A new id range
written into a large table reads no file of it. A caller that knows the range of its
first key column (an id range's bounds) gives it instead: no Spark job, no semi-join, and
the written keys are checked against it as they are written. Parquet's min and max
ignore nulls, so a bound by key values also reads the versions whose first key column is
NULL (`IS NULL`, which Parquet answers from its null counts) when that column may hold
one: a NULL key is a key (`writes.py`) and must meet its actual version. A small write
does not semi-join its candidates with its keys (no shuffle, no broadcast): the
classification drops the rest, which for keys spread over a large table means
aggregating much of it in one task.

A replacing write (`writes.Replacement`: a transformation's output for the keys its
batch processed) is given its keys instead: the committed versions of those keys are its
candidates, selected by the caller (an IN filter, or a join with the keys), so they are
read once, by the write's own job, and the keys' actual rows it does not hold are
deleted. A small one reads them into its one partition when the catalog counts at most
`ONE_TASK_ROWS` committed versions (a join there needs no exchange); a larger table is
scanned in parallel and only the selected versions are shuffled into that partition.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    DataType,
    DateType,
    DecimalType,
    IntegralType,
    StringType,
    StructType,
    TimestampType,
)

from offset_assets.control_plane.database import ControlPlane
from offset_assets.control_plane.delta_catalog import DeltaCatalog
from offset_assets.control_plane.delta_catalog.records import COMMITTED, DeltaInfo, HotCommit, SnapshotInfo
from offset_assets.local_frames import collect_instants, local_rows, timestamp_columns
from offset_assets.spark import is_connect_session
from offset_assets.versioned import writes
from offset_assets.versioned.caching import storage_level
from offset_assets.versioned.errors import (
    ConflictingStatesError,
    DeltaClosedError,
    InvalidSysOpError,
    NullKeyError,
    SchemaMismatchError,
    UnorderedStatesError,
    VersionedTableError,
)
from offset_assets.versioned.evaluation import DEFAULT_SMALL_RUN_ROWS_LIMIT, ROWS_PER_PARTITION, small_run_settings
from offset_assets.versioned.in_filter import in_values
from offset_assets.versioned.key_joins import join_on_keys, nullable_columns
from offset_assets.versioned.layout import OP_DELETE, SYS_OP, WarehouseFiles, noop_path, write_path
from offset_assets.versioned.observed import ObservedAggregates
from offset_assets.versioned.reads import TableReader, versions_bound
from offset_assets.versioned.sql_text import quoted
from offset_assets.versioned.table_schema import conform
from offset_assets.versioned.writes import Refusal, Replacement, StateOrder, WriteStats

__all__ = ["HotDelta", "HotTable"]

# Versions per Parquet file written by one write (more files only for very large writes).
ROWS_PER_FILE = 1_000_000
# A write of at most this many rows (the caller's count) is classified in one partition;
# a larger one in partitions of at least as many rows, one per core at most.
SMALL_WRITE_ROWS = 50_000
# A small write of at most this many rows bounds its candidates by its keys' values
# (an IN list), a larger one by their min and max.
IN_LIST_ROWS = 1_000
# Committed versions (the catalog's count) below which a write's candidates are read
# whole: bounding the scan by the written keys would cost a Spark job to save little.
WHOLE_SCAN_ROWS = 100_000
# Committed versions a small replacing write reads in its one task (no shuffle), about
# two of the files compaction writes; a larger table is scanned in parallel.
ONE_TASK_ROWS = 2 * ROWS_PER_FILE
MAX_EXAMPLES = 5
# Options of every write into a delta. No `_SUCCESS` marker: the catalog's commit says
# which writes are complete, and readers list files, not markers (a tiny write 73 -> 64 ms:
# one file fewer to create, checksum and rename). Passed with the write, not set on the
# session, so a session the user shares keeps its own settings; a Spark Connect server
# gets them with the write too.
WRITE_OPTIONS = {"mapreduce.fileoutputcommitter.marksuccessfuljobs": "false"}
# Column types whose Parquet statistics can bound a scan by a key's values.
_PRUNABLE = (IntegralType, StringType, DateType, TimestampType, DecimalType)
_LOWEST, _HIGHEST = "__lowest_key", "__highest_key"


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
        # What the writes so far created (their inserts None once one did not count them).
        self.written = WriteStats(0, 0, 0, 0)
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

    @property
    def rows_upserted(self) -> int:
        return self.written.rows_upserted

    @property
    def rows_deleted(self) -> int:
        return self.written.rows_deleted

    @property
    def rows_unchanged(self) -> int:
        return self.written.rows_unchanged

    def __repr__(self) -> str:
        return f"HotDelta({self.table.name!r}, {self.delta_num}, {self._status})"

    def write(self, df: DataFrame, refusal: Refusal | None = None, last: bool = False, large: bool = False,
              rows: int | None = None, key_range: tuple[Any, Any] | None = None,
              replacing: Replacement | None = None,
              column_types: Mapping[str, DataType] | None = None,
              order: StateOrder | None = None) -> WriteStats:
        """Write rows (the data columns, optional `sys_op`: 0 upsert, 1 delete).

        `refusal`: rows the caller refuses (flagged in a column of `df`); one refuses the
        whole write, like bad input.
        `last`: no write into this delta follows (a later one is refused), so the rows
        that created no version get no file: that file only lets a later write into the
        same delta refuse another state of those keys (a Spark job saved).
        `large`: the rows may not fit in memory (a batch above the catalog's limit): the
        frames the write reads twice are cached on disk only (`caching.storage_level`).
        `rows`: the number of rows of `df` (or a bound of it), when the caller knows it
        without a Spark job: the write then runs in one pass (see the module docstring).
        Not given, it is read from `df`'s plan when that holds the rows itself (a frame of
        rows the driver held, `local_frames.local_rows`), and a write of few such rows
        into a small table runs as a small run does (`_local_write_settings`).
        `key_range`: with `rows`, the lowest and highest value the first primary-key
        column of `df` can hold (an id range's bounds): the candidates are bounded by them
        without a Spark job, and a row outside refuses the write.
        `replacing`: the keys whose actual rows `df` replaces (`writes.Replacement`): their
        committed versions are the candidates (read once, without a lookup by the written
        keys), and each of them that has an actual row and none in `df` is deleted.
        `column_types`: the types of `df`'s columns other than the refusal's, when the
        caller knows them (it built `df`, or asked its schema already): they are checked as
        given, not asked of Spark (a Spark Connect client asks the server to analyse the
        plan).
        `order`: several rows of one key in `df` are ordered (`writes.StateOrder`): the key
        takes its last row's state, where an unordered write refuses two states. Its
        columns are columns of `df`, stored only when they are the table's."""
        self._check_writable("write to")
        if replacing is not None and key_range is not None:
            raise VersionedTableError(self.table.name, "a replacing write takes no key range: its keys are given")
        table = self.table
        keep = [refusal.column] if refusal else []
        ordering = None
        if order is not None:
            types = column_types if column_types is not None else {f.name: f.dataType for f in df.schema.fields}
            missing = [c for c in order.columns if c not in types]
            if missing:
                raise SchemaMismatchError(table.name,
                                          f"the write is ordered by column(s) {missing}, which the rows lack")
            keep += [c for c in order.columns if c not in table.schema.fieldNames()]
            ordering = (order, types[order.order_by])
        incoming = conform(table.name, df, table.schema, table.primary_key, keep=keep, given=column_types)
        local = local_rows(df) if rows is None and key_range is None else None
        if local is not None:
            with self._local_write_settings(local):
                stats = self._write_in_one_pass(incoming, local, refusal, keep_unchanged=not last, large=large,
                                                replacing=replacing, ordering=ordering)
        elif rows is None:
            stats = self._write(incoming, refusal, keep_unchanged=not last, large=large, replacing=replacing,
                                ordering=ordering)
        else:
            stats = self._write_in_one_pass(incoming, rows, refusal, keep_unchanged=not last, large=large,
                                            key_range=key_range, replacing=replacing, ordering=ordering)
        self._last_written = last
        return stats

    def _local_write_settings(self, rows: int) -> AbstractContextManager[None]:
        """The session's settings for a write of `rows` rows the driver holds: a small
        run's (`evaluation.py`) when they and the committed versions they are classified
        against are few, since the write's query reads nothing else."""
        committed = self._committed()
        candidates = 0 if committed is None else committed[1]
        return small_run_settings(self.table.reader.spark, [candidates, rows], DEFAULT_SMALL_RUN_ROWS_LIMIT)

    def write_new_versions(self, df: DataFrame, rows: int,
                           column_types: Mapping[str, DataType] | None = None) -> WriteStats:
        """Append `rows` upserts that the caller knows are new states of distinct keys not
        written earlier into this delta (a transformation's meta: every processed key gets
        a new process_ts), skipping the classification and its read of the actual state.
        `column_types`: as `write`'s."""
        self._check_writable("write to")
        table = self.table
        incoming = conform(table.name, df, table.schema, table.primary_key, given=column_types)
        versions = incoming.selectExpr(*[quoted(c) for c in table.data_columns],
                                       f"0 AS {SYS_OP}", f"CAST({int(self.delta_num)} AS BIGINT) AS sys_from")
        number = self._writes + 1
        path = write_path(self.data_path, number)
        try:
            _write_parquet(versions, path, rows, table.primary_key)
        except BaseException:
            table.files.delete(path)
            raise
        self._writes = number
        self._version_paths.append(path)
        return self._add(WriteStats(rows, 0, 0))

    def savepoint(self) -> tuple[int, int, WriteStats]:
        """A point to return to with `restore`: the writes made so far."""
        return len(self._version_paths), len(self._unchanged_paths), self.written

    def restore(self, point: tuple[int, int, WriteStats]) -> None:
        """Undo the writes made since `point` (their folders are deleted): a caller whose
        related write into another table failed keeps this delta usable without them."""
        self._check_open("restore")
        versions, unchanged, stats = point
        for path in self._version_paths[versions:] + self._unchanged_paths[unchanged:]:
            self.table.files.delete(path)
        del self._version_paths[versions:]
        del self._unchanged_paths[unchanged:]
        self.written = stats

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
        incoming = conform(table.name, keys, table.schema, table.primary_key, others)
        local = local_rows(keys_df)
        if local is None:
            return self._write(incoming)
        with self._local_write_settings(local):
            return self._write_in_one_pass(incoming, local, None, keep_unchanged=True, large=False)

    def _write(self, incoming: DataFrame, refusal: Refusal | None = None,
               keep_unchanged: bool = True, large: bool = False, replacing: Replacement | None = None,
               ordering: tuple[StateOrder, DataType] | None = None) -> WriteStats:
        table = self.table
        # Persisted: the incoming keys select the candidate actual versions (a semi-join)
        # and the rows are classified, without computing the caller's DataFrame twice.
        level = storage_level(large)
        incoming = incoming.persist(level)
        try:
            committed = self._committed()
            candidates = None if committed is None else (
                replacing.select(table.reader.scan(committed[0]), False) if replacing
                else self._candidates(incoming, None, *committed))
            classified = writes.classify(
                incoming, self._prior_states(), candidates, table.schema, table.primary_key,
                refused=refusal.column if refusal else None, replacing=replacing is not None,
                **_order_arguments(ordering),
            ).persist(level)
            try:
                row = classified.agg(*writes.counts_of(classified, committed=candidates is not None)).first()
                counts = {kind: int(row[kind] or 0) for kind in writes.KINDS}
                self._refuse_bad_rows(classified, counts, refusal, ordering)
                stats = writes.stats_of(row.asDict(), committed=candidates is not None)
                self._store(classified, stats, keep_unchanged, committed=candidates is not None)
            finally:
                classified.unpersist()
        finally:
            incoming.unpersist()
        return self._add(stats)

    def _write_in_one_pass(self, incoming: DataFrame, rows: int, refusal: Refusal | None,
                           keep_unchanged: bool, large: bool,
                           key_range: tuple[Any, Any] | None = None, replacing: Replacement | None = None,
                           ordering: tuple[StateOrder, DataType] | None = None) -> WriteStats:
        """Classify, count and write in one Spark job (the counts observed while the
        versions are written); a refused write's files are deleted before it raises."""
        table = self.table
        first_key = table.primary_key[0]
        small = rows <= SMALL_WRITE_ROWS
        committed = self._committed()
        bounded = key_range is not None and isinstance(table.schema[first_key].dataType, _PRUNABLE)
        # A large write whose candidates are looked up by its keys reads its rows twice:
        # cached. A small one reads them again (its cache would be a Spark job of its own
        # under adaptive execution); one with nothing committed, bounded by the caller's
        # key range or replacing the caller's keys reads them once.
        cache = committed is not None and not small and not bounded and replacing is None
        if cache:
            incoming = incoming.persist(storage_level(large))
        try:
            if committed is None:
                candidates = None
            elif replacing is not None:
                candidates = self._replaced_candidates(replacing, small, *committed)
            else:
                candidates = (self._candidates_within(*key_range, committed[0]) if bounded
                              else self._candidates(incoming, rows, *committed))
            partitions = 1 if small else _partitions(table.reader.spark, rows)
            classified = writes.classify(
                incoming, self._prior_states(), candidates, table.schema, table.primary_key,
                refused=refusal.column if refusal else None, partitions=partitions,
                replacing=replacing is not None, **_order_arguments(ordering),
            )
            number = self._writes + 1
            versions_at, unchanged_at = write_path(self.data_path, number), noop_path(self.data_path, number)
            extent = [F.min(f"`{first_key}`").alias(_LOWEST), F.max(f"`{first_key}`").alias(_HIGHEST)]
            observed = ObservedAggregates(table.name, classified,
                                          *writes.counts_of(classified, committed=candidates is not None),
                                          *(extent if key_range is not None else []))
            try:
                written = _write_sorted(writes.versions_of(observed.observed, table.schema, table.primary_key,
                                                           self.delta_num, committed=candidates is not None),
                                        versions_at, table.primary_key)
                seen = observed.read(written)
                counts = {kind: int(seen.get(kind) or 0) for kind in writes.KINDS}
                if key_range is not None:
                    self._check_key_range(key_range, seen.get(_LOWEST), seen.get(_HIGHEST))
                self._refuse_bad_rows(classified, counts, refusal, ordering)
                stats = writes.stats_of(seen, committed=candidates is not None)
                if not stats.rows_upserted + stats.rows_deleted:
                    table.files.delete(versions_at)  # the empty file of a write that made no version
                if stats.rows_unchanged and keep_unchanged:  # a second pass, for a later write's check
                    _write_sorted(writes.unchanged_of(classified, table.schema), unchanged_at, table.primary_key)
            except BaseException:
                table.files.delete(versions_at)
                table.files.delete(unchanged_at)
                raise
        finally:
            if cache:
                incoming.unpersist()
        self._writes = number
        if stats.rows_upserted + stats.rows_deleted:
            self._version_paths.append(versions_at)
        if stats.rows_unchanged and keep_unchanged:
            self._unchanged_paths.append(unchanged_at)
        return self._add(stats)

    def _add(self, stats: WriteStats) -> WriteStats:
        self.written = self.written.plus(stats)
        return stats

    def _rows_once_committed(self) -> int | None:
        """The table's actual rows once this open delta is committed: those as of the last
        committed delta, plus the keys the writes inserted, minus the keys they deleted
        (one state per key per delta, so no key is counted twice). None when either is
        unknown."""
        if self.info.actual_rows is None or self.written.rows_inserted is None:
            return None
        return self.info.actual_rows + self.written.rows_inserted - self.written.rows_deleted

    def _prior_states(self) -> DataFrame | None:
        """States already written into this hot delta (versions and unchanged rows)."""
        if not self._version_paths and not self._unchanged_paths:
            return None
        table = self.table
        versions = writes.state_of(table.reader.scan(self._version_paths), table.schema, table.primary_key)
        unchanged = table.reader.scan(self._unchanged_paths).select(*table.data_columns, SYS_OP)
        return versions.unionByName(unchanged)

    def _committed(self) -> tuple[list[str], int | None] | None:
        """The folders of the versions that may be actual before this delta (the latest
        snapshot's and the deltas' after it) and the catalog's count of those versions
        (None when one is unknown); None when nothing is committed."""
        snapshot, after, _ = self.table.actual_sources(self.delta_num - 1)
        if snapshot is None and not after:
            return None
        paths = ([snapshot.data_path] if snapshot else []) + [d.data_path for d in after]
        listed = versions_bound(after)
        return paths, None if listed is None else listed + (snapshot.row_count if snapshot else 0)

    def _candidates_within(self, low: Any, high: Any, paths: list[str]) -> DataFrame:
        """Committed versions under `paths` whose first key column lies in [low, high], or
        is NULL where the column may be: a filter Parquet answers from its statistics. Not
        semi-joined with the written keys: the classification drops the candidates of keys
        nobody writes."""
        first = self.table.schema[self.table.primary_key[0]]
        column = F.col(f"`{first.name}`")
        within = column.between(F.lit(low), F.lit(high))
        return self.table.reader.scan(paths).where(within | column.isNull() if first.nullable else within)

    def _replaced_candidates(self, replacing: Replacement, small: bool, paths: list[str],
                             committed: int | None) -> DataFrame:
        """Committed versions under `paths` (`committed` of them) of the keys a write
        replaces. A small write is classified in one partition: its candidates are read
        into it (joined there with the keys, no exchange) when the catalog counts at most
        `ONE_TASK_ROWS` of them; a larger table is scanned in parallel and only the
        selected versions are gathered into one partition (a shuffle: one Spark job)."""
        scan = self.table.reader.scan(paths)
        if not small:
            return replacing.select(scan, False)
        if committed is not None and committed <= ONE_TASK_ROWS:
            return replacing.select(scan, True)
        return replacing.select(scan, False).repartition(1)

    def _check_key_range(self, key_range: tuple[Any, Any], lowest: Any, highest: Any) -> None:
        """Refuse a write whose keys fall outside the range its caller gave: its candidates
        were bounded by it, so a key outside could have missed its actual version."""
        low, high = key_range
        if lowest is not None and (lowest < low or highest > high):
            raise VersionedTableError(
                self.table.name,
                f"{self.table.primary_key[0]!r} values {lowest!r}..{highest!r} fall outside the key range "
                f"{low!r}..{high!r} given for the write; nothing written",
            )

    def _candidates(self, incoming: DataFrame, rows: int | None, paths: list[str], committed: int | None,
                    ) -> DataFrame:
        """Committed versions (under `paths`, `committed` of them) of the keys of
        `incoming` (`rows` rows, when the caller counted them). A small write is classified
        in one partition, where the candidates are not semi-joined with its keys (a join
        would be a shuffle or a broadcast, a Spark job of its own): the classification
        drops the keys nobody writes. Its candidates are bounded by the values of its first
        key column when it has at most `IN_LIST_ROWS` rows (a longer IN list costs more to
        parse than it saves), by their min and max otherwise."""
        small = rows is not None and rows <= SMALL_WRITE_ROWS
        table = self.table
        pk = table.primary_key
        scan = table.reader.scan(paths)
        keys = incoming.select(*pk)
        nullable = nullable_columns(table.schema)
        if committed is not None and committed <= WHOLE_SCAN_ROWS:
            return scan if small else join_on_keys(scan, keys, pk, "left_semi", nullable)
        first = table.schema[pk[0]]
        if not isinstance(first.dataType, _PRUNABLE):
            return join_on_keys(scan, keys, pk, "left_semi", nullable)
        if not small:
            return join_on_keys(scan.where(_within(incoming, pk[0])), keys, pk, "left_semi", nullable)
        # One partition, no join: the classification drops the candidates of keys not written.
        if rows <= IN_LIST_ROWS:  # the first key column's values (a NULL among them: IS NULL)
            values = [row[0] for row in collect_instants(
                incoming.coalesce(1).select(pk[0]).distinct(), [pk[0]],
                timestamp_columns({pk[0]: first.dataType}))]
            return scan.where(in_values(pk[0], values, first.dataType))
        return scan.where(_within(incoming.coalesce(1), pk[0]))

    def _refuse_bad_rows(self, classified: DataFrame, counts: dict[str, int], refusal: Refusal | None,
                         ordering: tuple[StateOrder, DataType] | None = None) -> None:
        table = self.table
        pk = table.primary_key
        if refusal is not None and counts.get(writes.REFUSED):
            example = classified.where(F.col(writes.KIND) == writes.REFUSED).select(*refusal.example_columns).first()
            raise refusal.error(example.asDict() if example is not None else {})

        def rows_of(kind: str, *columns: str) -> list[dict]:
            found = classified.where(F.col(writes.KIND) == kind).select(*columns).distinct()
            return [row.asDict() for row in found.limit(MAX_EXAMPLES).collect()]

        if counts.get(writes.BAD_KEY):
            required = [f.name for f in table.schema.fields if f.name in pk and not f.nullable]
            raise NullKeyError(
                table.name,
                f"null in primary-key column(s) {required}, which the schema declares not nullable "
                f"(a nullable key column takes NULL as a key), for key(s) {rows_of(writes.BAD_KEY, *pk)}; "
                "nothing written",
            )
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
        order = ordering[0] if ordering is not None else None
        if order is not None and order.within is not None and counts.get(writes.CONFLICT_UNORDERED):
            found = rows_of(writes.CONFLICT_UNORDERED, *pk, writes.WITHIN_LOW, writes.WITHIN_HIGH)
            keys = [{c: row[c] for c in pk} for row in found]
            spread = [(row[writes.WITHIN_LOW], row[writes.WITHIN_HIGH]) for row in found]
            shown = ", ".join(f"{key} ({order.within} {low} and {high})" for key, (low, high) in zip(keys, spread,
                                                                                                   strict=True))
            raise UnorderedStatesError(
                table.name,
                f"different states of key(s) {shown} in rows of different {order.within!r}, whose "
                f"{order.order_by!r} values do not compare, in one write to delta {self.delta_num} "
                f"({counts[writes.CONFLICT_UNORDERED]} key(s) in all); nothing written",
                keys, order.within, spread,
            )
        if counts.get(writes.CONFLICT_IN_WRITE):
            keys = rows_of(writes.CONFLICT_IN_WRITE, *pk)
            at = f" at the same highest {order.order_by!r}" if order is not None else ""
            raise ConflictingStatesError(
                table.name,
                f"different states of key(s) {keys}{at} in one write to delta {self.delta_num} "
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

    def _store(self, classified: DataFrame, stats: WriteStats, keep_unchanged: bool, committed: bool) -> None:
        table = self.table
        number = self._writes + 1
        versions_at, unchanged_at = (
            write_path(self.data_path, number),
            noop_path(self.data_path, number),
        )
        versions = stats.rows_upserted + stats.rows_deleted
        try:
            if versions:
                frame = writes.versions_of(classified, table.schema, table.primary_key, self.delta_num,
                                           committed=committed)
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
        return HotCommit(self.table.name, self.delta_num, self.rows_upserted, self.rows_deleted, self.data_path,
                         self._rows_once_committed())

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
        actual_rows = self._rows_once_committed()
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
            actual_rows,
        )


def _order_arguments(ordering: tuple[StateOrder, DataType] | None) -> dict[str, Any]:
    """`writes.classify`'s arguments of an ordered write."""
    return {} if ordering is None else {"order": ordering[0], "order_type": ordering[1]}


def _write_parquet(frame: DataFrame, path: str, rows: int, primary_key: Sequence[str]) -> None:
    files = max(1, math.ceil(rows / ROWS_PER_FILE))
    _write_sorted(frame.coalesce(files), path, primary_key)


def _write_sorted(frame: DataFrame, path: str, primary_key: Sequence[str]) -> DataFrame:
    """One file per partition of `frame`, sorted by key (Spark drops the sort when the
    partition already is, as a classification in `partitions` leaves it); returns the
    frame written (its `executionInfo` holds a Spark Connect write's observed metrics)."""
    sorted_frame = frame.sortWithinPartitions(*primary_key)
    # "error", not its alias "errorifexists": Spark Connect accepts only the former.
    sorted_frame.write.mode("error").options(**WRITE_OPTIONS).parquet(path)
    return sorted_frame


def _within(incoming: DataFrame, column: str) -> Column:
    """`column` between the smallest and the largest value `incoming` has in it, or NULL
    when `incoming` has a NULL in it (one Spark job): a filter Parquet answers from its
    statistics (min and max, which ignore nulls, and null counts), skipping the files and
    row groups outside. No value (an empty write): no candidate."""
    name = f"`{column}`"
    low, high, nulls = incoming.agg(F.min(name), F.max(name), F.max(F.col(name).isNull())).first()
    condition = F.lit(False) if low is None else F.col(name).between(F.lit(low), F.lit(high))
    return condition | F.col(name).isNull() if nulls else condition


def _partitions(spark: SparkSession, rows: int) -> int:
    """Partitions of a write of `rows` that is not small: one per core of the session (a
    Spark Connect client asks `spark.default.parallelism`), at least one per
    `ROWS_PER_FILE`, none below `ROWS_PER_PARTITION` rows."""
    if is_connect_session(spark):
        cores = int(spark.conf.get("spark.default.parallelism", None) or 1)
    else:
        cores = spark.sparkContext.defaultParallelism
    return max(1, math.ceil(rows / ROWS_PER_FILE), min(cores, rows // ROWS_PER_PARTITION))
