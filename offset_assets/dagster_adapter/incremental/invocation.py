"""Invocations of an incremental asset: one materialization each, from the run it asks
for to its events, built on what the engine resource runs a transformation with:

    def body(context, config, incremental_engine):
        asset = resolve_incremental(context.assets_def)
        runner = incremental_engine.transformation_runner(asset, func, context.run.run_id)
        invocation = IncrementalInvocation.start(context, asset, incremental_engine.control_plane(), runner,
                                                 config.changelist, config.change_detection)
        yield from invocation.stream()

`IncrementalInvocation` serves `incremental_asset`'s body; `StepInvocation` a plain
`@dg.asset` whose body is the transformation, driven by the `OffsetIOManager` (opened
when it loads the first input, finished when it hands the output over).

`run_request` reads what the Dagster run asks (its tags, its run config) and decides the
engine's `RunRequest` once, for both: a `reprocess` (a backfill or the reset tag: every
key again), a `changelist` (given keys), or an `incremental` run, which first asks the
control plane whether there is anything to do (when not: its `idle` result, and no Spark
session started). An idle invocation, or a run that committed no version of an output,
also asks whether an incremental asset downstream of it in the same run has work of its
own (`downstream_work.py`): then it materializes, so Dagster does not skip that asset.
`stream` runs the engine on that request (it reads the transformation's state once, at
the start of its run) and turns the engine's result into events through the one event
iterator of `run_report.py`. Everything reported comes from the result, the outputs' row
counts included: nothing is read after the run (but the downstream question above).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from typing import Any

import dagster as dg
from pyspark.sql import DataFrame

from offset_assets.control_plane.database import ControlPlane
from offset_assets.control_plane.delta_catalog import DeltaCatalog
from offset_assets.dagster_adapter.asset_spec import IncrementalAsset
from offset_assets.dagster_adapter.incremental.backfill import tag_reset_reason
from offset_assets.dagster_adapter.incremental.definition_checks import run_start_problems
from offset_assets.dagster_adapter.incremental.downstream_work import downstream_work
from offset_assets.dagster_adapter.incremental.run_report import RunReport, report_output, run_events
from offset_assets.engine.pending import pending_work
from offset_assets.engine.result import RunResult
from offset_assets.engine.run import TransformationRun
from offset_assets.engine.transformation import TransformFunction
from offset_assets.engine.vocabulary import ChangeDetection, ChangeDetectionLike, CommitMode, RunMode, RunRequest


def run_request(asset: IncrementalAsset, tags: Mapping[str, str], changelist: Sequence[dict[str, Any]] | None = None,
                change_detection: ChangeDetectionLike | None = None) -> tuple[RunRequest, str | None]:
    """The run a step of `asset` asks for, from its run's tags and its run config, and why
    it reprocesses (the tags' reason; None when it does not)."""
    reason = tag_reset_reason(tags)
    if changelist is not None and reason is not None:
        raise dg.Failure(
            f"{asset.asset_key.to_user_string()}: a run cannot both reset the offsets "
            f"({reason}) and process an explicit key list"
        )
    detection = ChangeDetection(change_detection or asset.spec.change_detection)
    if reason is not None:
        return RunRequest.reprocess(detection), reason
    if changelist is not None:
        return RunRequest.changelist(changelist), None
    return RunRequest.incremental(detection), None


@dataclass
class IncrementalInvocation:
    """One materialization of `asset` by its body: the run it asks for (`request`, decided
    at `start`; `reason`: why a reprocess), or the result of the run it needs not start
    (`idle`), and `stream`, which runs the engine (`run`, given by the resource) and
    yields the asset's events."""

    context: dg.AssetExecutionContext
    asset: IncrementalAsset
    plane: ControlPlane
    run: Callable[[RunRequest], RunResult]
    request: RunRequest
    reason: str | None = None
    idle: RunResult | None = None
    waiting: Mapping[dg.AssetKey, Sequence[str]] = field(default_factory=dict)

    @classmethod
    def start(cls, context: dg.AssetExecutionContext, asset: IncrementalAsset, plane: ControlPlane,
              run: Callable[[RunRequest], RunResult], changelist: Sequence[dict[str, Any]] | None,
              change_detection: ChangeDetectionLike | None) -> IncrementalInvocation:
        """Decide the request (`run_request`). Mistakes in what the asset says of its
        inputs fail the step first (`definition_checks.run_start_problems`). A regular v2
        run asks the control plane first: with nothing to do it starts no Spark session
        (v1 compares the data itself and always runs)."""
        problems = run_start_problems(context, DeltaCatalog(plane), asset)
        if problems:
            raise dg.Failure(description="\n".join(problems))
        request, reason = run_request(asset, context.run.tags, changelist, change_detection)
        invocation = cls(context, asset, plane, run, request, reason)
        if request.mode != RunMode.incremental or request.change_detection != ChangeDetection.v2:
            return invocation
        work = pending_work(plane, asset.transformation_id, asset.input_tables, asset.output_tables)
        if not work.is_idle:
            return invocation
        idle = work.idle_result(plane, context.run.run_id, asset.spec.commit_mode)
        waiting = downstream_work(context, plane, asset)
        if waiting:
            # An idle step starts no Spark: the row counts are the catalog's, where it knows them.
            counts = DeltaCatalog(plane).actual_rows(asset.output_tables)
            idle.output_rows = {name: rows for name, rows in counts.items() if rows is not None}
        return replace(invocation, idle=idle, waiting=waiting)

    def stream(self) -> Iterator[dg.MaterializeResult]:
        """Run the engine on the request and yield the asset's events: a materialization
        per output that committed a version (every output of an explicit request: a
        reprocess, a key list, a reprocess request the run worked on; an idle output whose
        downstream assets in the run have work), an observation for every other output."""
        result = self._run()
        waiting = self.waiting if self.idle is not None else self._waiting_downstream(result)
        yield from run_events(self.context, RunReport.of(self.asset, result, self.reason, waiting))

    def _waiting_downstream(self, result: RunResult) -> Mapping[dg.AssetKey, Sequence[str]]:
        """The work downstream of each output the run committed no version of (its keys
        processed, the output as it was), as an idle run asks it: Dagster would skip the
        steps downstream of such an output, also an asset that reads another output of
        the run which did change (a fan-in)."""
        unchanged = [out.asset_key for out in self.asset.outputs if not result.versions_written(out.table_name)]
        if result.mode != RunMode.incremental or not unchanged:
            return {}
        waiting = downstream_work(self.context, self.plane, self.asset)
        return {key: work for key, work in waiting.items() if key in unchanged}

    def _run(self) -> RunResult:
        if self.idle is None:
            return self.run(self.request)
        self.context.log.info(f"{self.asset.transformation_id}: nothing to do (no input commit beyond "
                              "the offsets); no Spark session started")
        for key, waiting in self.waiting.items():
            self.context.log.info(f"{key.to_user_string()} is materialized all the same, so that "
                                  f"Dagster runs what waits downstream in this run: {'; '.join(waiting)}")
        return self.idle


class StepInvocation:
    """One materialization of an incremental asset whose body is the transformation,
    called once: a single batch committed at the end. The `OffsetIOManager` opens it when
    it loads the asset's first input (the run's lease, snapshot and changed index: every
    input's frame is then the actual rows of the changed keys) and hands it the output
    (`finish`: commit, report). `close` ends a run that never got its output (a failed
    body), committing nothing."""

    def __init__(self, asset: IncrementalAsset, open_run: Callable[[RunRequest, TransformFunction], TransformationRun],
                 tags: Mapping[str, str]) -> None:
        if asset.spec.batch_size is not None or asset.spec.commit_mode != CommitMode.end:
            raise dg.DagsterInvalidDefinitionError(
                f"asset {asset.asset_key.to_user_string()}: batch_size / commit_mode='batch' "
                "need the engine to call the function per batch: declare it with "
                "@incremental_asset"
            )
        self.asset = asset
        request, self.reason = run_request(asset, tags)
        self._stack = ExitStack()
        self.run = self._stack.enter_context(open_run(request, _body_is_the_function(asset)))
        try:
            self.frames = self.run.input_frames(0) if self.run.batches else {
                inp.name: self.run.spark.createDataFrame([], inp.table.schema) for inp in self.run.t.inputs
            }
        except BaseException:
            self.close()
            raise

    def finish(self, context: dg.OutputContext, obj: Any) -> None:
        """Commit `obj` as the asset's output (outputs, meta and offsets in one
        control-plane transaction) and report the run as the output's metadata."""
        try:
            if self.run.batches:
                if not isinstance(obj, DataFrame):
                    raise TypeError(
                        f"incremental asset {self.asset.asset_key.to_user_string()} must return a "
                        f"Spark DataFrame, got {type(obj).__name__}"
                    )
                self.run.apply_outputs(0, obj)
            result = self.run.finish()
        finally:
            self.close()
        report_output(context, RunReport.of(self.asset, result, self.reason, counted=[self.asset.asset_key]))

    def close(self) -> None:
        self._stack.close()


def _body_is_the_function(asset: IncrementalAsset) -> TransformFunction:
    def refuse(**_: DataFrame) -> DataFrame:
        raise dg.DagsterInvariantViolationError(
            f"asset {asset.asset_key.to_user_string()}: through the OffsetIOManager the asset "
            "body is the transformation; the engine never calls a function of its own"
        )

    return refuse
