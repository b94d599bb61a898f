"""Reading only the rows a run needs (the filtered join): the input frames of a batch
(`InputLoader`) and the key lookups they are built from.

A run never reads a whole table to find a handful of rows. Keys are held by the driver
when they are few (`KeyValues`: the changed keys of one batch) and pushed down to the
Parquet scan as an IN filter; above `pushdown_limit` values, or for keys of several
columns, the lookup is a semi-join against a broadcast local relation. A key whose
change the run has just read is looked up in the deltas it read (`latest_of_keys`), not
in the whole table. A NULL key is a key: the IN filter selects it with `IS NULL` and the
joins match it null-safely (`versioned/key_joins.py`). A reference is read for the join
values its primary rows hold, NULL excepted: SQL's join matches no row to a NULL.

Keys that are not held by the driver (a first run, a reprocess) are a DataFrame: whether
a join with them may broadcast is decided from the catalog's row counts before the plan
is built (`build_side`), never from Spark's size estimate: a relation the catalog does
not bound within the engine's limit is joined by a shuffled sort-merge join, which no
JVM holds whole.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.types import StructField, StructType

from offset_assets.control_plane.delta_catalog.records import DeltaInfo
from offset_assets.engine.result import RunResult
from offset_assets.engine.transformation import Transformation, TransformInput
from offset_assets.local_frames import collect_instants, local_frame, timestamp_columns
from offset_assets.spark import is_connect_session
from offset_assets.versioned.in_filter import in_values
from offset_assets.versioned.key_joins import join_on_keys, nullable_columns
from offset_assets.versioned.layout import OP_UPSERT, SYS_FROM, SYS_OP
from offset_assets.versioned.local_joins import matching_in_place
from offset_assets.versioned.reads import broadcast_limit, versions_bound
from offset_assets.versioned.table import VersionedTable

DEFAULT_PUSHDOWN_LIMIT = 2_000


def is_bounded(most_rows: int | None, limit: int | None) -> bool:
    """True when a relation of at most `most_rows` rows (None: unknown) may be broadcast
    under `limit` (None: no limit, Spark decides)."""
    return limit is None or (most_rows is not None and most_rows <= limit)


def one_partition(frame: DataFrame, scanned_rows: int | None, limit: int | None) -> DataFrame:
    """`frame` in one partition when the catalog bounds the rows its plan scans within
    `limit` (None: unbounded, left as it is).

    A single partition satisfies every distribution, so an aggregation, a window or a
    join of two such frames plans no exchange; under adaptive execution every exchange is
    a Spark job of its own, which on the few rows of a small run costs more than the
    work. `coalesce` adds no shuffle but makes the plan below it one task too, hence only
    over scans the catalog bounds: a large read keeps its partitions."""
    if is_bounded(scanned_rows, limit) and limit is not None:
        return frame.coalesce(1)
    return frame


def build_side(frame: DataFrame, most_rows: int | None, limit: int | None, inner: bool = False) -> DataFrame:
    """`frame` as the right side of a join, planned from a bound known before the plan.

    Bounded within `limit`: an outer, semi or anti join is left to Spark (it may
    broadcast only this side, which is bounded), an inner join broadcasts it explicitly
    (so that Spark never builds on the other, unbounded side). Otherwise a sort-merge
    join hint: both sides are shuffled and sorted (spilling to disk), none is broadcast;
    the hint holds under adaptive execution too."""
    if not is_bounded(most_rows, limit):
        return frame.hint("merge")
    return F.broadcast(frame) if inner and limit is not None else frame


@dataclass(frozen=True)
class KeyValues:
    """Key values held by the driver: one tuple per key over `columns`.

    `typed`: the values were collected from Spark, so they already have the columns'
    types and their relation skips PySpark's per-row type check (most of the Python cost
    of turning 20,000 keys into a relation); values a caller gave are checked."""

    columns: tuple[str, ...]
    rows: tuple[tuple[Any, ...], ...]
    typed: bool = False
    # One relation per column types: a batch's reads, stray-row check and meta share it.
    _frames: dict[str, DataFrame] = field(default_factory=dict, compare=False, repr=False)

    def frame(self, table: VersionedTable) -> DataFrame:
        """The keys as a local relation typed like `table`'s columns (built once per
        column types), each nullable: a None is the NULL key."""
        schema = StructType([StructField(c, table.schema[c].dataType, True) for c in self.columns])
        built = self._frames.get(schema.json())
        if built is None:
            built = self._relation(table.spark, schema)
            self._frames[schema.json()] = built
        return built

    def _relation(self, spark: SparkSession, schema: StructType) -> DataFrame:
        """Typed values on a classic session go to the JVM as one Arrow table
        (`local_frame`), which Spark keeps as a local relation whose size it knows: a join
        with it in one partition needs no exchange, where Spark plans one beside a
        relation of unknown size (a list's rows become an RDD of Python objects, counted as
        infinitely large), and its broadcast runs no job. Collected timestamps are the
        process's local times, which `local_frame` turns into instants: Arrow alone would
        read them in the session's time zone, and miss every key when the two differ.
        Values a caller gave are checked row by row (an Arrow cast would convert a string
        to a number); a Connect client sends a local relation either way."""
        if not self.typed or is_connect_session(spark):
            return spark.createDataFrame(list(self.rows), schema, verifySchema=not self.typed)
        return local_frame(spark, self.rows, schema)

    def subset(self, rows: tuple[tuple[Any, ...], ...]) -> KeyValues:
        """These keys restricted to `rows` (itself when that is all of them)."""
        return self if len(rows) == len(self.rows) else KeyValues(self.columns, rows, self.typed)

    def fit_in_filter(self, pushdown_limit: int) -> bool:
        """True when the keys are looked up by an IN filter (one column, few values), not
        by a semi-join."""
        return len(self.columns) == 1 and len(self.rows) <= pushdown_limit


def matching_keys(df: DataFrame, table: VersionedTable, keys: KeyValues, pushdown_limit: int,
                  in_one_partition: bool = False) -> DataFrame:
    """Rows of `df` whose `keys.columns` hold one of the (distinct) `keys`: an IN filter
    for up to `pushdown_limit` values of one column, else a join with the keys' relation.
    `in_one_partition`: `df` is read into one partition (its caller bounded it), where
    the keys are hash-joined in place (`local_joins`): no exchange and no broadcast, each
    a Spark job of its own under adaptive execution. Otherwise the keys are broadcast. A
    NULL key matches where `table` declares its column nullable (`key_joins.py`)."""
    on = list(keys.columns)
    nullable = nullable_columns(table.schema)
    if keys.fit_in_filter(pushdown_limit):
        column = keys.columns[0]
        return df.where(in_values(column, [row[0] for row in keys.rows], table.schema[column].dataType))
    if not in_one_partition:
        return join_on_keys(df, F.broadcast(keys.frame(table)), on, "left_semi", nullable)
    return matching_in_place(df, keys.frame(table), on, nullable)


def read_actual_of_keys(table: VersionedTable, keys: KeyValues, as_of_delta: int | None,
                        pushdown_limit: int = DEFAULT_PUSHDOWN_LIMIT) -> tuple[DataFrame, int | None]:
    """Actual rows of `table` (as of `as_of_delta`) whose `keys.columns` hold one of the
    keys, and the versions the read scans by the catalog's counts (None: unknown)."""
    if not keys.rows:
        return table.read_actual(as_of_delta=as_of_delta).where(F.lit(False)), 0
    if keys.fit_in_filter(pushdown_limit):
        return table.read_actual_bounded(as_of_delta, where_in={keys.columns[0]: [r[0] for r in keys.rows]})
    return table.read_actual_bounded(as_of_delta, keys=F.broadcast(keys.frame(table)))


def latest_of_keys(table: VersionedTable, deltas: Sequence[DeltaInfo], keys: KeyValues,
                   pushdown_limit: int = DEFAULT_PUSHDOWN_LIMIT, limit: int | None = None) -> DataFrame:
    """Actual rows (data columns) of keys that have a version in `deltas`, read from those
    deltas only: when a key has a version in the deltas up to the run snapshot, the newest
    of them is its actual version (or its deletion). One partition when the catalog
    bounds the deltas' versions within `limit` (`one_partition`)."""
    readable = [d.data_path for d in deltas if not d.is_empty]
    bound = versions_bound(deltas)
    in_one = limit is not None and is_bounded(bound, limit)
    versions = matching_keys(table.reader.scan(readable), table, keys, pushdown_limit, in_one_partition=in_one)
    versions = one_partition(versions, bound, limit)
    if len(readable) > 1:
        newest = Window.partitionBy(*table.primary_key).orderBy(F.col(SYS_FROM).desc())
        versions = versions.withColumn("_rank", F.row_number().over(newest)).where("_rank = 1")
    return versions.where(F.col(SYS_OP) == OP_UPSERT).select(*[F.col(f"`{c}`") for c in table.data_columns])


def read_actual_matching(
    table: VersionedTable,
    values: DataFrame,
    columns: Mapping[str, str],
    as_of_delta: int | None,
    pushdown_limit: int = DEFAULT_PUSHDOWN_LIMIT,
    most_values: int | None = None,
    broadcast_limit: int | None = None,
) -> DataFrame:
    """Actual rows of `table` (as of `as_of_delta`) whose `columns` values occur in `values`.

    `columns` maps a column of `values` to the column of `table` it must equal. Up to
    `pushdown_limit` distinct values of one column are collected and pushed down; more
    are semi-joined, broadcast only when `most_values` (the catalog's bound on the rows
    of `values`) is within `broadcast_limit` (`build_side`).
    """
    wanted = values.select(*[F.col(src).alias(dst) for src, dst in columns.items()])
    wanted = wanted.where(" AND ".join(f"`{c}` IS NOT NULL" for c in columns.values())).distinct()
    if len(columns) == 1:
        (column,) = columns.values()
        # One partition before the limit: a `limit().collect()` over several partitions is
        # a `take`, which starts one Spark job per round of partitions it scans.
        rows = collect_instants(wanted.coalesce(1).limit(pushdown_limit + 1), [column],
                                timestamp_columns({column: table.schema[column].dataType}))
        if len(rows) <= pushdown_limit:
            found = [row[0] for row in rows]
            if not found:
                return table.read_actual(as_of_delta=as_of_delta).where(F.lit(False))
            return table.read_actual(as_of_delta=as_of_delta, where_in={column: found})
    return table.read_actual(as_of_delta=as_of_delta, keys=build_side(wanted, most_values, broadcast_limit))


def union_all(frames: Sequence[DataFrame]) -> DataFrame:
    """`frames` unioned by column name (at least one)."""
    result = frames[0]
    for frame in frames[1:]:
        result = result.unionByName(frame)
    return result


@dataclass(frozen=True)
class RunReads:
    """The limits a run's reads follow: `pushdown_limit` key values go into an IN filter,
    and a join broadcasts only what the catalog bounds within `driver_keys_limit`."""

    pushdown_limit: int
    driver_keys_limit: int

    def planned(self) -> AbstractContextManager[Any]:
        """Reads built in this block broadcast only what the catalog bounds within the
        driver limit (`versioned.reads.broadcast_limit`)."""
        return broadcast_limit(self.driver_keys_limit)

    def for_keys(self, table: VersionedTable, keys: KeyValues | DataFrame, as_of: int | None,
                 ) -> tuple[DataFrame, int | None]:
        """Actual rows of `table` (as of `as_of`) for a batch's keys, and the versions the
        read scans by the catalog's counts (None: unknown)."""
        with self.planned():
            if isinstance(keys, KeyValues):
                return read_actual_of_keys(table, keys, as_of, self.pushdown_limit)
            # A batch of distributed keys: hinted by `DistributedKeys.batch`.
            return table.read_actual_bounded(as_of, keys=keys)


Persist = Callable[[DataFrame], DataFrame]


@dataclass(frozen=True)
class InputLoader:
    """The input frames of a run's batches, as of the run snapshot (`snapshot_deltas`).

    `deltas_read`: per input, the deltas the changed index read (`keys.SelectedKeys`);
    `marked_by`: per input, the keys held by the driver that its changes marked."""

    t: Transformation
    snapshot_deltas: Mapping[str, int]
    deltas_read: Mapping[str, Sequence[DeltaInfo]]
    marked_by: Mapping[str, frozenset[tuple]]
    reads: RunReads

    def frames(self, keys: KeyValues | DataFrame, persist: Persist, result: RunResult) -> dict[str, DataFrame]:
        """Actual rows of every input for the batch's `keys`.

        Primary inputs are read for the batch's keys; reference inputs only for the join
        values those rows hold (filtered join), never whole. One aggregate per primary
        input counts its rows and collects those join values in the same Spark job; over
        one partition when the catalog bounds what the frame scans (no exchange).

        A frame is read twice: counted here, then by the function in the output write.
        A small one (`_kept`) is read again by the write's job rather than cached: under
        adaptive execution a cache is filled by a Spark job of its own, which costs more
        than reading those few versions again (committed files do not change, so both
        reads see the same rows). Any other is persisted by `persist`."""
        t = self.t
        frames: dict[str, DataFrame] = {}
        join_values: dict[str, set[tuple]] = {}
        distributed_values: dict[str, list[DataFrame]] = {}
        limit = self.reads.driver_keys_limit
        for inp in t.primary_inputs:
            frame, scanned = self._primary_frame(inp, keys)
            frame = frames[inp.name] = self._kept(frame, scanned, keys, persist)
            columns = sorted({c for ref in t.reference_inputs for c in ref.join_keys
                              if c in inp.table.data_columns})
            if isinstance(keys, DataFrame):
                # Distributed keys: the join values stay distributed too (a batch's may be
                # as many as its rows), and the reference is semi-joined with them.
                result.add_rows_read(inp.name, frame.count())
                for ref in t.reference_inputs:
                    if set(ref.join_keys) <= set(columns):
                        distributed_values.setdefault(ref.name, []).append(frame.select(*ref.join_keys))
                continue
            groups = collect_instants(one_partition(frame, scanned, limit).groupBy(*columns).count(),
                                      [*columns, "count"],
                                      timestamp_columns({c: inp.table.schema[c].dataType for c in columns}))
            result.add_rows_read(inp.name, sum(row[-1] for row in groups))
            for ref in t.reference_inputs:
                if set(ref.join_keys) <= set(columns):
                    wanted = join_values.setdefault(ref.name, set())
                    at = [columns.index(c) for c in ref.join_keys]
                    wanted.update(tuple(row[i] for i in at) for row in groups)
        for ref in t.reference_inputs:
            as_of = self.snapshot_deltas.get(ref.name, 0)
            if isinstance(keys, DataFrame):
                with self.reads.planned():
                    if ref.name in distributed_values:
                        frame = read_actual_matching(ref.table, union_all(distributed_values[ref.name]),
                                                     dict(ref.join_keys), as_of, self.reads.pushdown_limit,
                                                     broadcast_limit=self.reads.driver_keys_limit)
                    else:
                        frame = ref.table.read_actual(as_of_delta=as_of).where(F.lit(False))
                frames[ref.name] = persist(frame.select(*ref.table.data_columns))
                result.add_rows_read(ref.name, frames[ref.name].count())
                continue
            values = tuple(v for v in join_values.get(ref.name, ()) if None not in v)
            wanted = KeyValues(tuple(ref.join_keys.values()), values)
            with self.reads.planned():
                frame, scanned = read_actual_of_keys(ref.table, wanted, as_of, self.reads.pushdown_limit)
            frames[ref.name] = self._kept(frame.select(*ref.table.data_columns), scanned, wanted, persist)
            result.add_rows_read(ref.name, one_partition(frames[ref.name], scanned, limit).count())
        return frames

    def _kept(self, frame: DataFrame, scanned: int | None, keys: KeyValues | DataFrame,
              persist: Persist) -> DataFrame:
        """`frame` as the function gets it: read again by the write's job when the catalog
        bounds its scan within the driver limit and its keys are an IN filter, else
        persisted. A frame whose keys are joined keeps its cache: a join's size estimate
        is the product of its sides, which would make the joins above it in the write's
        plan shuffle, where the cache's own estimate is the rows it holds."""
        if (isinstance(keys, KeyValues) and keys.fit_in_filter(self.reads.pushdown_limit)
                and is_bounded(scanned, self.reads.driver_keys_limit)):
            return frame
        return persist(frame)

    def _primary_frame(self, inp: TransformInput, keys: KeyValues | DataFrame) -> tuple[DataFrame, int | None]:
        """Actual rows of a primary input for the batch's keys, and the versions its plan
        scans by the catalog's counts (None: unknown). Keys that this
        input's changes marked are read from the deltas the run read (their newest version
        is there); others (failed, reprocessed, marked through a reference) from the table."""
        table, as_of = inp.table, self.snapshot_deltas.get(inp.name, 0)
        deltas = self.deltas_read.get(inp.name)
        if (not isinstance(keys, KeyValues) or not deltas
                or set(table.primary_key) != set(self.t.transform_keys)):
            return self._actual(table, keys, as_of)
        # KeyValues columns follow the transform keys; the primary key may list them in
        # another order, which `latest_of_keys` does not mind (it joins by name).
        marked = self.marked_by.get(inp.name, frozenset())
        if marked.issuperset(keys.rows):  # the usual case, checked without a Python loop
            via_changes, others = keys.rows, ()
        else:
            via_changes = tuple(k for k in keys.rows if k in marked)
            others = tuple(k for k in keys.rows if k not in marked)
        if not via_changes:
            return self._actual(table, keys, as_of)
        latest = latest_of_keys(table, deltas, keys.subset(via_changes), self.reads.pushdown_limit,
                                self.reads.driver_keys_limit)
        if not others:
            return latest, versions_bound(deltas)
        rest, rest_scanned = self._actual(table, keys.subset(others), as_of)
        latest_scanned = versions_bound(deltas)
        scanned = None if rest_scanned is None or latest_scanned is None else rest_scanned + latest_scanned
        return union_all([latest, rest]), scanned

    def _actual(self, table: VersionedTable, keys: KeyValues | DataFrame, as_of: int,
                ) -> tuple[DataFrame, int | None]:
        """Data columns of `table`'s actual rows for `keys`, and the versions the read scans."""
        frame, scanned = self.reads.for_keys(table, keys, as_of)
        return frame.select(*table.data_columns), scanned
