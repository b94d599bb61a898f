"""`OffsetIOManager`: Dagster inputs and outputs as versioned tables, read incrementally.

What it does depends on the asset it serves, told by the asset's definition metadata
(`asset_spec.IncrementalSpec`, set by `incremental_metadata(...)` or `incremental_asset`):

- **loading an input of an incremental asset**: the first input loaded opens an engine
  run of the asset's transformation (lease, snapshot, changed index over *all* its
  inputs); every input then gets its offset-filtered frame: the actual rows of the
  changed keys, reference inputs only for the join values present (filtered join).
  A run tagged `dagster/backfill` or `offset_assets/reset` resets the offsets first.
- **handling the output of an incremental asset**: the frame replaces the output of
  the processed keys; outputs, meta and offsets commit in one control-plane
  transaction; the run's numbers become the materialization metadata through the same
  reporting as `incremental_asset`'s (`run_report.py`; the row count of
  `invocation.output_row_counts`).
- **loading a versioned table into anything else** (a report, a plain asset, an op):
  its actual state, `VersionedTable.read_actual()`.
- **handling the output of a plain asset**: the frame is written as one delta of the
  asset's table (upserts; rows with `sys_op = 1` delete), the table being declared by
  `table_metadata(...)` or already registered.

A failure in the asset body commits nothing: `handle_output` is never reached, and the
resource teardown closes the open run, releasing its lease (and dropping its cached
frames). The next run redoes the work.

In this path the asset body is the transformation function, called once, so every
change is one batch committed at the end. Per-batch commit, batch sizes, failed-batch
recording and changelist runs need the engine to call the function itself: that is
what `incremental_asset` does (see `assets.py`), on top of the same IO manager.
"""

# No `from __future__ import annotations`: Dagster builds the resource's config schema
# from its field annotations, which must be real types, not strings.

import json
from dataclasses import dataclass, replace
from typing import Any

import dagster as dg
from pydantic import Field, PrivateAttr
from pyspark.sql import DataFrame
from pyspark.sql.types import StructType

from offset_assets.dagster_adapter.asset_spec import (
    IncrementalAsset,
    TableSpecMetadata,
    resolve_incremental,
    table_name_for,
)
from offset_assets.dagster_adapter.backfill import tag_reset_reason
from offset_assets.dagster_adapter.engine_resource import IncrementalEngineResource
from offset_assets.dagster_adapter.invocation import output_row_counts
from offset_assets.dagster_adapter.run_report import RunReport, report_output
from offset_assets.engine.run import TransformationRun
from offset_assets.engine.transformation import TransformFunction
from offset_assets.engine.vocabulary import CommitMode, RunRequest


@dataclass
class _OpenRun:
    """An engine run opened by `load_input`, waiting for its asset's `handle_output`."""

    asset: IncrementalAsset
    run: TransformationRun
    frames: dict[str, DataFrame]
    reset_reason: str | None

    def close(self) -> None:
        self.run.__exit__(None, None, None)


class OffsetIOManager(dg.ConfigurableIOManager):
    """Reads and writes versioned tables through `engine` (Parquet under its warehouse,
    catalogued in its control plane); inputs of incremental assets are read
    incrementally, from each input only what changed since the committed offsets."""

    engine: IncrementalEngineResource = Field(
        description="Where tables live and how the engine runs (control plane, Spark, warehouse).",
    )

    _open_runs: dict[tuple[str, dg.AssetKey], _OpenRun] = PrivateAttr(default_factory=dict)

    # -- IOManager ------------------------------------------------------------------------

    def load_input(self, context: dg.InputContext) -> DataFrame:
        upstream = context.asset_key
        consumer = _consumer(context)
        consumed = consumer.input_for_key(upstream) if consumer is not None else None
        if consumed is None:
            return self.engine.table(upstream).read_actual()
        return self._open_run(context, consumer).frames[consumed.table_name]

    def handle_output(self, context: dg.OutputContext, obj: Any) -> None:
        asset = resolve_incremental(_assets_def(context), context.asset_key)
        if asset is not None:
            self._commit_run(context, asset, obj)
        elif obj is not None:
            self._write_plain(context, obj)

    def teardown_after_execution(self, context: dg.InitResourceContext) -> None:
        # Runs whose asset body failed never reached handle_output: release their leases.
        while self._open_runs:
            (_, asset_key), open_run = self._open_runs.popitem()
            if context.log is not None:
                context.log.warning(
                    f"{asset_key.to_user_string()}: the asset did not complete; its run "
                    f"{open_run.run.run_id} committed nothing and released its lease"
                )
            open_run.close()

    # -- incremental assets ----------------------------------------------------------------

    def _open_run(self, context: dg.InputContext, asset: IncrementalAsset) -> _OpenRun:
        key = (context.step_context.run_id, asset.asset_key)
        if key in self._open_runs:
            return self._open_runs[key]
        if asset.spec.batch_size is not None or asset.spec.commit_mode != CommitMode.end:
            raise dg.DagsterInvalidDefinitionError(
                f"asset {asset.asset_key.to_user_string()}: batch_size / commit_mode='batch' "
                "need the engine to call the function per batch: declare it with "
                "@incremental_asset"
            )
        reset = tag_reset_reason(context.step_context.run_tags)
        transformation = self.engine.transformation(asset, _body_is_the_function(asset))
        request = RunRequest.reprocess() if reset is not None else RunRequest.incremental()
        run = self.engine.engine().open_run(transformation, request, run_id=context.step_context.run_id)
        run.__enter__()
        try:
            frames = run.input_frames(0) if run.batches else {
                inp.name: self.engine.spark_session.createDataFrame([], inp.table.schema)
                for inp in transformation.inputs
            }
        except BaseException:
            run.__exit__(None, None, None)
            raise
        self._open_runs[key] = _OpenRun(asset, run, frames, reset)
        return self._open_runs[key]

    def _commit_run(self, context: dg.OutputContext, asset: IncrementalAsset, obj: Any) -> None:
        open_run = self._open_runs.pop((context.step_context.run_id, asset.asset_key), None)
        if open_run is None:
            raise dg.DagsterInvariantViolationError(
                f"incremental asset {asset.asset_key.to_user_string()} loaded none of its "
                "inputs through the OffsetIOManager, so there is no run to commit; give its "
                "inputs this IO manager or declare it with @incremental_asset"
            )
        try:
            run = open_run.run
            if run.batches:
                if not isinstance(obj, DataFrame):
                    raise TypeError(
                        f"incremental asset {asset.asset_key.to_user_string()} must return a "
                        f"Spark DataFrame, got {type(obj).__name__}"
                    )
                run.apply_outputs(0, obj)
            result = run.finish()
        finally:
            open_run.close()
        report = RunReport.of(asset, result, open_run.reset_reason)
        report = replace(report, row_counts=output_row_counts(self.engine, asset, [asset.asset_key]))
        report_output(context, report)

    # -- plain assets --------------------------------------------------------------------------

    def _write_plain(self, context: dg.OutputContext, obj: Any) -> None:
        if not isinstance(obj, DataFrame):
            raise TypeError(
                f"asset {context.asset_key.to_user_string()}: the OffsetIOManager stores Spark "
                f"DataFrames, got {type(obj).__name__}"
            )
        declared = TableSpecMetadata.from_metadata(context.definition_metadata)
        if declared is None:
            table = self.engine.table(context.asset_key)
        else:
            table = self.engine.versioned_table(
                table_name_for(context.asset_key), list(declared.primary_key),
                StructType.fromJson(json.loads(declared.schema_json)),
            )
        run_id = context.step_context.run_id
        info = table.write_delta(obj, holder=f"dagster:{run_id}", run_id=run_id)
        context.add_output_metadata({
            "table": dg.MetadataValue.text(table.name),
            "delta": dg.MetadataValue.int(info.delta_num),
            "rows_upserted": dg.MetadataValue.int(info.rows_upserted or 0),
            "rows_deleted": dg.MetadataValue.int(info.rows_deleted or 0),
            "commit_ts": dg.MetadataValue.timestamp(info.commit_ts),
        })


def _consumer(context: dg.InputContext) -> IncrementalAsset | None:
    """The incremental asset loading this input, or None (not an asset, not incremental)."""
    assets_def = _assets_def(context)
    if assets_def is None or len(assets_def.keys) != 1:
        return None
    return resolve_incremental(assets_def)


def _assets_def(context: dg.InputContext | dg.OutputContext) -> dg.AssetsDefinition | None:
    try:
        return context.step_context.assets_def
    except dg.DagsterInvariantViolationError:  # a context built outside a run
        return None


def _body_is_the_function(asset: IncrementalAsset) -> TransformFunction:
    def refuse(**_: DataFrame) -> DataFrame:
        raise dg.DagsterInvariantViolationError(
            f"asset {asset.asset_key.to_user_string()}: through the OffsetIOManager the asset "
            "body is the transformation; the engine never calls a function of its own"
        )

    return refuse
