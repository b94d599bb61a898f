"""The keys of one run, split into batches.

The changed index is usually small (the changes since the offsets), so it is collected
once and held by the driver: batches, batch sizes, per-batch oldest change and the
inputs that marked each key are then plain Python, and every later read pushes the
batch's keys down without another Spark job to collect them. An index larger than
`driver_limit` keys (a first run, a reprocess) stays distributed: batches are numbered by
a window and read back by semi-joins, shuffled ones (`DistributedKeys.shuffled`) unless
the batch size bounds a batch within the limit, so that no JVM holds the key set.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from pyspark import StorageLevel
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from offset_assets.engine.changed_index import BATCH_COL, FIRST_TS_COL, INPUT_COL, TS_COL, assign_batches
from offset_assets.engine.loading import KeyValues

DEFAULT_DRIVER_LIMIT = 100_000

Key = tuple


@dataclass
class LocalKeys:
    """Keys held by the driver, in batch order."""

    columns: tuple[str, ...]
    batches: list[list[Key]]
    marked_by: dict[Key, set[str]] = field(default_factory=dict)  # inputs whose changes marked the key
    min_ts: list[dict[str, float]] = field(default_factory=list)  # per batch: input -> oldest change

    def batch(self, number: int) -> KeyValues:
        return KeyValues(self.columns, tuple(self.batches[number]))


@dataclass
class DistributedKeys:
    """Keys too many for the driver: a persisted DataFrame with a batch column.

    `shuffled`: a batch may hold more keys than may be broadcast (no batch size, or one
    above the limit), so every join with a batch is a shuffled sort-merge join."""

    columns: tuple[str, ...]
    frame: DataFrame
    sizes: dict[int, int]
    min_ts: dict[int, dict[str, float]]
    shuffled: bool = True

    def batch(self, number: int) -> DataFrame:
        keys = self.frame.where(F.col(BATCH_COL) == number).select(*self.columns)
        return keys.hint("merge") if self.shuffled else keys


def _sort_key(first_ts: float | None, key: Key) -> tuple:
    # Keys without a change timestamp (failed, reprocessed, explicit) go first.
    return (first_ts is not None, first_ts or 0.0, key)


def local_from_rows(columns: Sequence[str], rows: Sequence, batch_size: int | None) -> LocalKeys:
    """Batches of the collected index rows (keys..., update_ts, _input_name)."""
    width = len(columns)
    first: dict[Key, float | None] = {}
    per_input: dict[Key, dict[str, float]] = {}
    marked_by: dict[Key, set[str]] = {}
    for row in rows:
        key, ts, name = tuple(row[:width]), row[TS_COL], row[INPUT_COL]
        if key not in first:
            first[key] = ts
        elif ts is not None and (first[key] is None or ts < first[key]):
            first[key] = ts
        if name is not None and ts is not None:
            marked_by.setdefault(key, set()).add(name)
            oldest = per_input.setdefault(key, {})
            oldest[name] = min(ts, oldest.get(name, ts))
    ordered = sorted(first, key=lambda k: _sort_key(first[k], k))
    size = batch_size or max(1, len(ordered))
    batches = [ordered[i:i + size] for i in range(0, len(ordered), size)]
    min_ts = []
    for batch in batches:
        oldest: dict[str, float] = {}
        for key in batch:
            for name, ts in per_input.get(key, {}).items():
                oldest[name] = min(ts, oldest.get(name, ts))
        min_ts.append(oldest)
    return LocalKeys(tuple(columns), batches, marked_by, min_ts)


def local_from_keys(columns: Sequence[str], keys: Sequence[Key], batch_size: int | None) -> LocalKeys:
    distinct = sorted(set(keys))
    size = batch_size or max(1, len(distinct))
    return LocalKeys(tuple(columns), [distinct[i:i + size] for i in range(0, len(distinct), size)])


def distributed_from_rows(columns: Sequence[str], rows: DataFrame, batch_size: int | None,
                          with_min_ts: bool, broadcast_limit: int | None = None) -> DistributedKeys:
    """Batches of a large index, numbered in Spark (persisted: every batch reads it).
    Joins with a batch may broadcast it only when `batch_size` is within `broadcast_limit`."""
    keys = rows.groupBy(*columns).agg(F.min(TS_COL).alias(FIRST_TS_COL))
    frame = assign_batches(keys, list(columns), batch_size).persist(StorageLevel.MEMORY_AND_DISK)
    sizes = {row[BATCH_COL]: row["count"] for row in frame.groupBy(BATCH_COL).count().collect()}
    min_ts: dict[int, dict[str, float]] = {}
    if with_min_ts and sizes:
        per_batch = (
            rows.where(F.col(TS_COL).isNotNull())
            .join(frame.select(*columns, BATCH_COL).hint("merge"), on=list(columns))
            .groupBy(BATCH_COL, INPUT_COL)
            .agg(F.min(TS_COL).alias("min_ts"))
            .collect()
        )
        for row in per_batch:
            min_ts.setdefault(row[BATCH_COL], {})[row[INPUT_COL]] = row["min_ts"]
    shuffled = broadcast_limit is not None and (batch_size is None or batch_size > broadcast_limit)
    return DistributedKeys(tuple(columns), frame, sizes, min_ts, shuffled)
