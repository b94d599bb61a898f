"""Upper bounds of the changed index from the catalog's row counts alone, without a Spark
job: whether the index can be collected to the driver and which joins may broadcast."""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence

from offset_assets.control_plane.delta_catalog.records import DeltaInfo
from offset_assets.engine.changed_keys.request import IndexRequest
from offset_assets.engine.transformation import Transformation, TransformInput
from offset_assets.versioned.reads import versions_bound
from offset_assets.versioned.table import VersionedTable


def _versions_written(deltas: Sequence[DeltaInfo]) -> int | None:
    return versions_bound(deltas)


def actual_bound(deltas: Sequence[DeltaInfo]) -> int | None:
    """At most this many actual rows after `deltas` (every live row was upserted by one of
    them), from the catalog alone; None when a count is unknown."""
    if any(d.rows_upserted is None for d in deltas):
        return None
    return sum(d.rows_upserted for d in deltas)


def most_index_rows(transformation: Transformation, request: IndexRequest,
                    by_input: Mapping[str, Sequence[DeltaInfo]], failures: Sequence[DeltaInfo],
                    meta: VersionedTable | None = None) -> int | None:
    """An upper bound on the changed index's rows from the catalog alone: each version a
    primary input's deltas wrote marks one key (three when the transform keys are not its
    primary key: the new key, the replaced version's within the range and before it), and
    each version of a listed failure's meta delta at most one; a reprocess request adds at
    most one row per actual row of the meta and of each primary input (`actual_bound`);
    a reference input's changes add `_reverse_join_bound`. None when unbounded (v1) or a
    count is unknown."""
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
        if inp.is_reference:
            marked = _reverse_join_bound(transformation, inp, deltas, request)
        else:
            written = _versions_written(deltas)
            marked = None if written is None else written * (1 if keys <= set(inp.table.primary_key) else 3)
        if marked is None:
            return None
        total += marked
    failed = _versions_written(failures)
    return None if failed is None else total + failed + waiting


def _reverse_join_bound(transformation: Transformation, ref: TransformInput, deltas: Sequence[DeltaInfo],
                        request: IndexRequest) -> int | None:
    """At most this many index rows from a reference input's changes in `deltas`: the
    reverse join pairs each changed reference version (three per version when the join
    columns are not the reference's primary key, as `candidates.input_candidates` counts
    them) with the primary rows pointing at it, which are among the primary input's
    actual rows as of the run snapshot (one catalog aggregate per primary input)."""
    changed = _versions_written(deltas)
    if changed is None:
        return None
    if not set(ref.join_keys.values()) <= set(ref.table.primary_key):
        changed *= 3
    total = 0
    for primary in transformation.primary_inputs:
        if not set(ref.join_keys) <= set(primary.table.data_columns):
            continue
        pointing = primary.table.catalog.rows_upserted_up_to(primary.name, request.snapshot.deltas.get(primary.name, 0))
        if pointing is None:
            return None
        total += pointing * changed
    return total
