"""The keys of one run, split into batches: how they are held (which keys a run
processes, the changed index of a full run or a changelist's given keys: `selection.py`).

The changed index is usually small (the changes since the offsets), so it is collected
once and held by the driver: batches, batch sizes, per-batch oldest change and the
inputs that marked each key are then plain Python, and every later read pushes the
batch's keys down without another Spark job to collect them. An index larger than
`driver_limit` keys (a first run, a reprocess) stays distributed: batches are numbered
from a range-partitioned sort (`index.in_batch_order`) and read back by
semi-joins, shuffled ones (`DistributedKeys.shuffled`) unless the batch size bounds a
batch within the limit, so that no JVM holds the key set.

A NULL transform key is a key: it is held as `None` (ordered before every other value,
as Spark's ascending sort with nulls first orders it), looked up with `IS NULL` or a
null-safe join, and given as `None` to a changelist.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import ByteType, DataType, IntegerType, LongType, ShortType, StringType

from offset_assets.engine.changed_keys.candidates import INPUT_COL, TS_COL
from offset_assets.engine.changed_keys.index import (
    BATCH_COL,
    FIRST_TS_COL,
    PART_COL,
    batch_column,
    batch_sizes,
    in_batch_order,
)
from offset_assets.engine.loading import KeyValues
from offset_assets.local_frames import collect_instants, timestamp_columns
from offset_assets.spark import is_connect_session
from offset_assets.versioned.caching import storage_level
from offset_assets.versioned.key_joins import join_on_keys

DEFAULT_DRIVER_LIMIT = 100_000
# Key column types whose values an Arrow collect returns as a Row collect does (str, int).
_ARROW_EXACT_KEYS = (StringType, ByteType, ShortType, IntegerType, LongType)

Key = tuple

# The keys a changelist run is given: a DataFrame, or rows (mappings) of transform-key values.
KeysLike = DataFrame | Sequence[Mapping[str, Any]]


@dataclass
class LocalKeys:
    """Keys held by the driver, in batch order (`typed`: collected from Spark)."""

    columns: tuple[str, ...]
    batches: list[list[Key]]
    marked_by: dict[str, frozenset[Key]] = field(default_factory=dict)  # per input: the keys its changes marked
    min_ts: list[dict[str, float]] = field(default_factory=list)  # per batch: input -> oldest change
    typed: bool = False
    # One KeyValues per batch, so that its relation is built once for all of the batch's reads.
    _values: dict[int, KeyValues] = field(default_factory=dict, repr=False)

    def batch(self, number: int) -> KeyValues:
        if number not in self._values:
            self._values[number] = KeyValues(self.columns, tuple(self.batches[number]), self.typed)
        return self._values[number]

    def keys_of(self, numbers: Sequence[int]) -> KeyValues:
        """The keys of the batches `numbers` together (one batch: `batch`'s own)."""
        if len(numbers) == 1:
            return self.batch(numbers[0])
        return KeyValues(self.columns, tuple(key for n in numbers for key in self.batches[n]), self.typed)

    def batch_sizes(self) -> dict[int, int]:
        return {i: len(b) for i, b in enumerate(self.batches)}

    def batch_min_ts(self) -> dict[int, dict[str, float]]:
        """Per batch: input -> oldest change (what batch-mode offsets wait for)."""
        return dict(enumerate(self.min_ts))

    def release(self) -> None:
        """Nothing to release: the driver holds the keys."""


@dataclass
class DistributedKeys:
    """Keys too many for the driver: a DataFrame with a batch column, computed from a
    persisted one (`cached`).

    `shuffled`: a batch may hold more keys than may be broadcast (no batch size, or one
    above the limit), so every join with a batch is a shuffled sort-merge join."""

    columns: tuple[str, ...]
    frame: DataFrame
    cached: DataFrame  # what `frame` is computed from, persisted (released by `release`)
    sizes: dict[int, int]
    min_ts: dict[int, dict[str, float]]
    shuffled: bool = True

    def batch(self, number: int) -> DataFrame:
        keys = self.frame.where(F.col(BATCH_COL) == number).select(*self.columns)
        return keys.hint("merge") if self.shuffled else keys

    def keys_of(self, numbers: Sequence[int]) -> DataFrame:
        """The keys of the batches `numbers` together (one batch: `batch`'s own)."""
        if len(numbers) == 1:
            return self.batch(numbers[0])
        keys = self.frame.where(F.col(BATCH_COL).isin(list(numbers))).select(*self.columns)
        return keys.hint("merge") if self.shuffled else keys

    def batch_sizes(self) -> dict[int, int]:
        return dict(self.sizes)

    def batch_min_ts(self) -> dict[int, dict[str, float]]:
        """Per batch: input -> oldest change (what batch-mode offsets wait for)."""
        return self.min_ts

    def release(self) -> None:
        self.cached.unpersist()


# Column names of the index inside `local_from_rows` (Arrow): key columns, then these.
_TS, _INPUT, _BATCH, _HAS_TS, _TS_OR_0 = "__ts", "__input", "__batch", "__has_ts", "__ts_or_0"

# The collected changed index: an Arrow table (keys of strings and integers on a classic
# session) or tuples, columns keys..., update_ts, input name in this order.
IndexRows = Any


def collect_index(index_rows: DataFrame, columns: Sequence[str], key_types: Mapping[str, DataType]) -> IndexRows:
    """The index rows (keys..., update_ts, input name), in one Spark job: an Arrow table
    when the keys are strings or integers, else tuples.

    Keys of strings and integers come back as Arrow columns, without a Python Row object
    per row, and `local_from_rows` groups and orders them in Arrow; keys of other types
    (dates, timestamps, decimals) as Rows, the values the rest of the engine holds. The
    choice follows `key_types` (the meta table's, which the driver holds) rather than the
    frame's schema, which a Spark Connect client would ask the server for; the Arrow
    result's own types confirm it, and a key that arrives as another type is collected
    again as Rows. A Spark Connect client always collects Rows: its rows arrive as Arrow
    batches either way, and its `toArrow` asks the server for the schema first (a round
    trip more)."""
    frame = index_rows.select(*[F.col(f"`{c}`") for c in columns], TS_COL, INPUT_COL)
    arrow = not is_connect_session(frame.sparkSession)
    if arrow and all(isinstance(key_types[c], _ARROW_EXACT_KEYS) for c in columns):
        table = frame.toArrow()
        if all(_arrow_exact(table.schema.field(i).type) for i in range(len(columns))):
            return table
    return collect_instants(frame, [*columns, TS_COL, INPUT_COL], timestamp_columns(key_types))


def _arrow_exact(arrow_type: Any) -> bool:
    import pyarrow as pa  # the driver has it whenever an Arrow collect ran

    return pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type) or pa.types.is_integer(arrow_type)


def local_from_rows(columns: Sequence[str], rows: IndexRows, batch_size: int | None) -> LocalKeys:
    """Batches of the collected index rows (`collect_index`: keys..., update_ts, input
    name): each key once, keys without a change timestamp (failed, reprocessed) first,
    then by their oldest change, then by key, the order `changed_index.in_batch_order`
    numbers distributed keys in.

    The grouping, the order and each batch's oldest change per input are computed in
    Arrow, and only the ordered keys become Python values: a Python loop over the rows
    took 0.1 s of a run of 20,000 changed keys. Keys collected as tuples (dates,
    decimals, a Spark Connect client) or holding a NULL are ranked in Python first
    (`key_order`), so that Arrow orders them as Python does and groups a NULL key as one
    (Arrow's joins never match a null)."""
    import pyarrow as pa

    width = len(columns)
    if isinstance(rows, pa.Table) and any(rows.column(i).null_count for i in range(width)):
        rows = list(zip(*(rows.column(i).to_pylist() for i in range(rows.num_columns)), strict=True))
    if isinstance(rows, pa.Table):
        names = [f"__key{i}" for i in range(width)]
        index = rows.rename_columns([*names, _TS, _INPUT])

        def decode(keys: Any) -> list[Key]:
            return list(zip(*(_values(keys.column(name)) for name in names), strict=True))
    else:
        distinct = sorted({tuple(row[:width]) for row in rows}, key=key_order)
        rank = {key: i for i, key in enumerate(distinct)}
        names = ["__rank"]
        index = pa.table({
            names[0]: pa.array([rank[tuple(row[:width])] for row in rows], pa.int64()),
            _TS: pa.array([row[width] for row in rows], pa.float64()),
            _INPUT: pa.array([row[width + 1] for row in rows], pa.string()),
        })

        def decode(keys: Any) -> list[Key]:
            return [distinct[i] for i in _values(keys.column(names[0]))]
    return _local_from_index(tuple(columns), index, names, decode, batch_size)


def key_order(key: Key) -> tuple:
    """A sort key of `key` in which a None comes before every value of its column."""
    return tuple((value is not None, value) for value in key)


def _values(column: Any) -> list:
    """A null-free Arrow column's values as Python values (through NumPy: several times
    faster than `to_pylist` for strings)."""
    return column.to_numpy(zero_copy_only=False).tolist()


def _local_from_index(columns: tuple[str, ...], index: Any, names: list[str],
                      decode: Callable[[Any], list[Key]], batch_size: int | None) -> LocalKeys:
    """`local_from_rows` on `index` (Arrow: key columns `names`, update_ts, input name);
    `decode` turns a table of the key columns into the keys as Python tuples."""
    import pyarrow as pa
    import pyarrow.compute as pc

    first = index.group_by(names, use_threads=False).aggregate([(_TS, "min")])
    oldest = first[f"{_TS}_min"]
    ordered = (first.select(names)
               .append_column(_HAS_TS, pc.is_valid(oldest))
               .append_column(_TS_OR_0, pc.fill_null(oldest, 0.0))
               .sort_by([(_HAS_TS, "ascending"), (_TS_OR_0, "ascending"), *[(n, "ascending") for n in names]])
               .select(names))
    count = ordered.num_rows
    size = batch_size or max(1, count)
    keys = decode(ordered)
    batches = [keys[i:i + size] for i in range(0, count, size)]

    changes = index.filter(pc.and_(pc.is_valid(index[_TS]), pc.is_valid(index[_INPUT])))
    marked = changes.group_by([*names, _INPUT], use_threads=False).aggregate([])
    marked_by = {name: frozenset(decode(marked.filter(pc.equal(marked[_INPUT], name))))
                 for name in pc.unique(marked[_INPUT]).to_pylist()}

    numbered = ordered.append_column(_BATCH, pc.divide(pa.array(range(count), pa.int64()), size))
    per_batch = (changes.join(numbered, keys=names, join_type="inner", use_threads=False)
                 .group_by([_BATCH, _INPUT], use_threads=False).aggregate([(_TS, "min")]))
    min_ts: list[dict[str, float]] = [{} for _ in batches]
    for batch, name, ts in zip(per_batch[_BATCH].to_pylist(), per_batch[_INPUT].to_pylist(),
                               per_batch[f"{_TS}_min"].to_pylist(), strict=True):
        min_ts[batch][name] = ts
    return LocalKeys(columns, batches, marked_by, min_ts, typed=True)


def local_from_keys(columns: Sequence[str], keys: Sequence[Key], batch_size: int | None,
                    typed: bool = False) -> LocalKeys:
    """Batches of given keys (`typed`: collected from Spark)."""
    distinct = sorted(set(keys), key=key_order)
    size = batch_size or max(1, len(distinct))
    return LocalKeys(tuple(columns), [distinct[i:i + size] for i in range(0, len(distinct), size)], typed=typed)


def distributed_from_rows(columns: Sequence[str], rows: DataFrame, batch_size: int | None,
                          with_min_ts: bool, broadcast_limit: int | None = None,
                          nullable: frozenset[str] = frozenset()) -> DistributedKeys:
    """Batches of a large index, numbered in Spark (persisted: every batch reads it).
    Joins with a batch may broadcast it only when `batch_size` is within `broadcast_limit`;
    `nullable`: the key columns that can hold NULL (`Transformation.nullable_keys`)."""
    keys = rows.groupBy(*columns).agg(F.min(TS_COL).alias(FIRST_TS_COL))
    shuffled = broadcast_limit is not None and (batch_size is None or batch_size > broadcast_limit)
    if batch_size is None:
        cached = keys.withColumn(BATCH_COL, F.lit(0)).persist(storage_level(shuffled))
        frame, total = cached, cached.count()
    else:
        cached = in_batch_order(keys, list(columns)).persist(storage_level(shuffled))
        per_partition = {row[PART_COL]: row["count"] for row in cached.groupBy(PART_COL).count().collect()}
        frame = cached.withColumn(BATCH_COL, batch_column(per_partition, batch_size))
        total = sum(per_partition.values())
    sizes = batch_sizes(total, batch_size)
    min_ts: dict[int, dict[str, float]] = {}
    if with_min_ts and sizes:
        per_batch = (
            join_on_keys(rows.where(F.col(TS_COL).isNotNull()), frame.select(*columns, BATCH_COL).hint("merge"),
                         columns, "inner", nullable)
            .groupBy(BATCH_COL, INPUT_COL)
            .agg(F.min(TS_COL).alias("min_ts"))
            .collect()
        )
        for row in per_batch:
            min_ts.setdefault(row[BATCH_COL], {})[row[INPUT_COL]] = row["min_ts"]
    return DistributedKeys(tuple(columns), frame, cached, sizes, min_ts, shuffled)
