"""The changed index: which transform keys a run must process.

For every input, the versions a run considers are read from the deltas committed since
the input's offset, inclusive (`update_ts >= offset`, the one boundary rule of the
project): a version committed at exactly the offset is read again and dropped by the
per-key check `update_ts > process_ts` when it was already processed. Keys whose last
processing failed are always included. A changed row of a reference table marks the
primary records pointing at it (reverse join).

v1 runs the same comparison over the whole history without offsets (seed 002's full
comparison); it exists to verify v2 and to measure against it, and must return the same
keys.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.types import DoubleType, StringType

from offset_assets.control_plane.delta_catalog import DeltaCatalog
from offset_assets.engine.loading import read_actual_matching
from offset_assets.engine.transformation import Transformation, TransformInput
from offset_assets.versioned.table import VersionedTable

# Offsets are commit timestamps (epoch seconds, > 0): reading "since 0" reads everything.
ALL_HISTORY = 0.0

INPUT_COL = "_input_name"
TS_COL = "update_ts"
FIRST_TS_COL = "_first_ts"
BATCH_COL = "_batch"


@dataclass(frozen=True)
class RunSnapshot:
    """What a run may see: each input's last committed delta, and the commit clock then.

    `process_ts` is the clock value: every version the run reads has update_ts <= it, and
    every later commit gets a strictly greater timestamp, so recording it as the keys'
    process_ts leaves no gap and never hides a later change.
    """

    deltas: Mapping[str, int]
    process_ts: float


@dataclass
class ChangedIndex:
    """Candidate rows (key, input, update_ts) that survived the meta check."""

    rows: DataFrame
    transform_keys: list[str]

    @property
    def keys(self) -> DataFrame:
        """One row per key to process, with the update_ts of its oldest change."""
        return self.rows.groupBy(*self.transform_keys).agg(F.min(TS_COL).alias(FIRST_TS_COL))


def _null_free(df: DataFrame, columns: list[str]) -> DataFrame:
    return df.where(" AND ".join(f"`{c}` IS NOT NULL" for c in columns))


def _versions_since(
    inp: TransformInput, since: float, snapshot: RunSnapshot, columns: list[str]
) -> DataFrame:
    """(columns..., update_ts) of every version of `inp` since `since`.

    When `columns` are not all primary-key columns, a change also marks the columns of
    the version it replaced (a post moving from user 1 to user 2 changes user 1's key
    too), stamped with the update_ts of the change: the predecessor inside the range by
    a window over the record's versions, the one before the range by an as-of read.
    """
    table = inp.table
    up_to = snapshot.deltas.get(table.name, 0)
    changes = table.read_changes_since(since, up_to_delta=up_to)
    picked = _null_free(changes.select(*columns, TS_COL), columns)
    if set(columns) <= set(table.primary_key):
        return picked
    pk = list(table.primary_key)
    by_record = Window.partitionBy(*pk).orderBy("sys_from")
    previous = changes.select(
        *[F.lag(c).over(by_record).alias(c) for c in columns],
        F.lag("sys_from").over(by_record).alias("_prev_from"),
        TS_COL,
    )
    within = _null_free(previous.where(F.col("_prev_from").isNotNull()), columns).select(*columns, TS_COL)
    marked = picked.unionByName(within)
    first = _first_delta_since(table, since)
    if first is None or first <= 1:
        return marked
    earliest = changes.groupBy(*pk).agg(F.min(TS_COL).alias(TS_COL))
    before = table.read_actual(as_of_delta=first - 1, keys=earliest.select(*pk))
    before = before.select(*pk, *[c for c in columns if c not in pk])
    before = before.join(earliest, on=pk).select(*columns, TS_COL)
    return marked.unionByName(_null_free(before, columns))


def _first_delta_since(table: VersionedTable, since: float) -> int | None:
    committed = DeltaCatalog(table.plane).committed(table.name, since_ts=since)
    return committed[0].delta_num if committed else None


def input_candidates(
    transformation: Transformation,
    inp: TransformInput,
    since: float,
    snapshot: RunSnapshot,
    pushdown_limit: int,
) -> DataFrame:
    """(transform keys..., update_ts, _input_name) marked by changes of one input."""
    keys = list(transformation.transform_keys)
    if not inp.is_reference:
        marked = _versions_since(inp, since, snapshot, keys)
    else:
        join_keys = dict(inp.join_keys)
        ref_cols = list(join_keys.values())
        changed = _versions_since(inp, since, snapshot, ref_cols).select(
            *[F.col(ref).alias(primary) for primary, ref in join_keys.items()], TS_COL
        )
        marked = None
        primary_cols = list(join_keys)
        for primary in transformation.primary_inputs:
            if not set(primary_cols) <= set(primary.table.data_columns):
                continue
            pointing = read_actual_matching(
                primary.table,
                changed,
                {col: col for col in primary_cols},
                snapshot.deltas.get(primary.name, 0),
                pushdown_limit,
            ).select(*{*keys, *primary_cols})
            hit = pointing.join(changed, on=primary_cols).select(*keys, TS_COL)
            marked = hit if marked is None else marked.unionByName(hit)
    return marked.withColumn(INPUT_COL, F.lit(inp.name))


def failed_keys(transformation: Transformation, meta: VersionedTable) -> DataFrame:
    """Keys whose last processing failed: retried by every run, whatever the offsets."""
    keys = list(transformation.transform_keys)
    return (
        meta.read_actual()
        .where(~F.col("is_success"))
        .select(
            *keys,
            F.lit(None).cast(DoubleType()).alias(TS_COL),
            F.lit(None).cast(StringType()).alias(INPUT_COL),
        )
    )


def compute_changed_index(
    transformation: Transformation,
    meta: VersionedTable,
    snapshot: RunSnapshot,
    offsets: Mapping[str, float],
    use_offsets: bool,
    pushdown_limit: int,
) -> ChangedIndex:
    keys = list(transformation.transform_keys)
    candidates = None
    for inp in transformation.inputs:
        since = offsets.get(inp.name, ALL_HISTORY) if use_offsets else ALL_HISTORY
        marked = input_candidates(transformation, inp, since, snapshot, pushdown_limit)
        candidates = marked if candidates is None else candidates.unionByName(marked)
    all_candidates = candidates.unionByName(failed_keys(transformation, meta))
    known = read_actual_matching(
        meta,
        all_candidates,
        {k: k for k in keys},
        None,
        pushdown_limit,
    ).select(*keys, "process_ts", "is_success")
    joined = all_candidates.join(known, on=keys, how="left")
    rows = joined.where(
        F.col("process_ts").isNull()
        | ~F.col("is_success")
        | (F.col(TS_COL) > F.col("process_ts"))
    ).select(*keys, TS_COL, INPUT_COL)
    return ChangedIndex(rows=rows, transform_keys=keys)


def assign_batches(keys: DataFrame, transform_keys: list[str], batch_size: int | None) -> DataFrame:
    """Number batches in update_ts order (failed keys, which have no timestamp, first)."""
    if batch_size is None:
        return keys.withColumn(BATCH_COL, F.lit(0))
    order = Window.orderBy(F.col(FIRST_TS_COL).asc_nulls_first(), *transform_keys)
    return keys.withColumn(
        BATCH_COL, F.floor((F.row_number().over(order) - 1) / F.lit(batch_size)).cast("int")
    )
