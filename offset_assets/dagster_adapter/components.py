"""Ingestion jobs and incremental transformations as Dagster components (`defs.yaml`).

    # defs/orders/defs.yaml
    type: offset_assets.dagster_adapter.components.IngestionJobComponent
    attributes:
      name: orders
      source:
        sql_table: {url: "sqlite:///shop.db", table: orders, id_column: order_id}
      planner:
        auto_increment_id: {}
      target:
        primary_key: [order_id]
        columns: {order_id: long not null, customer_id: long, amount_cents: long}

    # defs/enriched_orders/defs.yaml (the function in defs/enriched_orders/transform.py)
    type: offset_assets.dagster_adapter.components.IncrementalAssetComponent
    attributes:
      function: .transform.enriched_orders
      transform_keys: [order_id]
      primary_key: [order_id]
      columns: {order_id: long not null, country: string, amount_cents: long}
      join_keys: {customers: {customer_id: customer_id}}

    # defs/order_sizes/defs.yaml: one transformation, two output assets
    type: offset_assets.dagster_adapter.components.IncrementalMultiAssetComponent
    attributes:
      function: .transform.order_sizes
      transform_keys: [order_id]
      outs:
        large_orders: {primary_key: [order_id], columns: {order_id: long not null, amount_cents: long}}
        small_orders: {primary_key: [order_id], columns: {order_id: long not null, amount_cents: long}}

The components are thin: each builds what the Python form builds, an `IngestionJob` and
`ingestion_asset(job)` (with its range sensor or window schedule), `incremental_asset(...)
(function)` or `incremental_multi_asset(...)(function)` (with their offset checks), so a
component and a decorated function behave alike in every run; their keys are the Python
arguments. Their attributes are pydantic models that refuse unknown keys (`dg check defs`
names a misspelt key and where it is), and what only Python can check (a column type, an
import path, a declaration the Python form refuses) is said when the component builds,
in one line naming the file and the key (`component_loading.py`). A table's columns are
`name: type` with a Spark type name (`long`, `string`, `double`, `boolean`, `date`,
`timestamp`, `decimal(10,2)`, ...) and `not null` where the column may not be null; a
schema YAML cannot spell (arrays, structs) is a `StructType` named by import path
(`struct_type: .schemas.ORDERS`). An import path starting with `.` is relative to the
component's folder in the defs module.
"""

# No `from __future__ import annotations`: Dagster resolves these models' field types at
# class creation, so they must not be strings.

from typing import Annotated, Any

import dagster as dg
from pydantic import Field

from offset_assets.dagster_adapter.component_loading import DeclaredInYaml, declared_at, import_function, parsed
from offset_assets.dagster_adapter.component_models import (
    Columns,
    ColumnsOrSchema,
    OffsetChecksModel,
    OutModel,
    PlannerModel,
    SourceModel,
    TargetModel,
    given_fields,
)
from offset_assets.dagster_adapter.incremental.assets import IncrementalOut, incremental_asset, incremental_multi_asset
from offset_assets.dagster_adapter.incremental.automation import on_input_commits
from offset_assets.dagster_adapter.incremental.checks import build_offset_checks
from offset_assets.dagster_adapter.ingestion.assets import ingestion_asset
from offset_assets.dagster_adapter.ingestion.schedule import build_ingestion_schedule
from offset_assets.dagster_adapter.ingestion.sensor import build_ingestion_sensor
from offset_assets.engine.vocabulary import ChangeDetection, CommitMode, OnFailedKeys
from offset_assets.ranges.ingestion import DEFAULT_MAX_MALFORMED_SHARE, IngestionJob, OnMalformed, TargetTable
from offset_assets.ranges.planners import TimeWindowPlanner


class IngestionJobComponent(DeclaredInYaml, dg.Component, dg.Model, dg.Resolvable):
    """An ingestion job as a partitioned asset: one data range per partition, ingested from
    `source` into the versioned table `target`, in the ranges `planner` plans. Builds what
    `ingestion_asset(IngestionJob(...))` builds, with the sensor that adds and launches id,
    Kafka and upstream ranges, or the schedule that runs each closed time window (both
    stopped until turned on), unless `sensor_or_schedule` is false. `on_malformed`,
    `quarantine_table` and `max_malformed_share` are `IngestionJob`'s: what becomes of
    records whose values do not fit."""

    name: str = Field(description="the job's name: its asset key and its job_log job name")
    source: Annotated[SourceModel, parsed(SourceModel, "source")]
    planner: Annotated[PlannerModel, parsed(PlannerModel, "planner")]
    target: Annotated[TargetModel, parsed(TargetModel, "target")]
    transform: str | None = Field(
        default=None,
        description="import path of a function shaping the source's rows (a DataFrame) into the target's columns",
    )
    on_malformed: OnMalformed = Field(
        default=OnMalformed.FAIL,
        description="a record whose values do not fit: fail the range, or quarantine the record",
    )
    quarantine_table: str | None = Field(default=None, description="default <target>__quarantine")
    max_malformed_share: float | None = Field(
        default=DEFAULT_MAX_MALFORMED_SHARE,
        description="a quarantining range fails when more than this share of "
        "its records (ten or more) do not fit; null: never",
    )
    workflow_name: str | None = None
    group_name: str | None = None
    description: str | None = None
    sensor_or_schedule: bool = True

    def build_defs(self, context: dg.ComponentLoadContext) -> dg.Definitions:
        source = self.source.build(context, ["source"])
        with declared_at(context, ["planner"]):
            planner = self.planner.build(context, ["planner"])
        schema = self.target.build_schema(context, ["target"])
        transform = None if self.transform is None else import_function(context, self.transform, ["transform"])
        with declared_at(context):
            job = IngestionJob(
                name=self.name,
                source=source,
                planner=planner,
                target=TargetTable(self.target.table or self.name, list(self.target.primary_key), schema),
                workflow_name=self.workflow_name,
                transform=transform,
                on_malformed=self.on_malformed,
                quarantine_table=self.quarantine_table,
                max_malformed_share=self.max_malformed_share,
            )
            asset = ingestion_asset(job, **given_fields(self, include={"group_name", "description"}))
        launchers: dict[str, list[Any]] = {"sensors": [], "schedules": []}
        if self.sensor_or_schedule and isinstance(job.planner, TimeWindowPlanner):
            launchers["schedules"].append(build_ingestion_schedule(asset))
        elif self.sensor_or_schedule:
            launchers["sensors"].append(build_ingestion_sensor(job, asset))
        return dg.Definitions(assets=[asset], **launchers)


class _TransformationFields(dg.Model):
    """What `incremental_asset` and `incremental_multi_asset` share: the function, its
    inputs and keys, the engine's options, automation and offset checks."""

    function: str = Field(description="import path of the transformation function, e.g. .transform.enrich")
    transform_keys: list[str]
    ins: dict[str, str] | None = Field(default=None, description="parameter -> upstream asset key, where they differ")
    join_keys: dict[str, dict[str, str]] | None = Field(
        default=None, description="reference input parameter -> {primary_col: reference_col}"
    )
    deps: list[str] | None = None
    batch_size: int | None = None
    commit_mode: CommitMode = CommitMode.end
    change_detection: ChangeDetection = ChangeDetection.v2
    on_failed_keys: OnFailedKeys = OnFailedKeys.RAISE
    on_input_commits: bool = False
    checks: Annotated[OffsetChecksModel | None, parsed(OffsetChecksModel, "checks")] = OffsetChecksModel()
    group_name: str | None = None
    description: str | None = None

    def _declared(self, context: dg.ComponentLoadContext, decorator: Any, **options: Any) -> dg.Definitions:
        """`decorator(...)(function)` with these fields and `options`, and its offset checks."""
        function = import_function(context, self.function, ["function"])
        with declared_at(context):
            asset = decorator(
                transform_keys=self.transform_keys,
                ins=self.ins,
                join_keys=self.join_keys,
                deps=self.deps or (),
                automation_condition=on_input_commits() if self.on_input_commits else None,
                **given_fields(
                    self,
                    include={
                        "batch_size",
                        "commit_mode",
                        "change_detection",
                        "on_failed_keys",
                        "group_name",
                        "description",
                    },
                ),
                **options,
            )(function)
        checks = [] if self.checks is None else build_offset_checks(asset, **given_fields(self.checks))
        return dg.Definitions(assets=[asset], asset_checks=checks)


class IncrementalAssetComponent(DeclaredInYaml, dg.Component, _TransformationFields, dg.Resolvable):
    """An incremental transformation as an asset: `function` (a function of Spark
    DataFrames, one parameter per input, by import path) computed over the changed keys
    only. Builds what `incremental_asset(...)(function)` builds, with its offset checks
    (`checks: null` for none); `on_input_commits: true` sets the automation condition that
    runs it once an input has materialized."""

    name: str | None = Field(default=None, description="the asset's name (default: the function's)")
    primary_key: list[str]
    columns: Columns | None = Field(default=None, description="the output's columns: name: Spark type [not null]")
    struct_type: str | None = Field(default=None, description="import path of the output's StructType")

    def build_defs(self, context: dg.ComponentLoadContext) -> dg.Definitions:
        schema = ColumnsOrSchema(columns=self.columns, struct_type=self.struct_type).build_schema(context, [])
        return self._declared(
            context,
            incremental_asset,
            primary_key=self.primary_key,
            schema=schema,
            **given_fields(self, include={"name"}),
        )


class IncrementalMultiAssetComponent(DeclaredInYaml, dg.Component, _TransformationFields, dg.Resolvable):
    """One incremental transformation with several output assets: `function` returns a
    DataFrame per output name, and every output's delta commits with the others in one
    transaction. Builds what `incremental_multi_asset(outs=..., ...)(function)` builds, with
    the offset checks of each output."""

    name: str | None = Field(default=None, description="the transformation's id (default: the function's name)")
    outs: Annotated[dict[str, OutModel], parsed(dict[str, OutModel], "outs")]

    def build_defs(self, context: dg.ComponentLoadContext) -> dg.Definitions:
        outs = {
            name: IncrementalOut(
                primary_key=out.primary_key,
                schema=out.build_schema(context, ["outs", name]),
                key=dg.AssetKey.from_user_string(out.key) if out.key else None,
                description=out.description,
                metadata=out.metadata,
            )
            for name, out in self.outs.items()
        }
        return self._declared(context, incremental_multi_asset, outs=outs, **given_fields(self, include={"name"}))
