"""Candidates of the changed index, rows of (transform keys..., update_ts, _input_name):
the keys each version of an input marks (one rule for v1 and v2, `_versions_in`), the
primary records a changed reference row points at (reverse join), the keys whose last
processing failed, and the keys a pending reprocess request still covers.

A NULL transform key is a key: it is marked, checked against the meta and processed like
any other (the meta check and every lookup by key match NULL to NULL:
`versioned/key_joins.py`). A reference's join value is not a key: a changed reference
row whose join value is NULL marks nothing, since SQL's join never matches NULL to NULL
and the function's own join pairs it with no primary row either.

A part whose plan scans only rows the catalog bounds within the run's limit (the deltas
since the offsets, the listed failures) is planned in one partition
(`loading.one_partition`) and says so (`Candidates.one_partition`): the changed index
then checks it against the meta without an exchange."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.types import DoubleType, StringType

from offset_assets.control_plane.delta_catalog.records import DeltaInfo
from offset_assets.engine.changed_keys.bounds import actual_bound
from offset_assets.engine.changed_keys.request import RunSnapshot
from offset_assets.engine.loading import build_side, is_bounded, one_partition, read_actual_matching
from offset_assets.engine.transformation import Transformation, TransformInput
from offset_assets.versioned.key_joins import join_on_keys, nullable_columns
from offset_assets.versioned.layout import OP_UPSERT, SYS_FROM, SYS_OP
from offset_assets.versioned.reads import versions_bound
from offset_assets.versioned.table import VersionedTable

INPUT_COL = "_input_name"
TS_COL = "update_ts"


@dataclass(frozen=True)
class Candidates:
    """Candidate rows, and whether their plan runs in one partition (every scan below it
    bounded by the catalog within the limit)."""

    rows: DataFrame
    one_partition: bool = False


def _null_free(df: DataFrame, columns: list[str]) -> DataFrame:
    return df.where(" AND ".join(f"`{c}` IS NOT NULL" for c in columns))


def _versions_in(
    inp: TransformInput, deltas: Sequence[DeltaInfo], columns: list[str], limit: int | None = None,
    join_values: bool = False,
) -> Candidates:
    """(columns..., update_ts) of every version of `inp` written by `deltas`: the keys
    each version marks, stamped with its update_ts.

    The rule, the same for v1 and v2 (they differ only in which deltas they read):
    - an upsert marks its own key and, when it replaced a live version, that version's
      key (a post moving from user 1 to user 2 changes user 1's key too);
    - a delete marks the key of the version it deleted: its tombstone carries that
      version's data (the storage writes it, whatever the delete row held), and a delete
      of a key that was not live wrote no version at all;
    - an insert after a delete marks its own key only: the tombstone is not a live
      version, and the deleted version's key was marked by the delete itself.
    When `columns` are the primary key (or part of it) the replaced version has the same
    key, so only the versions themselves are read; otherwise the replaced version is
    found inside the range by a window over the record's versions, before the range by an
    as-of read of the actual state (which holds no tombstones).

    `columns` are transform keys, a NULL among them a key like any other; or, with
    `join_values`, a reference's join columns, where a NULL marks nothing (SQL's join).
    The versions of `deltas` are one partition when the catalog bounds them within
    `limit`; the as-of read of the table is not (it scans the table).
    """
    table = inp.table
    pk = list(table.primary_key)
    bound = versions_bound(deltas)  # one row per record that has a version in `deltas`
    changes = table.reader.history(deltas).select(*dict.fromkeys([*columns, *pk, SYS_FROM, SYS_OP, TS_COL]))
    changes = one_partition(changes, bound, limit)
    single = limit is not None and is_bounded(bound, limit)

    def marks(df: DataFrame) -> DataFrame:
        return _null_free(df, columns) if join_values else df

    picked = marks(changes.select(*columns, TS_COL))
    if set(columns) <= set(table.primary_key):
        return Candidates(picked, single)
    by_record = Window.partitionBy(*pk).orderBy("sys_from")
    previous = changes.select(
        *[F.lag(c).over(by_record).alias(c) for c in columns],
        F.lag("sys_op").over(by_record).alias("_prev_op"),
        TS_COL,
    )
    replaced_live = F.col("_prev_op") == OP_UPSERT  # null (no predecessor in the range) is false
    within = marks(previous.where(replaced_live)).select(*columns, TS_COL)
    marked = picked.unionByName(within)
    first = deltas[0].delta_num
    if first <= 1:
        return Candidates(marked, single)
    earliest = changes.groupBy(*pk).agg(F.min(TS_COL).alias(TS_COL))
    before = table.read_actual(as_of_delta=first - 1, keys=build_side(earliest.select(*pk), bound, limit))
    before = before.select(*pk, *[c for c in columns if c not in pk])
    before = join_on_keys(before, build_side(earliest, bound, limit, inner=True), pk, "inner",
                          nullable_columns(table.schema)).select(*columns, TS_COL)
    return Candidates(marked.unionByName(marks(before)))


def input_candidates(
    transformation: Transformation,
    inp: TransformInput,
    deltas: Sequence[DeltaInfo],
    snapshot: RunSnapshot,
    pushdown_limit: int,
    broadcast_limit: int | None = None,
    small: bool = False,
) -> Candidates:
    """(transform keys..., update_ts, _input_name) marked by the changes of one input
    written by `deltas`.

    `small`: the catalog bounds the changed index within `broadcast_limit`
    (`index_bounds.most_index_rows`); the rows a reference's reverse join reads are then
    bounded too (each primary input's upserted rows bound the index), so they are read
    into one partition and joined in place with the changed references when those are one
    partition too, without a broadcast (a Spark job of its own)."""
    keys = list(transformation.transform_keys)
    if not inp.is_reference:
        marked = _versions_in(inp, deltas, keys, broadcast_limit)
        return Candidates(marked.rows.withColumn(INPUT_COL, F.lit(inp.name)), marked.one_partition)
    join_keys = dict(inp.join_keys)
    ref_cols = list(join_keys.values())
    # At most one row per version (the reference's primary key holds the join columns)
    # or three (the new value, the replaced one within the range and before it).
    bound = versions_bound(deltas)
    if bound is not None and not set(ref_cols) <= set(inp.table.primary_key):
        bound *= 3
    versions = _versions_in(inp, deltas, ref_cols, broadcast_limit, join_values=True)
    changed = versions.rows.select(*[F.col(ref).alias(primary) for primary, ref in join_keys.items()], TS_COL)
    in_place = small and versions.one_partition
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
            most_values=bound,
            broadcast_limit=broadcast_limit,
        ).select(*{*keys, *primary_cols})
        if in_place:
            hit = pointing.coalesce(1).join(changed.hint("merge"), on=primary_cols)
        else:
            hit = pointing.join(build_side(changed, bound, broadcast_limit, inner=True), on=primary_cols)
        hit = hit.select(*keys, TS_COL)
        marked = hit if marked is None else marked.unionByName(hit)
    return Candidates(marked.withColumn(INPUT_COL, F.lit(inp.name)), in_place)


def failed_keys(transformation: Transformation, meta: VersionedTable, failed_deltas: Sequence[DeltaInfo] | None,
                limit: int | None = None) -> Candidates | None:
    """Keys whose last processing failed: retried by every run, whatever the offsets.

    v2 (`failed_deltas` given) reads only the meta deltas that recorded failures still
    listed in the control plane, so the cost follows the failures, not the meta; v1
    (`None`) scans the actual meta. The caller's meta check drops keys that have since
    been processed with success. The listed deltas are one partition when the catalog
    bounds them within `limit`."""
    keys = list(transformation.transform_keys)
    single = False
    if failed_deltas is None:
        source = meta.read_actual()
    elif not failed_deltas:
        return None
    else:
        bound = versions_bound(failed_deltas)
        source = one_partition(meta.reader.history(failed_deltas).select(*keys, "is_success"), bound, limit)
        single = limit is not None and is_bounded(bound, limit)
    return Candidates(source.where(~F.col("is_success")).select(
        *keys,
        F.lit(None).cast(DoubleType()).alias(TS_COL),
        F.lit(None).cast(StringType()).alias(INPUT_COL),
    ), single)


def reprocess_keys(transformation: Transformation, meta: VersionedTable, snapshot: RunSnapshot,
                   requested_ts: float, broadcast_limit: int | None = None,
                   meta_deltas: Sequence[DeltaInfo] | None = None) -> DataFrame:
    """Keys a pending reprocess request still covers: every key in the inputs or the meta
    whose meta is older than the request (or missing, or failed). `meta_deltas`: the
    meta's committed deltas, when the caller has listed them."""
    keys = list(transformation.transform_keys)
    known = meta.read_actual().select(*keys)
    for inp in transformation.primary_inputs:
        actual = inp.table.read_actual(as_of_delta=snapshot.deltas.get(inp.name, 0))
        known = known.unionByName(actual.select(*keys))
    state = meta.read_actual().select(*keys, "process_ts", "is_success")
    if broadcast_limit is not None:
        listed = meta.catalog.committed(meta.name) if meta_deltas is None else meta_deltas
        state = build_side(state, actual_bound(listed), broadcast_limit)
    waiting = join_on_keys(known.distinct(), state, keys, "left", transformation.nullable_keys).where(
        F.col("process_ts").isNull() | ~F.col("is_success") | (F.col("process_ts") < F.lit(requested_ts))
    )
    return waiting.select(
        *keys,
        F.lit(None).cast(DoubleType()).alias(TS_COL),
        F.lit(None).cast(StringType()).alias(INPUT_COL),
    )
