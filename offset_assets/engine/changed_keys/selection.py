"""The entry point of the changed keys: which keys a run processes (`select_keys`), the
changed index of a full run (`index.py`) or a changelist's given keys (`explicit_keys`),
held by the driver or kept distributed (`held_keys.py`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from offset_assets.control_plane.delta_catalog.records import DeltaInfo
from offset_assets.engine.changed_keys.held_index import held_index
from offset_assets.engine.changed_keys.held_keys import (
    DistributedKeys,
    KeysLike,
    LocalKeys,
    collect_index,
    distributed_from_rows,
    local_from_keys,
    local_from_rows,
)
from offset_assets.engine.changed_keys.index import compute_changed_index
from offset_assets.engine.changed_keys.request import IndexRequest
from offset_assets.engine.errors import TransformationOutputError
from offset_assets.engine.transformation import Transformation
from offset_assets.engine.vocabulary import CommitMode
from offset_assets.local_frames import collect_instants, timestamp_columns
from offset_assets.versioned.caching import storage_level
from offset_assets.versioned.table import VersionedTable

__all__ = ["SelectedKeys", "explicit_keys", "select_keys"]


@dataclass
class SelectedKeys:
    """The keys a run processes, and the deltas whose versions loading may reuse: per
    primary input, the deltas the changed index read when the keys are held by the driver
    and offsets are in use (`loading.InputLoader`); none otherwise."""

    keys: LocalKeys | DistributedKeys
    deltas_read: Mapping[str, Sequence[DeltaInfo]] = field(default_factory=dict)


def select_keys(t: Transformation, meta: VersionedTable, request: IndexRequest | None,
                by_input: Mapping[str, Sequence[DeltaInfo]], explicit: KeysLike | None,
                pushdown_limit: int, limit: int, held_limit: int = 0) -> SelectedKeys:
    """The keys of a run: `explicit` ones (a changelist), else the changed index a full
    run's `request` asks for (`by_input`: the deltas each input contributes, `RunState`):
    computed by the driver when it reads at most `held_limit` versions (`held_index.py`),
    else by Spark, collected when within `limit` rows, else kept distributed."""
    columns = list(t.transform_keys)
    if explicit is not None:
        return SelectedKeys(explicit_keys(t, explicit, limit))
    key_types = {c: meta.schema[c].dataType for c in columns}
    deltas_read = by_input if request.use_offsets else {}
    held = held_index(t, meta, request, by_input, min(held_limit, limit))
    if held is not None:
        return SelectedKeys(local_from_rows(columns, held, t.batch_size), deltas_read)
    index = compute_changed_index(t, meta, request, pushdown_limit, by_input, broadcast_limit=limit)
    if index is None:
        return SelectedKeys(local_from_keys(columns, [], t.batch_size), deltas_read)
    if index.most_rows is not None and index.most_rows <= limit:
        # The catalog bounds the index within the limit: collect it, one job.
        collected = collect_index(index.rows, columns, key_types)
        return SelectedKeys(local_from_rows(columns, collected, t.batch_size), deltas_read)
    # Bounded above the limit: the index may not fit in memory, so it is cached on disk.
    rows = index.rows.persist(storage_level(index.most_rows is not None))
    try:
        # Not bounded by the catalog (v1, a reference input's changes): count, then
        # collect from the cache, two jobs. (A `limit().collect()` is a `take`, which
        # scans partitions in growing rounds: one job per round.) Bounded above the
        # limit (a first run, a reprocess of a large table): no count, the keys stay
        # distributed and the run streams through their batches.
        if index.most_rows is None and rows.count() <= limit:
            collected = collect_index(rows, columns, key_types)
            return SelectedKeys(local_from_rows(columns, collected, t.batch_size), deltas_read)
        return SelectedKeys(distributed_from_rows(columns, rows, t.batch_size,
                                                  with_min_ts=t.commit_mode == CommitMode.batch,
                                                  broadcast_limit=limit, nullable=t.nullable_keys))
    finally:
        rows.unpersist()


def explicit_keys(t: Transformation, keys: KeysLike, limit: int) -> LocalKeys | DistributedKeys:
    """The keys a changelist run is given, checked for the transform-key columns. A None
    is the NULL key where an input declares the column nullable; in a column every input
    declares not nullable it names no row: a frame's such rows are left out (as they
    always were), a mapping holding one is refused."""
    columns = list(t.transform_keys)
    never_null = [c for c in columns if c not in t.nullable_keys]
    if isinstance(keys, DataFrame):
        missing = [k for k in columns if k not in keys.columns]
        if missing:
            raise TransformationOutputError(
                f"run_changelist of {t.transformation_id!r}: keys lack column(s) {missing}"
            )
        frame = keys.select(*columns)
        if never_null:
            frame = frame.where(" AND ".join(f"`{c}` IS NOT NULL" for c in never_null))
        frame = frame.distinct()
        types = {c: t.inputs_with_column(c)[0].table.schema[c].dataType for c in columns}
        collected = collect_instants(frame.limit(limit + 1), columns, timestamp_columns(types))
        if len(collected) > limit:
            rows = frame.select(*columns, F.lit(None).cast("double").alias("update_ts"),
                                F.lit(None).cast("string").alias("_input_name"))
            return distributed_from_rows(columns, rows, t.batch_size, with_min_ts=False, broadcast_limit=limit)
        return local_from_keys(columns, collected, t.batch_size, typed=True)
    values = []
    for row in keys:
        missing = [k for k in columns if k not in row]
        if missing:
            raise TransformationOutputError(
                f"run_changelist of {t.transformation_id!r}: key {dict(row)!r} lacks column(s) {missing}"
            )
        nulls = [k for k in never_null if row[k] is None]
        if nulls:
            raise TransformationOutputError(
                f"run_changelist of {t.transformation_id!r}: key {dict(row)!r} holds None in {nulls}, which every "
                "input declares not nullable: no row has that key"
            )
        values.append(tuple(row[k] for k in columns))
    return local_from_keys(columns, values, t.batch_size)
