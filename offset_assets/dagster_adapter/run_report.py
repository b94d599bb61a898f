"""What a run did, for Dagster: a `RunResult` as materialization metadata, a summary,
materialization or observation events, and each input's offset lag.

`run_metadata(result)` turns the engine's `RunResult` into flat, typed entries
(`rows_read.posts`, `offset_after.posts`, ...); the Dagster UI plots the numeric ones
across materializations (the Plots view of the Metadata section on the asset's
Overview). `run_summary` is the same run in a few Markdown lines. `report_run` does the
whole report of a finished run for either path (the IO manager's `handle_output`, the
engine body of `incremental_asset`): log, reset tag, failed-keys policy, metadata per
output; `run_events` and `observe_idle_run` turn a run into the events of an asset body.

What an asset declares before any run is `asset_spec.py`.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import dagster as dg

from offset_assets.control_plane.database import ControlPlane
from offset_assets.control_plane.delta_catalog import DeltaCatalog
from offset_assets.control_plane.offsets import OffsetRepository
from offset_assets.dagster_adapter.asset_spec import FailedKeysPolicy, IncrementalAsset
from offset_assets.dagster_adapter.backfill import OFFSETS_RESET_TAG_PREFIX
from offset_assets.dagster_adapter.engine_resource import IncrementalEngineResource
from offset_assets.engine.result import RunResult


def report_run(context: dg.OutputContext | dg.AssetExecutionContext, asset: IncrementalAsset,
               result: RunResult, reset: str | None, engine: IncrementalEngineResource,
               counted: Collection[dg.AssetKey] | None = None,
               ) -> dict[dg.AssetKey, dict[str, dg.MetadataValue]]:
    """Log the run, build each output asset's metadata and apply the failed-keys policy
    (raises `Failure`). `dagster/row_count` (one Spark job over the table, when the
    resource's `row_count` is on) only for the outputs in `counted` (default: every one):
    an output the run left as it was keeps its count. An `OutputContext` (the IO
    manager) also gets its asset's metadata as output metadata.

    A reset also tags the Dagster run, `offset_assets/offsets_reset.<transformation>` =
    the reason (`backfill <id>`, `tag offset_assets/reset=true`): short, so the runs list
    of a backfill shows it whole; which offsets were reset, and their old values, are in
    the materialization metadata (`offsets_reset`) and the run log."""
    lags = offset_lag_seconds(engine.control_plane(), asset.transformation_id, asset.input_tables)
    by_output = {
        out.asset_key: run_metadata(
            output_view(result, out.table_name, asset.output_tables), output_tables=[out.table_name],
            reset_reason=reset, offset_lag_s=lags,
            row_count=(engine.table(out.asset_key).read_actual().count()
                       if engine.row_count and (counted is None or out.asset_key in counted) else None))
        for out in asset.outputs
    }
    context.log.info(run_summary(result, reset))
    if reset is not None:
        context.log.warning(
            f"{asset.asset_key.to_user_string()}: {reset}: offsets reset "
            f"({reset_offsets_text(result)}) and every key reprocessed"
        )
        instance = context.step_context.instance if isinstance(context, dg.OutputContext) else context.instance
        instance.add_run_tags(context.run_id, {f"{OFFSETS_RESET_TAG_PREFIX}{asset.transformation_id}": reset})
    check_failed_keys(result, asset.spec.on_failed_keys, by_output[asset.asset_key], context.log)
    if isinstance(context, dg.OutputContext):
        context.add_output_metadata(by_output[asset.asset_key])
    return by_output


def run_events(context: dg.AssetExecutionContext, asset: IncrementalAsset, result: RunResult,
               reset: str | None, engine: IncrementalEngineResource, *,
               explicit: bool) -> Iterator[dg.MaterializeResult]:
    """The events of an asset body's finished run: a materialization per output that
    committed a version (a row written or deleted), an observation for every other
    output (every processed key left it as it was). A materialization is what wakes
    downstream automation and the downstream steps of the run. An `explicit` run (a
    reset, a key list) materializes every output: the user asked for it."""
    materialized = [out.asset_key for out in asset.outputs
                    if explicit or result.versions_written(out.table_name) > 0]
    reports = report_run(context, asset, result, reset, engine, counted=materialized)
    for out in asset.outputs:
        if out.asset_key in materialized:
            yield dg.MaterializeResult(asset_key=out.asset_key, metadata=reports[out.asset_key])
        else:
            context.log.info(f"{out.asset_key.to_user_string()}: no output changed; "
                             "reported as an observation, downstream assets not woken")
            _observe(context, out.asset_key, reports[out.asset_key])


def observe_idle_run(context: dg.AssetExecutionContext, asset: IncrementalAsset, result: RunResult,
                     engine: IncrementalEngineResource) -> None:
    """An observation on each output of a run the control plane answered (nothing to do):
    the same entries as any run, without the row count, which would need Spark."""
    lags = offset_lag_seconds(engine.control_plane(), asset.transformation_id, asset.input_tables)
    context.log.info(run_summary(result, None))
    for out in asset.outputs:
        _observe(context, out.asset_key,
                 run_metadata(result, output_tables=[out.table_name], offset_lag_s=lags))


def _observe(context: dg.AssetExecutionContext, asset_key: dg.AssetKey,
             metadata: dict[str, dg.MetadataValue]) -> None:
    context.log_event(dg.AssetObservation(asset_key=asset_key, metadata=metadata))


def offset_lag_seconds(plane: ControlPlane, transformation_id: str,
                       input_tables: Iterable[str]) -> dict[str, float | None]:
    """Per input, how far its offset lags behind its newest non-empty commit, in seconds
    of commit time (0 when nothing committed is beyond the offset; None without an
    offset). Unlike the offset's age, this stays 0 while an input receives nothing."""
    offsets = OffsetRepository(plane).get_offsets_for_transformation(transformation_id)
    catalog = DeltaCatalog(plane)
    lags: dict[str, float | None] = {}
    for name in input_tables:
        offset = offsets.get(name)
        if offset is None:
            lags[name] = None
            continue
        beyond = [d.commit_ts for d in catalog.committed_beyond(name, offset)]
        lags[name] = max(beyond) - offset if beyond else 0.0
    return lags


def run_label(result: RunResult, reset_reason: str | None) -> str:
    """What kind of run it was, in the words of the UI: `incremental` (only what changed
    since the offsets), `reprocess` (every key, after an offset reset) or `changelist`."""
    if result.mode == "changelist":
        return "changelist"
    return "reprocess" if reset_reason is not None else "incremental"


def run_metadata(result: RunResult, output_tables: Sequence[str] = (),
                 reset_reason: str | None = None, row_count: int | None = None,
                 offset_lag_s: Mapping[str, float | None] | None = None,
                 ) -> dict[str, dg.MetadataValue]:
    """Materialization metadata of one engine run, every entry typed.

    Counts are on every run (zeros included), so the UI plots them across
    materializations. An entry without a value is left out, never shown as null or `{}`:
    no `offset_before.X` before an input's first offset (or after a reset), no
    `delta.X` when nothing was committed, `offsets_reset` only on a reset run that
    replaced offsets. Two clocks are named apart: `run_started_at`/`run_finished_at` are
    the run's wall clock; `inputs_committed_up_to` is the snapshot's commit clock (the
    keys' process_ts): the run read every input commit up to it, which on a quiet input
    is long before the run."""
    metadata: dict[str, dg.MetadataValue] = {
        "mode": dg.MetadataValue.text(run_label(result, reset_reason)),
        "change_detection": dg.MetadataValue.text(result.change_detection),
        "commit_mode": dg.MetadataValue.text(result.commit_mode),
        "changed_keys": dg.MetadataValue.int(result.changed_keys),
        "processed_keys": dg.MetadataValue.int(result.processed_keys),
        "failed_keys": dg.MetadataValue.int(result.failed_keys),
        "batches": dg.MetadataValue.int(result.batches),
        "batches_failed": dg.MetadataValue.int(result.batches_failed),
        "duration_s": dg.MetadataValue.float(round(result.duration_s, 3)),
    }
    if result.started_at is not None:
        metadata["run_started_at"] = dg.MetadataValue.timestamp(result.started_at)
    if result.finished_at is not None:
        metadata["run_finished_at"] = dg.MetadataValue.timestamp(result.finished_at)
    metadata["inputs_committed_up_to"] = dg.MetadataValue.timestamp(result.process_ts)
    metadata["engine_run_id"] = dg.MetadataValue.text(result.run_id)
    if row_count is not None:
        metadata["dagster/row_count"] = dg.MetadataValue.int(row_count)
    for name in sorted({*result.snapshot_deltas, *result.rows_read}):
        metadata[f"rows_read.{name}"] = dg.MetadataValue.int(result.rows_read.get(name, 0))
    for name in sorted({*output_tables, *result.rows_written, *result.rows_deleted}):
        metadata[f"rows_written.{name}"] = dg.MetadataValue.int(result.rows_written.get(name, 0))
        metadata[f"rows_deleted.{name}"] = dg.MetadataValue.int(result.rows_deleted.get(name, 0))
    for name in sorted({*result.snapshot_deltas, *result.offsets_before, *result.offsets_after}):
        if name in result.offsets_before:
            metadata[f"offset_before.{name}"] = dg.MetadataValue.timestamp(result.offsets_before[name])
        if name in result.offsets_after:
            metadata[f"offset_after.{name}"] = dg.MetadataValue.timestamp(result.offsets_after[name])
    for name, lag in sorted((offset_lag_s or {}).items()):
        if lag is not None:
            metadata[f"offset_lag_s.{name}"] = dg.MetadataValue.float(round(lag, 3))
    for name, delta in sorted(result.snapshot_deltas.items()):
        metadata[f"input_delta.{name}"] = dg.MetadataValue.int(delta)
    for name in sorted({*output_tables, *result.deltas}):
        deltas = result.deltas.get(name, [])
        if deltas:
            metadata[f"delta.{name}"] = dg.MetadataValue.int(max(deltas))
        metadata[f"deltas_committed.{name}"] = dg.MetadataValue.int(len(deltas))
    if reset_reason is not None:
        metadata["reset_reason"] = dg.MetadataValue.text(reset_reason)
        if result.offsets_reset:
            metadata["offsets_reset"] = dg.MetadataValue.json(
                {name: iso_utc(ts) for name, ts in sorted(result.offsets_reset.items())})
    if result.errors:
        metadata["errors"] = dg.MetadataValue.md(
            "\n".join(f"- `{error.splitlines()[0][:300]}`" for error in result.errors)
        )
    metadata["summary"] = dg.MetadataValue.md(run_summary(result, reset_reason))
    return metadata


def output_view(result: RunResult, table: str, output_tables: Sequence[str]) -> RunResult:
    """The run as the asset of output `table` reports it: the rows written and deleted
    and the deltas of its own table, none of its sibling outputs' (the meta delta stays:
    it is the transformation's)."""
    siblings = set(output_tables) - {table}
    if not siblings:
        return result

    def own(by_table: dict[str, Any]) -> dict[str, Any]:
        return {name: value for name, value in by_table.items() if name not in siblings}

    return replace(result, rows_written=own(result.rows_written),
                   rows_deleted=own(result.rows_deleted), deltas=own(result.deltas))


def run_summary(result: RunResult, reset_reason: str | None = None) -> str:
    """The run in a few Markdown lines a person reads: what was processed and why, which
    input commits it read, and how each input's offset moved (as UTC dates)."""
    label = run_label(result, reset_reason)
    lines = [
        f"**{label}** run of `{result.transformation_id}` ({result.change_detection}, "
        f"commit {result.commit_mode}): processed {result.processed_keys} of "
        f"{result.changed_keys} changed key(s) in {result.batches} batch(es), "
        f"{result.failed_keys} failed, in {result.duration_s:.1f} s.",
        f"Read the inputs as committed up to {iso_utc(result.process_ts)}.",
    ]
    if reset_reason is not None:
        lines.append(f"Offsets reset by {reset_reason}: {reset_offsets_text(result)}.")
    lines.append("")
    lines.append("| input | rows read | offset before | offset after |")
    lines.append("|---|---|---|---|")
    for name in sorted({*result.snapshot_deltas, *result.rows_read}):
        lines.append(f"| {name} | {result.rows_read.get(name, 0)} | "
                     f"{_offset_before_text(result, name)} | "
                     f"{_date(result.offsets_after.get(name))} |")
    written = ", ".join(f"{name} {result.rows_written.get(name, 0)} written, "
                        f"{result.rows_deleted.get(name, 0)} deleted"
                        for name in sorted({*result.rows_written, *result.rows_deleted}))
    if written:
        lines += ["", f"Output: {written}."]
    return "\n".join(lines)


def reset_offsets_text(result: RunResult) -> str:
    """The offsets a reset replaced, as `input (was date)`, for the summary and the log."""
    return ", ".join(f"{name} (was {iso_utc(ts)})"
                     for name, ts in sorted(result.offsets_reset.items())) or "none were set"


def iso_utc(epoch_seconds: float) -> str:
    """An epoch time as an ISO 8601 UTC date with microseconds (offsets are that precise)."""
    moment = datetime.fromtimestamp(epoch_seconds, tz=UTC)
    return moment.isoformat(timespec="microseconds").replace("+00:00", "Z")


def _date(value: float | None) -> str:
    return "none" if value is None else iso_utc(value)


def _offset_before_text(result: RunResult, name: str) -> str:
    if name in result.offsets_reset:
        return f"reset (was {iso_utc(result.offsets_reset[name])})"
    return _date(result.offsets_before.get(name))


def check_failed_keys(result: RunResult, policy: FailedKeysPolicy,
                      metadata: Mapping[str, dg.MetadataValue], log: Any) -> None:
    """Failed keys never pass silently: `raise` fails the step with `dg.Failure` (the
    run's metadata attached), `warn` logs a warning and lets the materialization stand.
    Either way the keys are recorded as failed in meta and retried by later runs."""
    if result.failed_keys == 0:
        return
    message = (
        f"{result.transformation_id}: {result.failed_keys} key(s) failed in "
        f"{result.batches_failed} batch(es); they are retried by the next run: "
        + "; ".join(error.splitlines()[0][:300] for error in result.errors)
    )
    if policy == "raise":
        raise dg.Failure(description=message, metadata=dict(metadata))
    log.warning(message)
