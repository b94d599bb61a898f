"""The changed index: which transform keys a run must process.

For every input, the versions a run considers are read from the deltas committed since
the input's offset, inclusive (`update_ts >= offset`, the one boundary rule of the
project): a version committed at exactly the offset is read again and dropped by the
per-key check `update_ts > process_ts` when it was already processed. v2 reads that
meta from the meta deltas since the offsets only (see `latest_meta_of`). Keys whose
last processing failed are always included (v2 finds them in the meta deltas the control
plane lists as holding failures), and so are the keys a pending reprocess request still
covers. A changed row of a reference table marks the
primary records pointing at it (reverse join). A NULL transform key is a key like any
other; a NULL join value of a reference row marks nothing (`candidates.py`).

v1 runs the same comparison over the whole history without offsets (the full
comparison); it exists to verify v2 and to measure against it, and must return the same
keys.

Every join of the index is planned from the catalog before the plan is built: a side
whose rows the catalog's per-delta counts bound within `broadcast_limit` may be
broadcast (the changes of an incremental run), any other is shuffled (a first run, a
reprocess, v1's whole meta), so no JVM holds a relation proportional to the tables. The
meta check of a small run plans no exchange at all: when every candidate scan and the
meta deltas are bounded within the limit, both sides are one partition
(`loading.one_partition`) and are joined in place; when no meta delta was committed
since the offsets, there is nothing to check against and no join.

The parts, one module each: `request.py` (what the control plane says, which
deltas each input contributes), `candidates.py` (the keys versions mark, failed keys,
reprocess keys), `bounds.py` (bounds from the catalog alone); the meta check and
the index itself are here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import reduce

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from offset_assets.control_plane.delta_catalog.records import DeltaInfo
from offset_assets.engine.changed_keys.bounds import actual_bound, most_index_rows
from offset_assets.engine.changed_keys.candidates import (
    INPUT_COL,
    TS_COL,
    Candidates,
    failed_keys,
    input_candidates,
    reprocess_keys,
)
from offset_assets.engine.changed_keys.request import IndexRequest, listed_failure_deltas, meta_deltas_since
from offset_assets.engine.loading import build_side, is_bounded, one_partition
from offset_assets.engine.transformation import Transformation
from offset_assets.versioned.key_joins import join_on_keys
from offset_assets.versioned.layout import SYS_FROM
from offset_assets.versioned.reads import broadcast_limit as reads_broadcast_limit
from offset_assets.versioned.reads import versions_bound
from offset_assets.versioned.table import VersionedTable

FIRST_TS_COL = "_first_ts"
BATCH_COL = "_batch"
PART_COL = "_part"
ROW_ID_COL = "_row_id"


@dataclass
class ChangedIndex:
    """Candidate rows (key, input, update_ts) that survived the meta check.

    `most_rows`: at most this many rows, known from the catalog's row counts without a
    Spark job (None when the index is not bounded that way: a reference input's changes
    or v1 can mark any number of keys)."""

    rows: DataFrame
    transform_keys: list[str]
    most_rows: int | None = None

    @property
    def keys(self) -> DataFrame:
        """One row per key to process, with the update_ts of its oldest change."""
        return self.rows.groupBy(*self.transform_keys).agg(F.min(TS_COL).alias(FIRST_TS_COL))


def latest_meta_of(meta: VersionedTable, deltas: Sequence[DeltaInfo], limit: int | None = None) -> DataFrame:
    """The newest meta version (keys, process_ts, is_success) of every key that has one in
    `deltas`; one partition when the catalog bounds their versions within `limit`.

    Why the meta deltas since the offsets are enough for v2: a meta row carries the
    process_ts P of its run and is committed at a commit_ts > P, so every meta row with
    process_ts >= the offset is in those deltas, and a key's newest version there is its
    actual meta. A candidate version with update_ts >= the offset whose key has no meta
    there was not processed after it."""
    keys = list(meta.primary_key)
    history = meta.reader.history(deltas).select(*keys, "process_ts", "is_success", SYS_FROM)
    history = one_partition(history, versions_bound(deltas), limit)
    newest = Window.partitionBy(*keys).orderBy(F.col("sys_from").desc())
    return history.withColumn("_rank", F.row_number().over(newest)).where("_rank = 1").drop("_rank", SYS_FROM)


def compute_changed_index(
    transformation: Transformation,
    meta: VersionedTable,
    request: IndexRequest,
    pushdown_limit: int,
    by_input: Mapping[str, Sequence[DeltaInfo]] | None = None,
    broadcast_limit: int | None = None,
) -> ChangedIndex | None:
    """The changed index of `request`; None when nothing can be changed (no Spark used).
    `by_input`: `request.deltas_by_input(transformation)` when the caller has it already.
    `broadcast_limit`: a join may broadcast a side only when the catalog bounds it within
    this many rows, else it is shuffled (None: Spark decides by its size estimate)."""
    with reads_broadcast_limit(broadcast_limit):
        return _compute_changed_index(transformation, meta, request, pushdown_limit, by_input, broadcast_limit)


def _compute_changed_index(
    transformation: Transformation,
    meta: VersionedTable,
    request: IndexRequest,
    pushdown_limit: int,
    by_input: Mapping[str, Sequence[DeltaInfo]] | None,
    limit: int | None,
) -> ChangedIndex | None:
    keys = list(transformation.transform_keys)
    if by_input is None:
        by_input = request.deltas_by_input(transformation)
    failures = listed_failure_deltas(meta, request)
    if request.use_offsets and not by_input and not failures and request.reprocess_ts is None:
        return None
    # Known before the plan is built: a small index is planned without exchanges.
    most_rows = most_index_rows(transformation, request, by_input, failures, meta)
    small = limit is not None and is_bounded(most_rows, limit)
    parts: list[Candidates] = [
        input_candidates(transformation, inp, by_input[inp.name], request.snapshot, pushdown_limit, limit, small)
        for inp in transformation.inputs if inp.name in by_input
    ]
    failed = failed_keys(transformation, meta, failures if request.use_offsets else None, limit)
    if failed is not None:
        parts.append(failed)
    rows = None
    if parts:
        candidates = reduce(DataFrame.unionByName, [part.rows for part in parts])
        single = all(part.one_partition for part in parts)
        if request.use_offsets:
            meta_deltas = meta_deltas_since(meta, request, by_input) or []
            known_rows = versions_bound(meta_deltas)
            known = latest_meta_of(meta, meta_deltas, limit) if meta_deltas else None
        else:
            known = meta.read_actual().select(*keys, "process_ts", "is_success")
            known_rows = None if limit is None else actual_bound(request.meta_listing(meta))
        rows = candidates.select(*keys, TS_COL, INPUT_COL)
        if known is not None:  # else no key was processed since the offsets: none to drop
            in_place = single and limit is not None and is_bounded(known_rows, limit)
            rows = _unprocessed(candidates, known, keys, transformation.nullable_keys, in_place, known_rows, limit)
    if request.reprocess_ts is not None:
        waiting = reprocess_keys(transformation, meta, request.snapshot, request.reprocess_ts, limit,
                                 meta_deltas=request.meta_deltas)
        rows = waiting if rows is None else rows.unionByName(waiting)
    if rows is None:
        return None
    return ChangedIndex(rows=rows, transform_keys=keys, most_rows=most_rows)


def _unprocessed(candidates: DataFrame, known: DataFrame, keys: list[str], nullable: frozenset[str],
                 in_place: bool, known_rows: int | None, limit: int | None) -> DataFrame:
    """The candidate rows whose key has no newer successful processing in `known` (a NULL
    in a `nullable` key finds its own meta: `key_joins.py`).
    `in_place`: both sides are one partition, so a sort-merge join needs no exchange (a
    broadcast would be a Spark job of its own); else the join is planned by the bound."""
    known = known.hint("merge") if in_place else build_side(known, known_rows, limit)
    joined = join_on_keys(candidates, known, keys, "left", nullable)
    return joined.where(
        F.col("process_ts").isNull()
        | ~F.col("is_success")
        | (F.col(TS_COL) > F.col("process_ts"))
    ).select(*keys, TS_COL, INPUT_COL)


def in_batch_order(keys: DataFrame, transform_keys: list[str]) -> DataFrame:
    """`keys` sorted in batch order (failed keys, which have no timestamp, first; then
    update_ts, then the key), each row with the partition it lands in and an id that
    counts up within that partition (`batch_column` turns both into a global rank).

    A global sort is range-partitioned: every partition sorts its own range, so no task
    holds the whole key set (a window without a partition moves every row into one). The
    result must be persisted before its partitions are counted: the ranges are sampled
    when the sort runs, and only the cached rows keep one partitioning for both reads."""
    ordered = keys.orderBy(F.col(FIRST_TS_COL).asc_nulls_first(), *[F.col(k).asc_nulls_first() for k in transform_keys])
    return ordered.withColumn(PART_COL, F.spark_partition_id()).withColumn(ROW_ID_COL, F.monotonically_increasing_id())


def batch_column(rows_per_partition: Mapping[int, int], batch_size: int) -> Column:
    """The batch number of each row of `in_batch_order`'s result, from the rows its
    partitions hold: a row's global rank is the rows of the partitions before its own plus
    its place in its own (`monotonically_increasing_id` puts the partition in the bits
    above the 33rd)."""
    before, offsets = 0, []
    for part in sorted(rows_per_partition):
        offsets += [F.lit(part), F.lit(before)]
        before += rows_per_partition[part]
    if not offsets:
        return F.lit(0)
    place = F.col(ROW_ID_COL) - F.shiftleft(F.col(PART_COL).cast("long"), 33)
    rank = F.create_map(*offsets)[F.col(PART_COL)] + place
    return F.floor(rank / F.lit(batch_size)).cast("int")


def batch_sizes(total: int, batch_size: int | None) -> dict[int, int]:
    """Batches of `batch_size` keys in order (the last may be smaller); one when None."""
    size = batch_size or max(total, 1)
    return {number: min(size, total - number * size) for number in range(-(-total // size))}
