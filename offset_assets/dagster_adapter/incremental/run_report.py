"""What a run did, for Dagster: a finished run's `RunResult` as metadata, a summary, and
the events of its asset (the one event iterator of both paths).

`RunReport` is a finished run as its asset reports it: the engine's result, why every
key was reprocessed (a backfill's tags, a reprocess request the run worked on), and the
outputs' row counts. Everything it says comes from the result: offsets before and
after, each input's lag (`RunResult.offset_lag_s`), rows read and written, row counts;
reporting reads neither the control plane nor Spark. `run_events` turns it into the
events of an asset body (a materialization per output that committed a version, an
observation otherwise); `report_output` does the same for the IO manager's
`handle_output`. `run_metadata(result)` is the flat, typed entries (`rows_read.posts`,
`offset_after.posts`, ...) the Dagster UI plots across materializations, and the run's
profile (`profile`: where its time went, by phase); `run_summary` is the same run in a
few Markdown lines.

What an asset declares before any run is `asset_spec.py`; how a run is started and
driven is `invocation.py`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

import dagster as dg

from offset_assets.dagster_adapter.asset_spec import IncrementalAsset, IncrementalOutput
from offset_assets.dagster_adapter.incremental.backfill import OFFSETS_RESET_TAG_PREFIX
from offset_assets.engine.result import RunResult
from offset_assets.engine.vocabulary import OnFailedKeys, OnFailedKeysLike, RunMode


@dataclass(frozen=True)
class RunReport:
    """A finished run of `asset`'s transformation, as its outputs report it.

    `reason`: why every key was reprocessed (`backfill <id>`, `tag
    offset_assets/reset=true`, `reprocess request of <date>`), None for any other run;
    `row_counts`: `dagster/row_count` of the outputs reported with one (the result's
    counts of the outputs it materializes, unless told otherwise); `waiting`:
    per output that the run leaves as it was (an idle run, or keys processed to the same
    rows), the work of the assets downstream of it in the same run
    (`downstream_work.py`), for which it materializes all the same."""

    asset: IncrementalAsset
    result: RunResult
    reason: str | None = None
    row_counts: Mapping[dg.AssetKey, int] = field(default_factory=dict)
    waiting: Mapping[dg.AssetKey, Sequence[str]] = field(default_factory=dict)

    @classmethod
    def of(cls, asset: IncrementalAsset, result: RunResult, tag_reason: str | None,
           waiting: Mapping[dg.AssetKey, Sequence[str]] | None = None,
           counted: Sequence[dg.AssetKey] | None = None) -> RunReport:
        """The report of `result`, its reason named by the run's tags or else by the
        reprocess request the run worked on; the row counts of the outputs `counted`
        (default: those it materializes), from the result."""
        report = cls(asset, result, tag_reason or reprocess_reason(result), waiting=dict(waiting or {}))
        keys = report.materialized if counted is None else counted
        rows = result.output_rows
        return replace(report, row_counts={out.asset_key: rows[out.table_name] for out in asset.outputs
                                           if out.asset_key in keys and out.table_name in rows})

    @property
    def materialized(self) -> list[dg.AssetKey]:
        """The outputs the run materializes: each that committed a version (a row written
        or deleted); every output of an explicit request (a reprocess, a key list): the
        user asked for them; an output with work waiting downstream in the same run. A
        materialization is what wakes downstream automation and the downstream steps of
        the run."""
        explicit = self.result.mode != RunMode.incremental
        return [out.asset_key for out in self.asset.outputs
                if explicit or self.result.versions_written(out.table_name) > 0 or out.asset_key in self.waiting]

    def metadata(self, out: IncrementalOutput) -> dict[str, dg.MetadataValue]:
        tables = [o.table_name for o in self.asset.outputs]
        metadata = run_metadata(output_view(self.result, out.table_name, tables), output_tables=[out.table_name],
                                reset_reason=self.reason, row_count=self.row_counts.get(out.asset_key))
        waiting = self.waiting.get(out.asset_key)
        if waiting:
            # Said in the summary too: a materialization that changed nothing needs its reason.
            metadata["downstream_work"] = dg.MetadataValue.md("\n".join(f"- {w}" for w in waiting))
            metadata["summary"] = dg.MetadataValue.md(
                f"{metadata['summary'].value}\n\nNo row of this output changed; materialized so that Dagster "
                f"runs what waits downstream in this run: {'; '.join(waiting)}.")
        return metadata


def reprocess_reason(result: RunResult) -> str | None:
    """Why the offsets were reset before a run that its tags did not reset: `reprocess
    request of <date>` for a run that worked on a pending reprocess request
    (`offset-assets reprocess`), `rescan of <date>` for the first run after offsets were
    reset on their own (`offset-assets rescan`, `OffsetStore.reset_offset`), None for
    any other."""
    if result.mode == RunMode.reprocess and result.reprocess_requested_at is not None:
        return f"reprocess request of {iso_utc(result.reprocess_requested_at, 'seconds')}"
    if result.offsets_reset_at is not None:
        return f"rescan of {iso_utc(result.offsets_reset_at, 'seconds')}"
    return None


def run_events(context: dg.AssetExecutionContext, report: RunReport) -> Iterator[dg.MaterializeResult]:
    """The events of an asset body's finished run: a materialization per output in
    `report.materialized`, an observation on every other one (nothing to do, or every
    processed key left it as it was). Failed keys apply the asset's policy first
    (`check_failed_keys`: a `raise` fails the step before any event)."""
    asset = report.asset
    by_output = {out.asset_key: report.metadata(out) for out in asset.outputs}
    _log_run(context, report, context.instance)
    check_failed_keys(report.result, asset.spec.on_failed_keys, by_output[asset.asset_key], context.log)
    materialized = report.materialized
    for out in asset.outputs:
        if out.asset_key in materialized:
            yield dg.MaterializeResult(asset_key=out.asset_key, metadata=by_output[out.asset_key])
        else:
            if report.result.processed_keys or report.result.failed_keys:
                context.log.info(f"{out.asset_key.to_user_string()}: no output changed; "
                                 "reported as an observation, downstream assets not woken")
            context.log_event(dg.AssetObservation(asset_key=out.asset_key, metadata=by_output[out.asset_key]))


def report_output(context: dg.OutputContext, report: RunReport) -> None:
    """The IO manager's report of its asset's run: the log, the failed-keys policy and
    the asset's metadata as output metadata (Dagster materializes the output itself)."""
    asset = report.asset
    metadata = report.metadata(next(out for out in asset.outputs if out.asset_key == asset.asset_key))
    _log_run(context, report, context.step_context.instance)
    check_failed_keys(report.result, asset.spec.on_failed_keys, metadata, context.log)
    context.add_output_metadata(metadata)


def _log_run(context: dg.OutputContext | dg.AssetExecutionContext, report: RunReport,
             instance: dg.DagsterInstance) -> None:
    """The run's summary in the log; a reprocess also warns and tags the Dagster run,
    `offset_assets/offsets_reset.<transformation>` = the reason: short, so the runs list
    of a backfill shows it whole; which offsets were reset, and their old values, are in
    the materialization metadata (`offsets_reset`) and the run log."""
    result, reason = report.result, report.reason
    context.log.info(run_summary(result, reason))
    if reason is None:
        return
    context.log.warning(f"{report.asset.asset_key.to_user_string()}: {reason}: {_reprocess_text(result)}")
    run_id = context.run.run_id if isinstance(context, dg.AssetExecutionContext) else context.run_id
    instance.add_run_tags(run_id, {f"{OFFSETS_RESET_TAG_PREFIX}{report.asset.transformation_id}": reason})


def _reprocess_text(result: RunResult) -> str:
    if result.mode != RunMode.reprocess:
        return f"offsets reset ({reset_offsets_text(result)}): the inputs' whole history re-read"
    if result.offsets_reset:
        return f"offsets reset ({reset_offsets_text(result)}) and every key reprocessed"
    return "every key reprocessed (the request reset the offsets when it was made)"


def run_metadata(result: RunResult, output_tables: Sequence[str] = (),
                 reset_reason: str | None = None, row_count: int | None = None,
                 offset_lag_s: Mapping[str, float | None] | None = None,
                 ) -> dict[str, dg.MetadataValue]:
    """Materialization metadata of one engine run, every entry typed.

    Counts are on every run (zeros included), so the UI plots them across
    materializations. An entry without a value is left out, never shown as null or `{}`:
    no `offset_before.X` before an input's first offset (or after a reset), no
    `delta.X` when nothing was committed, `offsets_reset` only on a run after a reset
    that replaced offsets (its own, a backfill's, or one made between runs).
    `offset_lag_s.X` (default: the result's own, as of the run's snapshot) says how far
    input X's offset is behind its newest commit. Two clocks are
    named apart: `run_started_at`/`run_finished_at` are
    the run's wall clock; `inputs_committed_up_to` is the snapshot's commit clock (the
    keys' process_ts): the run read every input commit up to it, which on a quiet input
    is long before the run. `profile` is where the run's time went (per phase the
    driver's seconds and the Spark jobs started), `profile.spark_jobs` the run's Spark
    jobs (left out over Spark Connect, where they are not counted)."""
    metadata: dict[str, dg.MetadataValue] = {
        "mode": dg.MetadataValue.text(str(result.mode)),
        "change_detection": dg.MetadataValue.text(result.key_source),
        "commit_mode": dg.MetadataValue.text(str(result.commit_mode)),
        "changed_keys": dg.MetadataValue.int(result.changed_keys),
        "processed_keys": dg.MetadataValue.int(result.processed_keys),
        "failed_keys": dg.MetadataValue.int(result.failed_keys),
        "deletions_waiting": dg.MetadataValue.int(result.deletions_waiting),
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
    lags = result.offset_lag_s() if offset_lag_s is None else offset_lag_s
    for name, lag in sorted(lags.items()):
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
    if result.profile is not None:
        metadata["profile"] = dg.MetadataValue.md(result.profile.markdown())
        if result.spark_jobs is not None:
            metadata["profile.spark_jobs"] = dg.MetadataValue.int(result.spark_jobs)
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
    label = result.mode
    lines = [
        f"**{label}** run of `{result.transformation_id}` ({result.key_source}, "
        f"commit {result.commit_mode}): processed {result.processed_keys} of "
        f"{result.changed_keys} changed key(s) in {result.batches} batch(es), "
        f"{result.failed_keys} failed{_waiting_text(result)}, in {result.duration_s:.1f} s{_jobs_text(result)}.",
        f"Read the inputs as committed up to {iso_utc(result.process_ts)}.",
    ]
    if reset_reason is not None and result.offsets_reset:
        lines.append(f"Offsets reset by {reset_reason}: {reset_offsets_text(result)}.")
    elif reset_reason is not None:
        lines.append(f"Every key reprocessed: {reset_reason}.")
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


def _jobs_text(result: RunResult) -> str:
    return "" if result.spark_jobs is None else f" and {result.spark_jobs} Spark job(s)"


def _waiting_text(result: RunResult) -> str:
    return f" ({result.deletions_waiting} deletion(s) waiting with them)" if result.deletions_waiting else ""


def reset_offsets_text(result: RunResult) -> str:
    """The offsets a reset replaced, as `input (was date)`, for the summary and the log."""
    return ", ".join(f"{name} (was {iso_utc(ts)})"
                     for name, ts in sorted(result.offsets_reset.items())) or "none were set"


def iso_utc(epoch_seconds: float, timespec: str = "microseconds") -> str:
    """An epoch time as an ISO 8601 UTC date, with microseconds by default (offsets are
    that precise; a wall-clock moment a person reads needs `seconds`)."""
    moment = datetime.fromtimestamp(epoch_seconds, tz=UTC)
    return moment.isoformat(timespec=timespec).replace("+00:00", "Z")


def _date(value: float | None) -> str:
    return "none" if value is None else iso_utc(value)


def _offset_before_text(result: RunResult, name: str) -> str:
    if name in result.offsets_reset:
        return f"reset (was {iso_utc(result.offsets_reset[name])})"
    return _date(result.offsets_before.get(name))


def check_failed_keys(result: RunResult, policy: OnFailedKeysLike,
                      metadata: Mapping[str, dg.MetadataValue], log: Any) -> None:
    """Failed batches never pass silently: `raise` fails the step with `dg.Failure` (the
    run's metadata attached), `warn` logs a warning and lets the materialization stand.
    Either way their keys are recorded as failed in meta and retried by later runs. The
    message leads with the counts and each batch's one-line error (`RunResult.failure_text`)."""
    if result.succeeded:
        return
    message = result.failure_text()
    if policy == OnFailedKeys.RAISE:
        raise dg.Failure(description=message, metadata=dict(metadata))
    log.warning(message)
