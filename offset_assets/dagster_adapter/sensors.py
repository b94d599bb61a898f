"""A sensor that launches an incremental asset when its inputs have commits beyond its offsets.

Each tick is two cheap control-plane queries per input (the offsets, and the committed
deltas since the offset from the delta catalog); it never starts Spark. A non-empty
delta committed after both the input's offset and the cursor is new work: the sensor
requests a run of the asset and moves the cursor to the newest commit seen per input,
so the same commits are not requested twice while that run is queued or running.

The cursor is JSON, `{input_table_name: last seen commit_ts}`. If a requested run
fails, its offsets stay behind and the next new commit requests again; meanwhile the
`offset_age` and `offset_backlog` checks show the lag.
"""

# No `from __future__ import annotations`: Dagster inspects the decorated functions'
# annotations (the context type) at definition time, so they must not be strings.

import json
from collections.abc import Iterable, Mapping

import dagster as dg

from offset_assets.control_plane.database import ControlPlane
from offset_assets.control_plane.delta_catalog import DeltaCatalog
from offset_assets.control_plane.offsets import OffsetRepository
from offset_assets.dagster_adapter.metadata import IncrementalAsset, resolve_incremental
from offset_assets.dagster_adapter.offset_store import OffsetStore


def new_input_commits(plane: ControlPlane, transformation_id: str, input_tables: Iterable[str],
                      seen: Mapping[str, float]) -> dict[str, float]:
    """Per input with new work, the newest non-empty commit beyond both its offset and
    `seen`; inputs without such a commit are left out."""
    offsets = OffsetRepository(plane).get_offsets_for_transformation(transformation_id)
    catalog = DeltaCatalog(plane)
    newest: dict[str, float] = {}
    for name in input_tables:
        floors = [v for v in (offsets.get(name), seen.get(name)) if v is not None]
        floor = max(floors) if floors else None
        commits = [
            d.commit_ts for d in catalog.committed(name, since_ts=floor)
            if not d.is_empty and (floor is None or d.commit_ts > floor)
        ]
        if commits:
            newest[name] = max(commits)
    return newest


def build_offset_sensor(
    assets_def: dg.AssetsDefinition,
    *,
    name: str | None = None,
    minimum_interval_seconds: int = 30,
    default_status: dg.DefaultSensorStatus = dg.DefaultSensorStatus.STOPPED,
) -> dg.SensorDefinition:
    """A sensor requesting a run of the incremental asset `assets_def` whenever one of
    its inputs has commits beyond its offsets, as the job `<transformation>_job` (so the
    run names its target; a multi-asset's job selects all its outputs, which commit
    together). Needs the `OffsetStore` resource under the key `offset_store`.

    For inputs written inside Dagster, declarative automation
    (`automation.on_input_commits()`) does the same without a sensor per asset; this
    sensor also sees commits made outside Dagster."""
    asset = resolve_incremental(assets_def)
    if asset is None:
        keys = ", ".join(sorted(key.to_user_string() for key in assets_def.keys))
        raise dg.DagsterInvalidDefinitionError(f"asset {keys} is not incremental: no offsets to watch")
    selection = [out.asset_key for out in asset.outputs]

    @dg.sensor(
        name=name or f"{asset.transformation_id}_inputs_changed",
        job=dg.define_asset_job(f"{asset.transformation_id}_job", selection=selection),
        minimum_interval_seconds=minimum_interval_seconds,
        default_status=default_status,
        description=(
            f"Materializes {', '.join(key.to_user_string() for key in selection)} when "
            f"{', '.join(asset.input_tables)} "
            "have commits beyond its offsets (control plane only, no Spark)."
        ),
    )
    def _sensor(context: dg.SensorEvaluationContext,
                offset_store: OffsetStore) -> dg.SensorResult | dg.SkipReason:
        return evaluate_offset_sensor(offset_store.control_plane(), asset, context.cursor)

    return _sensor


def evaluate_offset_sensor(plane: ControlPlane, asset: IncrementalAsset,
                           cursor: str | None) -> dg.SensorResult | dg.SkipReason:
    seen = {name: float(ts) for name, ts in json.loads(cursor or "{}").items()}
    newest = new_input_commits(plane, asset.transformation_id, asset.input_tables, seen)
    if not newest:
        return dg.SkipReason(
            f"no commits beyond the offsets of {asset.transformation_id} in "
            f"{', '.join(asset.input_tables)}"
        )
    run_key = f"{asset.transformation_id}:" + ",".join(
        f"{name}@{ts!r}" for name, ts in sorted(newest.items())
    )
    return dg.SensorResult(
        run_requests=[dg.RunRequest(run_key=run_key)],
        cursor=json.dumps({**seen, **newest}, sort_keys=True),
    )
