"""A sensor that launches an incremental asset when its inputs have commits beyond its offsets.

Each tick reads the control plane (the offsets, and the committed deltas since each
offset from the delta catalog) and, when there is new work, the Dagster instance's run
storage; it never starts Spark. A non-empty delta committed after both the input's
offset and the cursor is new work, and the sensor requests a run of the asset for it,
except:

- while a run that will materialize the asset or one of its upstream assets is queued
  or in progress (declarative automation waits for the same): that run takes the work,
  or a later tick sees what it left;
- when the asset has an automation condition, for `automation_grace_s` after the work
  and every such run settled (the later of the commit, the end of the Dagster run that
  committed it, the end of the last run of the asset or of an upstream asset):
  declarative automation requests a run within its own interval once things are quiet,
  and two runs of one transformation at once would have the second refused by the lease.

So beside automation the sensor requests only what automation does not: commits made
outside Dagster (engine API, CLI, another orchestrator), a materialization of a
partition the asset's partitions definition does not hold (automation drops it), the
work of a failed run (retried once); and everything while automation is off.

The cursor is JSON, `{input_table_name: last requested commit_ts}`, so the same commits
are not requested twice; a skipped tick leaves it as it was. If a requested run fails,
its offsets stay behind and the next new commit requests again; meanwhile the
`offset_age` and `offset_backlog` checks show the lag.
"""

# No `from __future__ import annotations`: Dagster inspects the decorated functions'
# annotations (the context type) at definition time, so they must not be strings.

import json
import time
from collections.abc import Iterable, Mapping, Sequence

import dagster as dg

from offset_assets.control_plane.database import ControlPlane
from offset_assets.control_plane.delta_catalog import DeltaCatalog
from offset_assets.control_plane.delta_catalog.records import DeltaInfo
from offset_assets.control_plane.offsets import OffsetRepository
from offset_assets.dagster_adapter.asset_spec import IncrementalAsset, resolve_incremental
from offset_assets.dagster_adapter.offset_store import OffsetStore

# The default automation condition sensor evaluates every 30 s: four intervals.
DEFAULT_AUTOMATION_GRACE_S = 120.0


def new_input_commits(plane: ControlPlane, transformation_id: str, input_tables: Iterable[str],
                      seen: Mapping[str, float]) -> dict[str, DeltaInfo]:
    """Per input with new work, the newest non-empty delta committed beyond both its
    offset and `seen`; inputs without such a delta are left out."""
    offsets = OffsetRepository(plane).get_offsets_for_transformation(transformation_id)
    catalog = DeltaCatalog(plane)
    newest: dict[str, DeltaInfo] = {}
    for name in input_tables:
        floors = [v for v in (offsets.get(name), seen.get(name)) if v is not None]
        floor = max(floors) if floors else None
        deltas = catalog.committed_beyond(name, floor)
        if deltas:
            newest[name] = max(deltas, key=lambda d: d.commit_ts)
    return newest


def build_offset_sensor(
    assets_def: dg.AssetsDefinition,
    *,
    name: str | None = None,
    minimum_interval_seconds: int = 30,
    default_status: dg.DefaultSensorStatus = dg.DefaultSensorStatus.STOPPED,
    automation_grace_s: float | None = None,
) -> dg.SensorDefinition:
    """A sensor requesting a run of the incremental asset `assets_def` whenever one of
    its inputs has commits beyond its offsets, as the job `<transformation>_job` (so the
    run names its target; a multi-asset's job selects all its outputs, which commit
    together). Needs the `OffsetStore` resource under the key `offset_store`.

    `automation_grace_s`: how long after the run that committed them new commits are
    left to declarative automation; default `DEFAULT_AUTOMATION_GRACE_S` when the asset
    has an automation condition, else 0. Either way no run is requested while the asset
    or one of its upstream assets is being materialized."""
    asset = resolve_incremental(assets_def)
    if asset is None:
        keys = ", ".join(sorted(key.to_user_string() for key in assets_def.keys))
        raise dg.DagsterInvalidDefinitionError(f"asset {keys} is not incremental: no offsets to watch")
    selection = [out.asset_key for out in asset.outputs]
    spec = assets_def.specs_by_key[asset.asset_key]
    if automation_grace_s is None:
        automation_grace_s = DEFAULT_AUTOMATION_GRACE_S if spec.automation_condition else 0.0
    watched = (*selection, *sorted({dep.asset_key for dep in spec.deps}, key=str))

    @dg.sensor(
        name=name or f"{asset.transformation_id}_inputs_changed",
        job=dg.define_asset_job(f"{asset.transformation_id}_job", selection=selection),
        minimum_interval_seconds=minimum_interval_seconds,
        default_status=default_status,
        description=(
            f"Materializes {', '.join(key.to_user_string() for key in selection)} when "
            f"{', '.join(asset.input_tables)} "
            "have commits beyond its offsets and nothing upstream is running (control plane "
            "and run storage only, no Spark)"
            + (f"; commits made in Dagster are left to automation for {automation_grace_s:g} s."
               if automation_grace_s else ".")
        ),
    )
    def _sensor(context: dg.SensorEvaluationContext,
                offset_store: OffsetStore) -> dg.SensorResult | dg.SkipReason:
        return evaluate_offset_sensor(
            offset_store.control_plane(), asset, context.cursor, instance=context.instance,
            watched_keys=watched, automation_grace_s=automation_grace_s,
        )

    return _sensor


def evaluate_offset_sensor(
    plane: ControlPlane,
    asset: IncrementalAsset,
    cursor: str | None,
    *,
    instance: dg.DagsterInstance | None = None,
    watched_keys: Sequence[dg.AssetKey] = (),
    automation_grace_s: float = 0.0,
    now: float | None = None,
) -> dg.SensorResult | dg.SkipReason:
    """One tick. Without `instance` (a control-plane-only look, as the demo takes), runs
    in progress and the automation grace are not considered."""
    seen = {name: float(ts) for name, ts in json.loads(cursor or "{}").items()}
    newest = new_input_commits(plane, asset.transformation_id, asset.input_tables, seen)
    if not newest:
        return dg.SkipReason(
            f"no commits beyond the offsets of {asset.transformation_id} in "
            f"{', '.join(asset.input_tables)}"
        )
    if instance is not None:
        runs = latest_runs(instance, watched_keys)
        busy = next(((key, run) for key, run in runs.items() if not run.dagster_run.is_finished),
                    None)
        if busy is not None:
            key, run = busy
            return dg.SkipReason(
                f"{', '.join(sorted(newest))} have new commits, but run {run.dagster_run.run_id} "
                f"is materializing {key.to_user_string()}: waiting for it to end"
            )
        quiet_since = max([settled_at(instance, newest.values()),
                           *(_ended_at(run) for run in runs.values())])
        waited = (time.time() if now is None else now) - quiet_since
        if waited < automation_grace_s:
            return dg.SkipReason(
                f"new commits in {', '.join(sorted(newest))} are left to declarative automation "
                f"for {automation_grace_s - waited:.0f} s more"
            )
    run_key = f"{asset.transformation_id}:" + ",".join(
        f"{name}@{delta.commit_ts!r}" for name, delta in sorted(newest.items())
    )
    return dg.SensorResult(
        run_requests=[dg.RunRequest(run_key=run_key)],
        cursor=json.dumps({**seen, **{name: d.commit_ts for name, d in newest.items()}},
                          sort_keys=True),
    )


def latest_runs(instance: dg.DagsterInstance,
                asset_keys: Iterable[dg.AssetKey]) -> dict[dg.AssetKey, dg.RunRecord]:
    """Per asset key, the record of the run of its latest planned materialization: one
    not finished is queued or in progress (the rule of Dagster's
    `AutomationCondition.in_progress()` for unpartitioned assets)."""
    runs: dict[dg.AssetKey, dg.RunRecord] = {}
    for key in asset_keys:
        planned = instance.get_latest_planned_materialization_info(key)
        record = instance.get_run_record_by_id(planned.run_id) if planned is not None else None
        if record is not None:
            runs[key] = record
    return runs


def _ended_at(run: dg.RunRecord) -> float:
    # A run that never started (canceled while queued) may have no end time.
    return run.end_time if run.end_time is not None else run.update_timestamp.timestamp()


def settled_at(instance: dg.DagsterInstance, deltas: Iterable[DeltaInfo]) -> float:
    """When the newest of `deltas` settled: its commit, or the end of the Dagster run that
    committed it when that run is known and ended later (automation reacts to the run's
    materialization, which comes after the commit)."""
    moments = []
    for delta in deltas:
        record = instance.get_run_record_by_id(delta.run_id) if delta.run_id else None
        ended = _ended_at(record) if record is not None and record.dagster_run.is_finished else 0.0
        moments.append(max(delta.commit_ts, ended))
    return max(moments)
