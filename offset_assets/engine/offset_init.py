"""Initialising offsets from existing transform meta: switch a transformation
that ran without offsets to offsets, without redoing its work."""

from __future__ import annotations

from pyspark.sql import functions as F

from offset_assets.engine.changed_keys import INPUT_COL, TS_COL, IndexRequest, RunSnapshot, compute_changed_index
from offset_assets.engine.meta import meta_table
from offset_assets.engine.state import RunEngine
from offset_assets.engine.transformation import Transformation


def initialize_offsets_from_transform_meta(engine: RunEngine, transformation: Transformation) -> dict[str, float]:
    """Per input, offset = the newest commit not after the oldest successful process_ts
    (the original offsets rule), capped by the oldest version that the meta shows as not
    yet processed (found by the v1 comparison): that rule assumes meta written by full runs,
    and the cap keeps the rule safe when it was not (changelist runs, failures).
    Nothing when there is no meta or an input is empty; a larger existing offset is kept.
    """
    tid = transformation.transformation_id
    meta = meta_table(engine.spark, engine.plane, transformation)
    min_process_ts = meta.read_actual().where(F.col("is_success")).agg(F.min("process_ts")).first()[0]
    if min_process_ts is None:
        return {}
    initial: dict[str, float] = {}
    for inp in transformation.inputs:
        commits = [
            d.commit_ts for d in engine.catalog.committed(inp.name)
            if d.commit_ts <= min_process_ts and ((d.rows_upserted or 0) + (d.rows_deleted or 0)) > 0
        ]
        if commits:
            initial[inp.name] = max(commits)
    deltas, clock = engine.catalog.snapshot_state([inp.name for inp in transformation.inputs])
    request = IndexRequest(snapshot=RunSnapshot(deltas, clock), offsets={}, use_offsets=False)
    index = compute_changed_index(transformation, meta, request, engine.pushdown_limit,
                                  broadcast_limit=engine.driver_keys_limit)
    if index is not None:
        waiting = index.rows.where(F.col(INPUT_COL).isNotNull()).groupBy(INPUT_COL).agg(F.min(TS_COL).alias("m"))
        for row in waiting.collect():
            if row[INPUT_COL] in initial:
                initial[row[INPUT_COL]] = min(initial[row[INPUT_COL]], row["m"])
    engine.offsets.update_offsets_bulk({(tid, name): ts for name, ts in initial.items()})
    stored = engine.offsets.get_offsets_for_transformation(tid)
    return {name: stored[name] for name in initial}
