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

The committed versions a write is classified against (its candidates) are looked up by
`write_candidates.py`; a write's files are `delta_files.py`'s, the errors of a refused
write `write_refusals.py`'s.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractContextManager
from dataclasses import replace
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import DataType

from offset_assets.control_plane.delta_catalog.records import COMMITTED, DeltaInfo, HotCommit
from offset_assets.local_frames import local_rows
from offset_assets.versioned import held_writes, writes
from offset_assets.versioned.caching import storage_level
from offset_assets.versioned.delta_files import DeltaFiles, write_partitions
from offset_assets.versioned.errors import DeltaClosedError, SchemaMismatchError, VersionedTableError
from offset_assets.versioned.evaluation import DEFAULT_SMALL_RUN_ROWS_LIMIT, small_run_settings
from offset_assets.versioned.held_writes import HeldReplacement
from offset_assets.versioned.hot_table import HotTable
from offset_assets.versioned.layout import OP_DELETE, SYS_OP
from offset_assets.versioned.observed import ObservedAggregates
from offset_assets.versioned.sql_text import quoted
from offset_assets.versioned.table_schema import conform
from offset_assets.versioned.write_candidates import (
    bounds_by_key_range,
    check_key_range,
    committed_before,
    write_candidates,
)
from offset_assets.versioned.write_refusals import refuse_bad_rows
from offset_assets.versioned.writes import Refusal, Replacement, StateOrder, WriteStats

__all__ = ["HotDelta", "HotTable"]

# A write of at most this many rows (the caller's count) is classified in one partition;
# a larger one in partitions of at least as many rows, one per core at most.
SMALL_WRITE_ROWS = 50_000
_LOWEST, _HIGHEST = "__lowest_key", "__highest_key"


class HotDelta:
    """The open (hot) delta of one table: written by one holder, invisible until committed."""

    def __init__(self, table: HotTable, info: DeltaInfo) -> None:
        self.table = table
        self.info = info
        # What the writes so far created (their inserts None once one did not count them).
        self.written = WriteStats(0, 0, 0, 0)
        self._status = "open"
        self.files = DeltaFiles(table, info.data_path, info.delta_num)
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

    def write_held(self, rows: pa.Table, refusal: Refusal | None = None, last: bool = False,
                   replacing: HeldReplacement | None = None, key_range: tuple[Any, Any] | None = None,
                   order: StateOrder | None = None) -> WriteStats:
        """`write` for rows the driver holds as an Arrow table (the data columns, optional
        sys_op, the refusal's flag column, the order column): classified and written by
        the driver, with no Spark job (`held_writes.py`; a table `held_files.held_schema`
        accepts). `key_range` and `order` (without `within`): as `write`'s."""
        self._check_writable("write to")
        stats = held_writes.write_held(self, rows, refusal, keep_unchanged=not last, replacing=replacing,
                                       key_range=key_range, order=order)
        self._last_written = last
        return self._add(stats)

    def append_held(self, rows: pa.Table) -> WriteStats:
        """`write_new_versions` for rows the driver holds as an Arrow table, written by the driver."""
        self._check_writable("write to")
        return self._add(held_writes.append_held(self, rows))

    def committed_versions(self) -> int | None:
        """The committed versions a write into this delta may be classified against (the
        latest snapshot's and the later deltas'), by the catalog's counts; None when one
        is unknown."""
        committed = committed_before(self.table, self.delta_num)
        return 0 if committed is None else committed[1]

    def _local_write_settings(self, rows: int) -> AbstractContextManager[None]:
        """The session's settings for a write of `rows` rows the driver holds: a small
        run's (`evaluation.py`) when they and the committed versions they are classified
        against are few, since the write's query reads nothing else."""
        committed = committed_before(self.table, self.delta_num)
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
        self.files.append_versions(versions, rows)
        return self._add(WriteStats(rows, 0, 0))

    def savepoint(self) -> tuple[int, int, WriteStats, bool]:
        """A point to return to with `restore`: the writes made so far."""
        return *self.files.savepoint(), self.written, self._last_written

    def restore(self, point: tuple[int, int, WriteStats, bool]) -> None:
        """Undo the writes made since `point` (their folders are deleted): a caller whose
        related write into another table failed keeps this delta usable without them (a
        write undone that said it was the last no longer closes the delta)."""
        self._check_open("restore")
        versions, unchanged, stats, last_written = point
        self.files.restore((versions, unchanged))
        self.written = stats
        self._last_written = last_written

    def keys_written(self) -> DataFrame | None:
        """The primary keys the writes into this delta gave a state so far (a version or an
        unchanged row), None before the first: a caller writing in several steps asks which
        keys an earlier step already holds."""
        prior = self.files.prior_states()
        return None if prior is None else prior.select(*[f"`{c}`" for c in self.table.primary_key])

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
            committed = committed_before(table, self.delta_num)
            candidates = write_candidates(table, incoming, committed, replacing=replacing)
            classified = writes.classify(
                incoming, self.files.prior_states(), candidates, table.schema, table.primary_key,
                refused=refusal.column if refusal else None, replacing=replacing is not None,
                **_order_arguments(ordering),
            ).persist(level)
            try:
                row = classified.agg(*writes.counts_of(classified, committed=candidates is not None)).first()
                counts = {kind: int(row[kind] or 0) for kind in writes.KINDS}
                refuse_bad_rows(table, self.delta_num, classified, counts, refusal, ordering)
                stats = writes.stats_of(row.asDict(), committed=candidates is not None)
                self.files.store(classified, stats, keep_unchanged, committed=candidates is not None)
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
        committed = committed_before(table, self.delta_num)
        bounded = bounds_by_key_range(table, key_range)
        # A large write whose candidates are looked up by its keys reads its rows twice:
        # cached. A small one reads them again (its cache would be a Spark job of its own
        # under adaptive execution); one with nothing committed, bounded by the caller's
        # key range or replacing the caller's keys reads them once.
        cache = committed is not None and not small and not bounded and replacing is None
        if cache:
            incoming = incoming.persist(storage_level(large))
        try:
            candidates = write_candidates(table, incoming, committed, rows=rows, small=small, key_range=key_range,
                                          replacing=replacing)
            partitions = 1 if small else write_partitions(table.reader.spark, rows)
            classified = writes.classify(
                incoming, self.files.prior_states(), candidates, table.schema, table.primary_key,
                refused=refusal.column if refusal else None, partitions=partitions,
                replacing=replacing is not None, **_order_arguments(ordering),
            )
            versions_at, unchanged_at = self.files.next_paths()
            extent = [F.min(f"`{first_key}`").alias(_LOWEST), F.max(f"`{first_key}`").alias(_HIGHEST)]
            observed = ObservedAggregates(table.name, classified,
                                          *writes.counts_of(classified, committed=candidates is not None),
                                          *(extent if key_range is not None else []))
            try:
                written = self.files.write_sorted(writes.versions_of(
                    observed.observed, table.schema, table.primary_key, self.delta_num,
                    committed=candidates is not None), versions_at)
                seen = observed.read(written)
                counts = {kind: int(seen.get(kind) or 0) for kind in writes.KINDS}
                if key_range is not None:
                    check_key_range(table, key_range, seen.get(_LOWEST), seen.get(_HIGHEST))
                refuse_bad_rows(table, self.delta_num, classified, counts, refusal, ordering)
                stats = writes.stats_of(seen, committed=candidates is not None)
                if not stats.rows_upserted + stats.rows_deleted:
                    self.files.discard(versions_at)  # the empty file of a write that made no version
                if stats.rows_unchanged and keep_unchanged:  # a second pass, for a later write's check
                    self.files.write_sorted(writes.unchanged_of(classified, table.schema), unchanged_at)
            except BaseException:
                self.files.discard(versions_at, unchanged_at)
                raise
        finally:
            if cache:
                incoming.unpersist()
        self.files.kept(versions_at if stats.rows_upserted + stats.rows_deleted else None,
                        unchanged_at if stats.rows_unchanged and keep_unchanged else None)
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
        self.info = replace(self.info, status=COMMITTED, commit_ts=commit_ts, rows_upserted=self.rows_upserted,
                            rows_deleted=self.rows_deleted, actual_rows=actual_rows)


def _order_arguments(ordering: tuple[StateOrder, DataType] | None) -> dict[str, Any]:
    """`writes.classify`'s arguments of an ordered write."""
    return {} if ordering is None else {"order": ordering[0], "order_type": ordering[1]}

