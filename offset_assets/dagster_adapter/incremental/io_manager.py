"""`OffsetIOManager`: Dagster inputs and outputs as versioned tables, read incrementally.

What it does depends on the asset it serves, told by the asset's definition metadata
(`asset_spec.IncrementalSpec`, set by `incremental_metadata(...)` or `incremental_asset`):

- **loading an input of an incremental asset**: the first input loaded asks the engine
  resource for the step's invocation (`invocation.StepInvocation`), which decides the
  run and opens it (lease, snapshot, changed index over *all* the asset's inputs; a run
  tagged `dagster/backfill` or `offset_assets/reset` reprocesses every key); every
  input then gets its offset-filtered frame from it: the actual rows of the changed
  keys, reference inputs only for the join values present (filtered join).
- **handling the output of an incremental asset**: the frame goes to that invocation,
  which commits it (the processed keys' output replaced; outputs, meta and offsets in
  one control-plane transaction) and reports the run as `incremental_asset`'s are
  (`run_report.py`). The IO manager itself only keeps which invocation an output goes to.
- **loading a versioned table into anything else** (a report, a plain asset, an op):
  its actual state, `VersionedTable.read_actual()`.
- **handling the output of a plain asset**: the frame is written as one delta of the
  asset's table (upserts; rows with `sys_op = 1` delete), the table being declared by
  `table_metadata(...)` or already registered.

A failure in the asset body commits nothing: `handle_output` is never reached, and the
IO manager's teardown closes the open invocation, releasing its lease (and dropping its cached
frames). The next run redoes the work.

In this path the asset body is the transformation function, called once, so every
change is one batch committed at the end. Per-batch commit, batch sizes, failed-batch
recording and changelist runs need the engine to call the function itself: that is
what `incremental_asset` does (see `assets.py`), on top of the same IO manager.
"""

# No `from __future__ import annotations`: Dagster builds the resource's config schema
# from its field annotations, which must be real types, not strings.

import json
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
from offset_assets.dagster_adapter.engine_resource import IncrementalEngineResource
from offset_assets.dagster_adapter.incremental.invocation import StepInvocation


class OffsetIOManager(dg.ConfigurableIOManager):
    """Reads and writes versioned tables through `engine` (Parquet under its warehouse,
    catalogued in its control plane); inputs of incremental assets are read
    incrementally, from each input only what changed since the committed offsets."""

    engine: IncrementalEngineResource = Field(
        description="Where tables live and how the engine runs (control plane, Spark, warehouse).",
    )

    # The invocation each incremental asset's step opened at its first input, until its
    # output is handed over: Dagster calls the IO manager per input and output, not per step.
    _open: dict[tuple[str, dg.AssetKey], StepInvocation] = PrivateAttr(default_factory=dict)

    # -- IOManager ------------------------------------------------------------------------

    def load_input(self, context: dg.InputContext) -> DataFrame:
        upstream = context.asset_key
        consumer = _consumer(context)
        consumed = consumer.input_for_key(upstream) if consumer is not None else None
        if consumed is None:
            return self.engine.table(upstream).read_actual()
        key = (context.step_context.run_id, consumer.asset_key)
        if key not in self._open:
            opener = self.engine.transformation_opener(consumer, context.step_context.run_id)
            self._open[key] = StepInvocation(consumer, opener, context.step_context.run_tags)
        return self._open[key].frames[consumed.table_name]

    def handle_output(self, context: dg.OutputContext, obj: Any) -> None:
        asset = resolve_incremental(_assets_def(context), context.asset_key)
        if asset is None:
            if obj is not None:
                self._write_plain(context, obj)
            return
        invocation = self._open.pop((context.step_context.run_id, asset.asset_key), None)
        if invocation is None:
            raise dg.DagsterInvariantViolationError(
                f"incremental asset {asset.asset_key.to_user_string()} loaded none of its "
                "inputs through the OffsetIOManager, so there is no run to commit; give its "
                "inputs this IO manager or declare it with @incremental_asset"
            )
        invocation.finish(context, obj)

    def teardown_after_execution(self, context: dg.InitResourceContext) -> None:
        # Steps whose asset body failed never handed their output over: release their leases.
        while self._open:
            (_, asset_key), invocation = self._open.popitem()
            if context.log is not None:
                context.log.warning(
                    f"{asset_key.to_user_string()}: the asset did not complete; its run "
                    f"{invocation.run.run_id} committed nothing and released its lease"
                )
            invocation.close()

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
