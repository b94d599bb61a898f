"""What the incremental assets downstream of an idle asset, selected in the same run,
have to do: the reason an idle step still yields its output.

Dagster skips a step when an output it depends on was not yielded ("skipped
dependencies"), and asset dependencies are step dependencies: Dagster has no dependency
that orders two steps without propagating the skip. So an incremental asset with
nothing to do, which normally ends with an observation and stops the cascade, would
also skip a downstream asset of the same run that has work of its own: a reprocess or
rescan request made from the shell, failed keys waiting, a key list in the run config,
commits it has not read yet (an earlier run stopped before it). Before it ends, the
idle step asks, from the control plane only, whether any incremental asset downstream
of it in the run's selection (directly, or through other selected assets) has such work;
if one has, it yields its output, so Dagster runs that asset, and says why in its
metadata (`downstream_work`). Without such work the idle step stays an observation. A
step whose run processed keys but changed no row of an output asks the same.

A fan-in gets work from its other upstream branches too, in this very run: an asset
reading the last assets of ten chains, of which one has a change, would be skipped by the
nine idle ones (each asks before the changed chain has reached the fan-in). So a
downstream asset also counts as having work when an incremental asset upstream of it,
selected in the run and not upstream only through the idle asset, has work: that work
may reach it. Which selected assets have work is asked of the control plane once per run
and process (`_work_in_run`), when a step first needs it: work that appears later in the
run comes from those assets' commits, so the answer holds for the run.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Collection, Mapping, Sequence
from typing import Any

import dagster as dg

from offset_assets.control_plane.database import ControlPlane
from offset_assets.dagster_adapter.asset_spec import IncrementalAsset, resolve_incremental
from offset_assets.dagster_adapter.incremental.run_report import iso_utc
from offset_assets.engine.pending import PendingWork, pending_work
from offset_assets.engine.vocabulary import ChangeDetection, WorkReason

# The work of each selected incremental asset of a run (`_work_in_run`), by run id: the
# steps of an in-process run share it. Only the last few runs are kept.
_RUN_WORK: OrderedDict[str, dict[dg.AssetKey, str | None]] = OrderedDict()
_RUNS_KEPT = 8


def downstream_work(context: dg.AssetExecutionContext, plane: ControlPlane,
                    asset: IncrementalAsset) -> dict[dg.AssetKey, list[str]]:
    """Per output of `asset`: `<downstream asset>: <its work>` for every incremental asset
    downstream of that output, selected in this run, that has work of its own or an
    upstream asset with work on another path (outputs without any are left out)."""
    layer = context.job_def.asset_layer
    graph, selected = layer.asset_graph, set(layer.selected_asset_keys)
    work = _work_in_run(context, plane)
    own = {out.asset_key for out in asset.outputs}
    found: dict[dg.AssetKey, list[str]] = {}
    for out in asset.outputs:
        waiting = []
        for key in _selected_descendants(graph, out.asset_key, selected):
            if key not in work or key in own:
                continue
            if work[key] is not None:
                waiting.append(f"{key.to_user_string()}: {work[key]}")
                continue
            feeding = [upstream for upstream in _selected_ancestors(graph, key, selected, blocked=own)
                       if work.get(upstream) is not None]
            if feeding:
                waiting.append(f"{key.to_user_string()}: {feeding[0].to_user_string()} upstream of it has work "
                               "in this run")
        if waiting:
            found[out.asset_key] = sorted(set(waiting))
    return found


def _work_in_run(context: dg.AssetExecutionContext, plane: ControlPlane) -> dict[dg.AssetKey, str | None]:
    """Each incremental asset selected in the run -> its work (`own_work`), asked once per
    run and process."""
    run_id = context.run.run_id
    if run_id in _RUN_WORK:
        return _RUN_WORK[run_id]
    layer = context.job_def.asset_layer
    graph = layer.asset_graph
    run_config_ops = (context.run.run_config or {}).get("ops", {})
    by_transformation: dict[str, str | None] = {}
    work: dict[dg.AssetKey, str | None] = {}
    for key in sorted(layer.selected_asset_keys):
        found = resolve_incremental(graph.get(key).assets_def, key)
        if found is None:
            continue
        if found.transformation_id not in by_transformation:
            op_config = run_config_ops.get(graph.get(key).assets_def.node_def.name, {}).get("config", {})
            by_transformation[found.transformation_id] = own_work(plane, found, op_config)
        work[key] = by_transformation[found.transformation_id]
    _RUN_WORK[run_id] = work
    while len(_RUN_WORK) > _RUNS_KEPT:
        _RUN_WORK.popitem(last=False)
    return work


def own_work(plane: ControlPlane, asset: IncrementalAsset, op_config: Mapping[str, object]) -> str | None:
    """What `asset`'s own step in this run would do, in a few words, or None when it
    would be idle: the same decision as its invocation (`IncrementalInvocation.start`),
    from the asset's run config, then the engine's answer (`pending_work`). (A run
    tagged to reset resets every incremental asset it runs: none of them is idle.)"""
    changelist = op_config.get("changelist")
    if changelist is not None:
        return f"a changelist of {len(changelist)} key(s)"
    if (op_config.get("change_detection") or asset.spec.change_detection) == ChangeDetection.v1:
        return "v1 change detection (compares every row)"
    work = pending_work(plane, asset.transformation_id, asset.input_tables, asset.output_tables)
    return None if work.is_idle else work_in_words(work)


def work_in_words(work: PendingWork) -> str:
    """The reason a transformation has work, as a step's metadata says it."""
    match work.reason:
        case WorkReason.reprocess_requested:
            return f"reprocess request of {iso_utc(work.reprocess_requested_at, 'seconds')}"
        case WorkReason.failed_keys:
            return "failed keys to retry"
        case WorkReason.first_run:
            return "its first run"
        case WorkReason.offsets_reset:
            return f"offsets reset, re-reads {', '.join(work.reset_inputs)}"
    return "input commits beyond its offsets"


def _selected_descendants(graph: Any, key: dg.AssetKey,
                          selected: set[dg.AssetKey]) -> Sequence[dg.AssetKey]:
    """The selected assets downstream of `key` through selected assets only: the steps
    of this run that a skipped `key` would skip. (`graph`: the job's asset graph, a
    class Dagster does not export.)"""
    found: list[dg.AssetKey] = []
    frontier = [key]
    while frontier:
        for child in sorted(graph.get(frontier.pop()).child_keys):
            if child in selected and child not in found:
                found.append(child)
                frontier.append(child)
    return found


def _selected_ancestors(graph: Any, key: dg.AssetKey, selected: set[dg.AssetKey],
                        blocked: Collection[dg.AssetKey]) -> Sequence[dg.AssetKey]:
    """The selected assets upstream of `key` through selected assets only, not through
    `blocked` ones: the steps of this run whose commits can reach `key` by another way."""
    found: list[dg.AssetKey] = []
    frontier = [key]
    while frontier:
        for parent in sorted(graph.get(frontier.pop()).parent_keys):
            if parent in selected and parent not in blocked and parent not in found:
                found.append(parent)
                frontier.append(parent)
    return found
