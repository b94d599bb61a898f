"""`IncrementalInvocation`: one materialization of an incremental asset, from the state
read to the events, driven by the asset body.

    def body(context, config, incremental_engine):
        asset = resolve_incremental(context.assets_def)
        invocation = IncrementalInvocation.start(context, incremental_engine, asset, func,
                                                 config.changelist, config.change_detection)
        yield from invocation.stream()

`start` reads what the Dagster run asks (its tags, its run config) and decides the
engine's `RunRequest` once: a `reprocess` (a backfill or the reset tag: every key
again), a `changelist` (given keys), or an `incremental` run, which first asks the
control plane whether there is anything to do (when not: its `idle` result, and no
Spark session started). An idle invocation also
asks whether an incremental asset downstream of it in the same run has work of its own
(`downstream_work.py`): then it materializes, so Dagster does not skip that asset. `stream` runs the engine
on that request (it reads the transformation's state once, at the start of its run) and
turns the engine's result into events through the one event iterator of
`run_report.py`. What is reported comes from the result; the only thing read again is
`dagster/row_count` of the materialized outputs, from the delta catalog
(`output_row_counts`, shared with the IO manager's path).
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import dagster as dg

from offset_assets.control_plane.delta_catalog import DeltaCatalog
from offset_assets.dagster_adapter.asset_spec import IncrementalAsset, table_name_for
from offset_assets.dagster_adapter.backfill import tag_reset_reason
from offset_assets.dagster_adapter.definition_checks import run_start_problems
from offset_assets.dagster_adapter.downstream_work import downstream_work
from offset_assets.dagster_adapter.engine_resource import IncrementalEngineResource
from offset_assets.dagster_adapter.run_report import RunReport, run_events
from offset_assets.engine.pending import idle_result
from offset_assets.engine.result import RunResult
from offset_assets.engine.transformation import TransformFunction
from offset_assets.engine.vocabulary import ChangeDetection, ChangeDetectionLike, RunRequest


@dataclass
class IncrementalInvocation:
    """One materialization of `asset`: the run it asks for (`request`, decided at
    `start`; `reason`: why a reprocess, named by the run's tags), or the result of the
    run it needs not start (`idle`), and `stream`, which runs the engine and yields the
    asset's events."""

    context: dg.AssetExecutionContext
    resource: IncrementalEngineResource
    asset: IncrementalAsset
    func: TransformFunction
    request: RunRequest
    reason: str | None = None
    idle: RunResult | None = None
    waiting: Mapping[dg.AssetKey, Sequence[str]] = field(default_factory=dict)

    @classmethod
    def start(cls, context: dg.AssetExecutionContext, resource: IncrementalEngineResource,
              asset: IncrementalAsset, func: TransformFunction, changelist: Sequence[dict[str, Any]] | None,
              change_detection: ChangeDetectionLike | None) -> IncrementalInvocation:
        """Decide the request from the run's tags and config. Mistakes in what the asset
        says of its inputs fail the step first (`definition_checks.run_start_problems`).
        A regular v2 run asks the control plane first: with nothing to do it starts no
        Spark session (v1 compares the data itself and always runs)."""
        problems = run_start_problems(context, DeltaCatalog(resource.control_plane()), asset)
        if problems:
            raise dg.Failure(description="\n".join(problems))
        reason = tag_reset_reason(context.run.tags)
        if changelist is not None and reason is not None:
            raise dg.Failure(
                f"{asset.asset_key.to_user_string()}: a run cannot both reset the offsets "
                f"({reason}) and process an explicit key list"
            )
        detection = ChangeDetection(change_detection or asset.spec.change_detection)
        if reason is not None:
            return cls(context, resource, asset, func, RunRequest.reprocess(detection), reason)
        if changelist is not None:
            return cls(context, resource, asset, func, RunRequest.changelist(changelist))
        invocation = cls(context, resource, asset, func, RunRequest.incremental(detection))
        if detection == ChangeDetection.v2:
            idle = idle_result(resource.control_plane(), asset.transformation_id, asset.input_tables,
                               asset.output_tables, context.run.run_id, asset.spec.commit_mode)
            if idle is not None:
                return replace(invocation, idle=idle, waiting=downstream_work(context, resource, asset))
        return invocation

    def stream(self) -> Iterator[dg.MaterializeResult]:
        """Run the engine in the invocation's mode and yield the asset's events: a
        materialization per output that committed a version (every output of an
        explicit request: a reset, a key list, a reprocess request the run worked on;
        an idle output whose downstream assets in the run have work), an observation for
        every other output."""
        result = self._run()
        report = RunReport.of(self.asset, result, self.reason, self.waiting)
        if self.idle is None:
            report = replace(report, row_counts=output_row_counts(self.resource, self.asset, report.materialized))
        elif report.materialized:
            report = replace(report, row_counts=catalog_row_counts(self.resource, report.materialized))
        yield from run_events(self.context, report)

    def _run(self) -> RunResult:
        tid, run_id = self.asset.transformation_id, self.context.run.run_id
        if self.idle is not None:
            self.context.log.info(f"{tid}: nothing to do (no input commit beyond the offsets); "
                                  "no Spark session started")
            for key, waiting in self.waiting.items():
                self.context.log.info(f"{key.to_user_string()} is materialized all the same, so that "
                                      f"Dagster runs what waits downstream in this run: {'; '.join(waiting)}")
            return self.idle
        transformation = self.resource.transformation(self.asset, self.func)
        return self.resource.engine().run(transformation, self.request, run_id=run_id)


def output_row_counts(resource: IncrementalEngineResource, asset: IncrementalAsset,
                      materialized: Collection[dg.AssetKey]) -> dict[dg.AssetKey, int]:
    """`dagster/row_count` of each materialized output: its actual rows as the catalog
    counted them at the commit (`IncrementalEngineResource.row_counts`), in one place for
    both paths; an output the run left as it was keeps its count."""
    return resource.row_counts([out.asset_key for out in asset.outputs if out.asset_key in materialized])


def catalog_row_counts(resource: IncrementalEngineResource,
                       materialized: Collection[dg.AssetKey]) -> dict[dg.AssetKey, int]:
    """`dagster/row_count` of outputs an idle step materializes: the catalog's counts
    only (a count the catalog lacks is left out: an idle step starts no Spark)."""
    counts = DeltaCatalog(resource.control_plane()).actual_rows([table_name_for(key) for key in materialized])
    return {key: counts[table_name_for(key)] for key in materialized if counts[table_name_for(key)] is not None}
