"""The changed index: which transform keys a run must process.

For every input, the versions a run considers are read from the deltas committed since
the input's offset, inclusive (`update_ts >= offset`, the one boundary rule of the
project): a version committed at exactly the offset is read again and dropped by the
per-key check `update_ts > process_ts` when it was already processed. v2 reads that
meta from the meta deltas since the offsets only (see `latest_meta_since`). Keys whose
last processing failed are always included (v2 finds them in the meta deltas the control
plane lists as holding failures), and so are the keys a pending reprocess request still
covers. A changed row of a reference table marks the
primary records pointing at it (reverse join).

v1 runs the same comparison over the whole history without offsets (the full
comparison); it exists to verify v2 and to measure against it, and must return the same
keys.

Every join of the index is planned from the catalog before the plan is built: a side
whose rows the catalog's per-delta counts bound within `broadcast_limit` may be
broadcast (the changes of an incremental run), any other is shuffled (a first run, a
reprocess, v1's whole meta), so no JVM holds a relation proportional to the tables.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import reduce

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.types import DoubleType, StringType

from offset_assets.control_plane.delta_catalog import DeltaCatalog
from offset_assets.control_plane.delta_catalog.records import DeltaInfo
from offset_assets.engine.loading import build_side, read_actual_matching
from offset_assets.engine.transformation import Transformation, TransformInput
from offset_assets.versioned.layout import OP_UPSERT
from offset_assets.versioned.reads import broadcast_limit as reads_broadcast_limit
from offset_assets.versioned.reads import versions_bound
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


def _null_free(df: DataFrame, columns: list[str]) -> DataFrame:
    return df.where(" AND ".join(f"`{c}` IS NOT NULL" for c in columns))


def _versions_in(
    inp: TransformInput, deltas: Sequence[DeltaInfo], columns: list[str], limit: int | None = None,
) -> DataFrame:
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
    """
    table = inp.table
    changes = table.reader.history(deltas)
    picked = _null_free(changes.select(*columns, TS_COL), columns)
    if set(columns) <= set(table.primary_key):
        return picked
    pk = list(table.primary_key)
    by_record = Window.partitionBy(*pk).orderBy("sys_from")
    previous = changes.select(
        *[F.lag(c).over(by_record).alias(c) for c in columns],
        F.lag("sys_op").over(by_record).alias("_prev_op"),
        TS_COL,
    )
    replaced_live = F.col("_prev_op") == OP_UPSERT  # null (no predecessor in the range) is false
    within = _null_free(previous.where(replaced_live), columns).select(*columns, TS_COL)
    marked = picked.unionByName(within)
    first = deltas[0].delta_num
    if first <= 1:
        return marked
    earliest = changes.groupBy(*pk).agg(F.min(TS_COL).alias(TS_COL))
    bound = versions_bound(deltas)  # one row per record that has a version in `deltas`
    before = table.read_actual(as_of_delta=first - 1, keys=build_side(earliest.select(*pk), bound, limit))
    before = before.select(*pk, *[c for c in columns if c not in pk])
    before = before.join(build_side(earliest, bound, limit, inner=True), on=pk).select(*columns, TS_COL)
    return marked.unionByName(_null_free(before, columns))


def deltas_to_read(catalog: DeltaCatalog, name: str, since: float, snapshot: RunSnapshot,
                   settled_delta: int) -> list[DeltaInfo]:
    """The committed deltas of input `name` a run reads: commit_ts >= `since` (the
    inclusive boundary), up to the run snapshot, after the last delta a complete earlier
    run processed entirely (`settled_delta`: re-reading those could only find processed
    versions), and not empty."""
    up_to = snapshot.deltas.get(name, 0)
    if up_to <= settled_delta:
        return []
    committed = catalog.committed(name, since_ts=since, up_to_delta=up_to)
    return [d for d in committed if d.delta_num > settled_delta and not d.is_empty]


def input_candidates(
    transformation: Transformation,
    inp: TransformInput,
    deltas: Sequence[DeltaInfo],
    snapshot: RunSnapshot,
    pushdown_limit: int,
    broadcast_limit: int | None = None,
) -> DataFrame:
    """(transform keys..., update_ts, _input_name) marked by the changes of one input
    written by `deltas`."""
    keys = list(transformation.transform_keys)
    if not inp.is_reference:
        marked = _versions_in(inp, deltas, keys, broadcast_limit)
    else:
        join_keys = dict(inp.join_keys)
        ref_cols = list(join_keys.values())
        # At most one row per version (the reference's primary key holds the join columns)
        # or three (the new value, the replaced one within the range and before it).
        bound = versions_bound(deltas)
        if bound is not None and not set(ref_cols) <= set(inp.table.primary_key):
            bound *= 3
        changed = _versions_in(inp, deltas, ref_cols, broadcast_limit).select(
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
                most_values=bound,
                broadcast_limit=broadcast_limit,
            ).select(*{*keys, *primary_cols})
            hit = pointing.join(build_side(changed, bound, broadcast_limit, inner=True), on=primary_cols)
            hit = hit.select(*keys, TS_COL)
            marked = hit if marked is None else marked.unionByName(hit)
    return marked.withColumn(INPUT_COL, F.lit(inp.name))


def failed_keys(transformation: Transformation, meta: VersionedTable, failed_deltas: Sequence[DeltaInfo] | None,
                ) -> DataFrame | None:
    """Keys whose last processing failed: retried by every run, whatever the offsets.

    v2 (`failed_deltas` given) reads only the meta deltas that recorded failures still
    listed in the control plane, so the cost follows the failures, not the meta; v1
    (`None`) scans the actual meta. The caller's meta check drops keys that have since
    been processed with success."""
    keys = list(transformation.transform_keys)
    if failed_deltas is None:
        source = meta.read_actual()
    elif not failed_deltas:
        return None
    else:
        source = meta.reader.history(failed_deltas)
    return source.where(~F.col("is_success")).select(
        *keys,
        F.lit(None).cast(DoubleType()).alias(TS_COL),
        F.lit(None).cast(StringType()).alias(INPUT_COL),
    )


def latest_meta_since(meta: VersionedTable, since: float, up_to_delta: int | None) -> DataFrame:
    """The newest meta version of every key written since `since` (inclusive).

    Why this is enough for v2: a meta row carries the process_ts P of its run and is
    committed at a commit_ts > P, so every meta row with process_ts >= `since` is in these
    deltas, and a key's newest version here is its actual meta. A candidate version with
    update_ts >= `since` whose key has no meta here was not processed after it."""
    return latest_meta_of(meta, meta.catalog.committed(meta.name, since_ts=since, up_to_delta=up_to_delta))


def latest_meta_of(meta: VersionedTable, deltas: Sequence[DeltaInfo]) -> DataFrame:
    """The newest meta version of every key that has one in `deltas`."""
    history = meta.reader.history(deltas)
    keys = list(meta.primary_key)
    newest = Window.partitionBy(*keys).orderBy(F.col("sys_from").desc())
    return history.withColumn("_rank", F.row_number().over(newest)).where("_rank = 1").drop("_rank")


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
        known = known.unionByName(_null_free(actual.select(*keys), keys))
    state = meta.read_actual().select(*keys, "process_ts", "is_success")
    if broadcast_limit is not None:
        listed = meta.catalog.committed(meta.name) if meta_deltas is None else meta_deltas
        state = build_side(state, actual_bound(listed), broadcast_limit)
    waiting = known.distinct().join(state, on=keys, how="left").where(
        F.col("process_ts").isNull() | ~F.col("is_success") | (F.col("process_ts") < F.lit(requested_ts))
    )
    return waiting.select(
        *keys,
        F.lit(None).cast(DoubleType()).alias(TS_COL),
        F.lit(None).cast(StringType()).alias(INPUT_COL),
    )


@dataclass(frozen=True)
class IndexRequest:
    """What the control plane says before any data is read.

    `settled`: per input, the last delta a complete earlier run processed entirely (v2);
    `failed_deltas`: the meta deltas listed as holding failed keys, and `failed_since` the
    commit_ts of the oldest of them (v2); `reprocess_ts`: the clock value R of a pending
    reprocess request; `meta_deltas`: the meta's committed deltas when the run listed them
    already (None: the changed index lists them when it needs them)."""

    snapshot: RunSnapshot
    offsets: Mapping[str, float]
    use_offsets: bool
    settled: Mapping[str, int] = field(default_factory=dict)
    failed_deltas: Sequence[int] = ()
    failed_since: float | None = None
    reprocess_ts: float | None = None
    meta_deltas: Sequence[DeltaInfo] | None = None

    def meta_listing(self, meta: VersionedTable) -> list[DeltaInfo]:
        """The meta's committed deltas: the run's listing, or the catalog's now."""
        return meta.catalog.committed(meta.name) if self.meta_deltas is None else list(self.meta_deltas)

    def deltas_by_input(self, transformation: Transformation) -> dict[str, list[DeltaInfo]]:
        """The deltas each input contributes (inputs with none left out)."""
        catalog = DeltaCatalog(transformation.outputs[0].plane)
        return self.deltas_by_name(catalog, [inp.name for inp in transformation.inputs])

    def deltas_by_name(self, catalog: DeltaCatalog, input_names: Sequence[str]) -> dict[str, list[DeltaInfo]]:
        """`deltas_by_input` by table name: the control plane alone, no Spark."""
        found = {}
        for name in input_names:
            since = self.offsets.get(name, ALL_HISTORY) if self.use_offsets else ALL_HISTORY
            settled = self.settled.get(name, 0) if self.use_offsets else 0
            deltas = deltas_to_read(catalog, name, since, self.snapshot, settled)
            if deltas:
                found[name] = deltas
        return found

    def is_empty(self, catalog: DeltaCatalog, input_names: Sequence[str]) -> bool:
        """True when the control plane alone shows a run has nothing to process: offsets
        in use (v1 compares everything), no reprocess request, no listed failure, and no
        input delta to read. `compute_changed_index` returns None exactly then."""
        return (self.use_offsets and self.reprocess_ts is None and not self.failed_deltas
                and not self.deltas_by_name(catalog, input_names))


def _versions_written(deltas: Sequence[DeltaInfo]) -> int | None:
    return versions_bound(deltas)


def actual_bound(deltas: Sequence[DeltaInfo]) -> int | None:
    """At most this many actual rows after `deltas` (every live row was upserted by one of
    them), from the catalog alone; None when a count is unknown."""
    if any(d.rows_upserted is None for d in deltas):
        return None
    return sum(d.rows_upserted for d in deltas)


def listed_failure_deltas(meta: VersionedTable, request: IndexRequest) -> list[DeltaInfo]:
    """The meta deltas the control plane lists as holding failed keys (v2)."""
    if not (request.use_offsets and request.failed_deltas):
        return []
    listed = set(request.failed_deltas)
    return [d for d in request.meta_listing(meta) if d.delta_num in listed]


def most_index_rows(transformation: Transformation, request: IndexRequest,
                    by_input: Mapping[str, Sequence[DeltaInfo]], failures: Sequence[DeltaInfo],
                    meta: VersionedTable | None = None) -> int | None:
    """An upper bound on the changed index's rows from the catalog alone: each version a
    primary input's deltas wrote marks one key (three when the transform keys are not its
    primary key: the new key, the replaced version's within the range and before it), and
    each version of a listed failure's meta delta at most one; a reprocess request adds at
    most one row per actual row of the meta and of each primary input (`actual_bound`).
    None when unbounded (v1, a reference input's changes)."""
    if not request.use_offsets:
        return None
    waiting = 0
    if request.reprocess_ts is not None:
        if meta is None:
            return None
        catalog = meta.catalog
        listings = itertools.chain([request.meta_listing(meta)], (
            catalog.committed(inp.name, up_to_delta=request.snapshot.deltas.get(inp.name, 0))
            for inp in transformation.primary_inputs
        ))
        for listing in listings:
            bound = actual_bound(listing)
            if bound is None:
                return None
            waiting += bound
    keys = set(transformation.transform_keys)
    total = 0
    for inp in transformation.inputs:
        deltas = by_input.get(inp.name)
        if not deltas:
            continue
        written = None if inp.is_reference else _versions_written(deltas)
        if written is None:
            return None
        total += written * (1 if keys <= set(inp.table.primary_key) else 3)
    failed = _versions_written(failures)
    return None if failed is None else total + failed + waiting


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
    parts = [
        input_candidates(transformation, inp, by_input[inp.name], request.snapshot, pushdown_limit, limit)
        for inp in transformation.inputs if inp.name in by_input
    ]
    failures = listed_failure_deltas(meta, request)
    failed = failed_keys(transformation, meta, failures if request.use_offsets else None)
    if failed is not None:
        parts.append(failed)
    rows = None
    if parts:
        candidates = reduce(DataFrame.unionByName, parts)
        if request.use_offsets:
            read_from = [deltas[0].commit_ts for deltas in by_input.values()]
            if request.failed_since is not None:
                read_from.append(request.failed_since)
            since = min(read_from)
            if request.meta_deltas is None:
                meta_deltas = meta.catalog.committed(meta.name, since_ts=since)
            else:  # the same deltas, from the run's listing (commit_ts >= since, number order)
                meta_deltas = [d for d in request.meta_deltas if d.commit_ts >= since]
            known, known_rows = latest_meta_of(meta, meta_deltas), versions_bound(meta_deltas)
        else:
            known = meta.read_actual()
            known_rows = None if limit is None else actual_bound(request.meta_listing(meta))
        known = build_side(known.select(*keys, "process_ts", "is_success"), known_rows, limit)
        joined = candidates.join(known, on=keys, how="left")
        rows = joined.where(
            F.col("process_ts").isNull()
            | ~F.col("is_success")
            | (F.col(TS_COL) > F.col("process_ts"))
        ).select(*keys, TS_COL, INPUT_COL)
    if request.reprocess_ts is not None:
        waiting = reprocess_keys(transformation, meta, request.snapshot, request.reprocess_ts, limit,
                                 meta_deltas=request.meta_deltas)
        rows = waiting if rows is None else rows.unionByName(waiting)
    if rows is None:
        return None
    return ChangedIndex(rows=rows, transform_keys=keys,
                        most_rows=most_index_rows(transformation, request, by_input, failures, meta))


def assign_batches(keys: DataFrame, transform_keys: list[str], batch_size: int | None) -> DataFrame:
    """Number batches in update_ts order (failed keys, which have no timestamp, first)."""
    if batch_size is None:
        return keys.withColumn(BATCH_COL, F.lit(0))
    order = Window.orderBy(F.col(FIRST_TS_COL).asc_nulls_first(), *transform_keys)
    return keys.withColumn(
        BATCH_COL, F.floor((F.row_number().over(order) - 1) / F.lit(batch_size)).cast("int")
    )
