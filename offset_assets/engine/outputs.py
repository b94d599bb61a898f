"""A batch's outputs: checked, then written as replacements with tombstones; a row for a
key the batch did not process refuses the write.

`OutputWriter` checks what the function returned (one DataFrame per declared output,
with every data column), writes each output's replacement of the batch's keys (new rows
plus tombstones of the rows a key no longer yields) into the output's hot delta, and
flags stray rows (a transform key the batch did not process) so that the write refuses
them (`Refusal`) within its own classification, with no Spark job of its own. In end
commit mode the hot deltas stay open across batches until the run commits them; a
failed batch's writes are undone (`HotDelta.savepoint/restore`).

An output whose primary key holds the transform keys (the usual case) is a replacing
write (`HotDelta.write(replacing=...)`): the keys select every version of the output
rows they own, so the write reads the keys' earlier rows once, as the candidates it
classifies against, and deletes those the new output no longer has, all in its own
job. For a batch of keys held by the driver that is one Spark job with or without
adaptive execution: the keys are an IN filter, or a relation joined in the write's one
partition (no broadcast, no exchange, no cache).

Any other output is keyed apart from the transform keys: a row may leave one transform
key for another (a post moving to another user, in an output keyed by post). Its write
reads the keys' earlier rows first and deletes those no key of the run yields any more.
In end commit mode the two keys of a move may fall in two batches of one run, and one
hot delta holds one state per key: so the batches before the last write their new rows
only, and the run's last write of that output deletes the earlier rows of all its
batches' keys that no write of the run gave a state (`_write_keyed_apart`). A row that
left batch 1's key and arrived under batch 2's is then one upsert, committed by the run.
When the last batch fails, the run writes those deletions alone before it commits
(`write_departures`).
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import reduce
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import DataType, IntegerType, StructType

from offset_assets.engine.changed_keys import DistributedKeys, LocalKeys
from offset_assets.engine.commit import rollback_quietly
from offset_assets.engine.errors import TransformationOutputError
from offset_assets.engine.loading import KeyValues, Persist, RunReads, matching_keys
from offset_assets.engine.result import RunResult
from offset_assets.engine.transformation import Transformation
from offset_assets.engine.vocabulary import CommitMode
from offset_assets.local_frames import collect_arrow
from offset_assets.versioned.caching import storage_level
from offset_assets.versioned.held_files import held_schema
from offset_assets.versioned.held_writes import HeldReplacement
from offset_assets.versioned.hot_delta import SMALL_WRITE_ROWS, HotDelta
from offset_assets.versioned.in_filter import in_values
from offset_assets.versioned.key_joins import join_on_keys, nullable_columns
from offset_assets.versioned.local_joins import flag_matches, unmatched_in_place
from offset_assets.versioned.table import VersionedTable
from offset_assets.versioned.table_schema import column_types, is_safe_cast
from offset_assets.versioned.writes import Refusal, Replacement, WriteStats

# Columns the run adds to an output while writing it (never stored).
STRAY, IN_BATCH = "__outside_batch", "__in_batch"


class OutputWriter:
    """Writes a run's outputs, batch by batch, into hot deltas named by `holder`.

    `key_table`: a table with the transform-key columns (the meta), which types a batch's
    keys held by the driver as a relation; `keys`: the run's keys, in batches;
    `held_limit`: the most rows (written, and committed before) of an output the driver
    classifies and writes itself (0: none); `hots`: end mode's open hot deltas, one per
    output, committed (or rolled back) with the run."""

    def __init__(self, t: Transformation, holder: str, run_id: str, reads: RunReads,
                 key_table: VersionedTable, result: RunResult, keys: LocalKeys | DistributedKeys,
                 held_limit: int = 0) -> None:
        self.t = t
        self.holder = holder
        self.run_id = run_id
        self.reads = reads
        self.key_table = key_table
        self.result = result
        self.keys = keys
        self.held_limit = held_limit
        self.hots: dict[str, HotDelta] = {}
        # End mode, per output keyed apart from the transform keys: the batches written
        # whose earlier rows that no key yields any more are deleted by a later write.
        self._departures: dict[str, list[int]] = {}

    def evaluate(self, produced: DataFrame | Mapping[str, DataFrame], persist: Persist) -> dict[str, DataFrame]:
        """The function's outputs by name, each reduced to its table's data columns (cast
        to their declared types); persisted when its write reads it twice (an output
        whose primary key does not hold the transform keys: `_write_with_previous_rows`),
        a replacing write reads it once. A missing output or column, or a column of the
        wrong type (`declared_columns`), raises `TransformationOutputError`."""
        t, tid = self.t, self.t.transformation_id
        by_name = {out.name: out for out in t.outputs}
        if isinstance(produced, DataFrame):
            if len(t.outputs) != 1:
                raise TransformationOutputError(
                    f"transformation {tid!r} has outputs {sorted(by_name)}: return a mapping of them"
                )
            produced = {t.outputs[0].name: produced}
        if not isinstance(produced, Mapping) or set(produced) != set(by_name):
            got = sorted(produced) if isinstance(produced, Mapping) else type(produced).__name__
            raise TransformationOutputError(
                f"transformation {tid!r} must return DataFrames for outputs {sorted(by_name)}, got {got}"
            )
        evaluated = {}
        for name, df in produced.items():
            table = by_name[name]
            missing = [c for c in table.data_columns if c not in df.columns]
            if missing:
                raise TransformationOutputError(
                    f"transformation {tid!r}: output {name!r} lacks column(s) {missing}"
                )
            declared = declared_columns(tid, table.name, table.schema, df)
            evaluated[name] = declared if self._replacing(table) else persist(declared)
        return evaluated

    def write(self, batch: int, outputs: Mapping[str, DataFrame], shuffled: bool,
              last: bool = False) -> dict[str, HotDelta]:
        """Write each output's replacement of the keys of `batch` into its hot delta
        (`shuffled`: a batch may be too large to broadcast its output's keys; `last`: the
        run's last batch, whose writes are the last into the run's hot deltas)."""
        batch_mode = self.t.commit_mode == CommitMode.batch
        by_name = {out.name: out for out in self.t.outputs}
        hots: dict[str, HotDelta] = {}
        savepoints = {}
        stats = {}
        try:
            for name, df in outputs.items():
                table = by_name[name]
                if batch_mode or name not in self.hots:
                    hot = table.open_delta(holder=self.holder, run_id=self.run_id)
                    if not batch_mode:
                        self.hots[name] = hot
                else:
                    hot = self.hots[name]
                hots[name] = hot
                savepoints[name] = hot.savepoint()
                stats[name] = self._write_replacement(hot, table, df, batch, shuffled, last)
        except BaseException:
            # The other outputs of a failed batch must not keep its rows: end mode undoes
            # this batch's writes in the run's hot deltas, batch mode drops its own.
            for name, hot in hots.items():
                if not batch_mode:
                    hot.restore(savepoints[name])
                else:
                    rollback_quietly(hot)
            raise
        for name, written in stats.items():
            self.result.add_written(name, written.rows_upserted, written.rows_deleted)
            if not batch_mode and not self._replacing(by_name[name]):
                # The last batch's write deleted the departed rows of every batch before it.
                self._departures[name] = [] if last else [*self._departures.get(name, []), batch]
        return hots

    @property
    def departures_pending(self) -> bool:
        """Whether `write_departures` has rows to delete (a run without batches has none)."""
        return any(self._departures.values())

    def write_departures(self) -> None:
        """End mode, once the batches are done: delete the earlier rows of the written
        batches' keys that none of the run's writes gave a state, in each output keyed
        apart whose last batch failed (its write would have deleted them)."""
        by_name = {out.name: out for out in self.t.outputs}
        for name, batches in self._departures.items():
            if batches:
                table = by_name[name]
                shuffled = isinstance(self.keys, DistributedKeys) and self.keys.shuffled
                written = self._write_keyed_apart(self.hots[name], table, None, batches, shuffled, None)
                self.result.add_written(name, written.rows_upserted, written.rows_deleted)
        self._departures.clear()

    def discard(self) -> None:
        """Roll back the open hot deltas of a run that ends without committing them."""
        for hot in self.hots.values():
            rollback_quietly(hot)

    def _flag_stray_rows(self, output: DataFrame, keys: KeyValues | DataFrame, in_one_partition: bool = False,
                         ) -> DataFrame:
        """`output` with a column STRAY: true where the row's transform key is not one of
        the batch's keys. The write refuses such rows (`Refusal`) within its own
        classification, so the check costs no Spark job of its own. `in_one_partition`:
        the write gathers `output` into one partition, where the keys are joined in place
        (no exchange, no broadcast). A NULL transform key is one of the batch's keys when
        the batch holds it, and stray otherwise."""
        if isinstance(keys, KeyValues) and keys.fit_in_filter(self.reads.pushdown_limit):
            # A filter, not a join: broadcasting even a tiny key relation is a job. A NULL
            # key outside the batch makes the IN filter NULL, which is not in the batch.
            in_batch = in_values(keys.columns[0], [row[0] for row in keys.rows],
                                 self.key_table.schema[keys.columns[0]].dataType)
            return output.withColumn(STRAY, ~F.coalesce(in_batch, F.lit(False)))
        frame = keys.frame(self.key_table) if isinstance(keys, KeyValues) else keys
        flagged = flag_matches(output, frame, self.t.transform_keys, IN_BATCH, self.t.nullable_keys,
                               in_place=in_one_partition)
        return flagged.withColumn(STRAY, ~F.col(IN_BATCH)).drop(IN_BATCH)

    def _replacing(self, table: VersionedTable) -> bool:
        """True when `table`'s primary key holds the transform keys: a batch's keys then
        own every version of their output rows (`_write_replacement`)."""
        return set(self.t.transform_keys) <= set(table.primary_key)

    def _write_replacement(self, hot: HotDelta, table: VersionedTable, new: DataFrame, batch: int,
                           shuffled: bool, last_batch: bool) -> Any:
        """The processed keys' new output, plus deletes of their previous output rows that
        the new output no longer has: one write of upserts and tombstones. A row for a
        transform key the batch did not process refuses the write."""
        keys = self.keys.batch(batch)
        transform_keys = list(self.t.transform_keys)
        tid = self.t.transformation_id

        def stray_error(example: dict) -> Exception:
            return TransformationOutputError(
                f"transformation {tid!r}: output {table.name!r} has a row for transform key "
                f"{example} that this batch did not process"
            )

        refusal = Refusal(STRAY, transform_keys, stray_error)
        # Batch mode writes each output delta once, then commits it; end mode's last batch
        # writes last into the run's deltas. No write follows, so the unchanged rows need
        # no file (it only lets a later write into the delta refuse another state of them).
        last = self.t.commit_mode == CommitMode.batch or last_batch
        if not self._replacing(table):
            if not last:  # end mode: the run's last write deletes what left this batch's keys
                rows = self._flag_stray_rows(new, keys).withColumn("sys_op", F.lit(0))
                size_hint = len(keys.rows) if isinstance(keys, KeyValues) and not shuffled else None
                return hot.write(rows, refusal=refusal, large=shuffled, rows=size_hint,
                                 column_types=written_types(table))
            batches = [*self._departures.get(table.name, []), batch]
            return self._write_keyed_apart(hot, table, new, batches, shuffled, refusal)
        if self._held(hot, table, keys):
            written = self._write_held(hot, table, new, keys, refusal, last)
            if written is not None:
                return written
        # A batch of keys held by the driver writes about as many rows: a plan hint
        # (`HotDelta.write`'s `rows`), never a count; the write then runs in one pass, in
        # one partition when small.
        size_hint = len(keys.rows) if isinstance(keys, KeyValues) else None
        small = size_hint is not None and size_hint <= SMALL_WRITE_ROWS

        def select(versions: DataFrame, in_one_partition: bool) -> DataFrame:
            if isinstance(keys, KeyValues):
                return matching_keys(versions, self.key_table, keys, self.reads.pushdown_limit, in_one_partition)
            # A batch of distributed keys: hinted by `DistributedKeys.batch`.
            return join_on_keys(versions, keys, transform_keys, "left_semi", nullable_columns(table.schema))

        rows = self._flag_stray_rows(new, keys, in_one_partition=small).withColumn("sys_op", F.lit(0))
        return hot.write(rows, refusal=refusal, last=last, large=shuffled, rows=size_hint,
                         replacing=Replacement(select), column_types=written_types(table))

    def _held(self, hot: HotDelta, table: VersionedTable, keys: KeyValues | DataFrame) -> bool:
        """Whether the driver classifies and writes a replacing write of `keys`: keys it
        collected, a table of types it writes, and few committed versions to read."""
        if self.held_limit <= 0 or not isinstance(keys, KeyValues) or not keys.typed:
            return False
        if not held_schema(table.schema, table.primary_key):
            return False
        committed = hot.committed_versions()
        return committed is not None and committed <= self.held_limit

    def _write_held(self, hot: HotDelta, table: VersionedTable, new: DataFrame, keys: KeyValues,
                    refusal: Refusal, last: bool) -> WriteStats | None:
        """The replacing write of the batch's `keys` by the driver (`HotDelta.write_held`):
        the function's output collected as Arrow, the rows of transform keys the batch did
        not process flagged in Python. None when the output holds more rows than the
        driver writes (the caller writes it with Spark)."""
        rows = collect_arrow(new, table.schema, self.held_limit)
        if rows is None:
            return None
        processed = frozenset(keys.rows)
        found = zip(*(rows[c].to_pylist() for c in keys.columns), strict=True)
        rows = rows.append_column(STRAY, pa.array([key not in processed for key in found], pa.bool_()))
        return hot.write_held(rows, refusal=refusal, last=last, replacing=HeldReplacement(keys.columns, processed))

    def _write_keyed_apart(self, hot: HotDelta, table: VersionedTable, new: DataFrame | None,
                           batches: list[int], shuffled: bool, refusal: Refusal | None) -> Any:
        """The last write of an output whose primary key does not hold the transform keys
        (a row may move to another transform key, so the write looks its candidates up by
        the written keys): the last batch's rows `new` (persisted: read twice; None: that
        batch failed) plus tombstones of the previous rows of the keys of `batches` that
        neither `new` nor an earlier write of the run into `hot` holds (a row that left an
        earlier batch's key for a later one's is an upsert there), found before the write."""
        keys = self.keys.keys_of(batches)
        pk = list(table.primary_key)
        nullable = nullable_columns(table.schema)
        previous = self.reads.for_keys(table, keys, None)[0].persist(storage_level(shuffled))
        try:
            # A batch of keys held by the driver writes about as many rows: a plan hint,
            # never a count (see `_write_replacement`). A small one finds the vanished keys
            # in one partition (no exchange, no broadcast: each a Spark job under adaptive
            # execution); a larger one leaves the join to Spark, shuffled when a batch may
            # be larger than the limit.
            size_hint = len(keys.rows) if isinstance(keys, KeyValues) and not shuffled else None
            small = size_hint is not None and size_hint <= SMALL_WRITE_ROWS
            gone = previous.select(*pk)
            still_there = [frame for frame in (None if new is None else new.select(*pk), hot.keys_written())
                           if frame is not None]
            if still_there:
                kept = reduce(DataFrame.unionByName, still_there)
                if small:
                    gone = unmatched_in_place(gone, kept, pk, nullable, hint="merge")
                else:
                    gone = join_on_keys(gone, kept.hint("merge") if shuffled else kept, pk, "left_anti", nullable)
            deletes = gone.select(
                *[F.col(c) if c in pk else F.lit(None).cast(table.schema[c].dataType).alias(c)
                  for c in table.data_columns],
                F.lit(1).alias("sys_op"),
            )
            if new is None:
                return hot.write(deletes, last=True, large=shuffled, rows=size_hint,
                                 column_types=written_types(table))
            rows = self._flag_stray_rows(new, self.keys.batch(batches[-1])).withColumn("sys_op", F.lit(0))
            return hot.write(rows.unionByName(deletes.withColumn(STRAY, F.lit(False))), refusal=refusal, last=True,
                             large=shuffled, rows=size_hint, column_types=written_types(table))
        finally:
            previous.unpersist()


def written_types(table: VersionedTable) -> dict[str, DataType]:
    """The column types of the rows an output write is given: the declared columns
    (`declared_columns` typed them) and the `sys_op` literal (an integer)."""
    return {**column_types(table.schema), "sys_op": IntegerType()}


def declared_columns(tid: str, table: str, schema: StructType, df: DataFrame) -> DataFrame:
    """`df`'s columns of `schema`, each cast to its declared type, or
    `TransformationOutputError` naming the table and every column of the wrong type with
    its declared and returned types.

    Checked here, before the output meets anything typed: the replacement's union with
    the typed tombstones would otherwise coerce a column first (under ANSI rules a
    string becomes a double), and the table's own check would see the coerced type.
    Accepted are the declared type and the conversions that lose no value, the rule of
    a direct write (`versioned.table_schema.is_safe_cast`): a smaller integer into a
    larger one (int -> bigint), a float or an integer up to int into double, a decimal
    into one with at least as many integer and fractional digits, an integer into a
    decimal with room for its digits, an all-null column. Everything else (a string, a
    bigint or a decimal into double, a double into float or decimal, ...) is refused:
    converting it could change or lose values without a word."""
    wrong = [
        f"{f.name}: {df.schema[f.name].dataType.simpleString()} (declared {f.dataType.simpleString()})"
        for f in schema.fields
        if not is_safe_cast(df.schema[f.name].dataType, f.dataType)
    ]
    if wrong:
        raise TransformationOutputError(
            f"transformation {tid!r}: output {table!r} returned column(s) of the wrong type {wrong}; "
            "only conversions that lose no value are made"
        )
    if df.columns == schema.names and all(df.schema[f.name].dataType == f.dataType for f in schema.fields):
        return df  # already the table's columns in order: no projection (one analysis less)
    # Columns of the declared type are selected as they are: the plan stays the function's.
    return df.select(*[
        F.col(f"`{f.name}`") if df.schema[f.name].dataType == f.dataType
        else F.col(f"`{f.name}`").cast(f.dataType).alias(f.name)
        for f in schema.fields
    ])
