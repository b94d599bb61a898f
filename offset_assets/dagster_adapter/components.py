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

The components are thin: each builds what the Python form builds, an `IngestionJob` and
`ingestion_asset(job)` (with its range sensor or window schedule), or
`incremental_asset(...)(function)` (with its offset checks), so a component and a
decorated function behave alike in every run. Their attributes are pydantic models that
refuse unknown keys, so `dg check defs` names a misspelt key and where it is. A table's
columns are `name: type` with a Spark type name (`long`, `string`, `double`, `boolean`,
`date`, `timestamp`, `decimal(10,2)`, ...) and `not null` where the column may not be
null, checked when the definitions load without Spark; a schema YAML cannot spell (arrays,
structs) is a `StructType` named by import path (`struct_type: .schemas.ORDERS`). An import
path starting with `.` is relative to the component's folder in the defs module.
"""

# No `from __future__ import annotations`: Dagster resolves these models' field types at
# class creation, so they must not be strings.

from typing import Annotated, Any, Literal

import dagster as dg
from pydantic import Field

from offset_assets.dagster_adapter.assets import incremental_asset
from offset_assets.dagster_adapter.automation import on_input_commits
from offset_assets.dagster_adapter.checks import DEFAULT_ERROR_AFTER_S, DEFAULT_WARN_AFTER_S, build_offset_checks
from offset_assets.dagster_adapter.component_models import (
    ColumnsOrSchema,
    PlannerModel,
    SourceModel,
    TargetModel,
    given_fields,
    import_function,
    parsed,
)
from offset_assets.dagster_adapter.ingestion_assets import ingestion_asset
from offset_assets.dagster_adapter.ingestion_schedule import build_ingestion_schedule
from offset_assets.dagster_adapter.ingestion_sensor import build_ingestion_sensor
from offset_assets.engine.vocabulary import ChangeDetection, CommitMode
from offset_assets.ranges.ingestion import IngestionJob, TargetTable
from offset_assets.ranges.planners import TimeWindowPlanner

Columns = dict[str, str]


# -- components ------------------------------------------------------------------------------


class IngestionJobComponent(dg.Component, dg.Model, dg.Resolvable):
    """An ingestion job as a partitioned asset: one data range per partition, ingested from
    `source` into the versioned table `target`, in the ranges `planner` plans. Builds what
    `ingestion_asset(IngestionJob(...))` builds, with the sensor that adds and launches id,
    Kafka and upstream ranges, or the schedule that runs each closed time window (both
    stopped until turned on), unless `sensor_or_schedule` is false."""

    name: str = Field(description="the job's name: its asset key and its job_log job name")
    source: Annotated[SourceModel, parsed(SourceModel, "source")]
    planner: Annotated[PlannerModel, parsed(PlannerModel, "planner")]
    target: Annotated[TargetModel, parsed(TargetModel, "target")]
    transform: str | None = Field(default=None, description="import path of a function shaping the "
                                  "source's rows (a DataFrame) into the target's columns")
    workflow_name: str | None = None
    group_name: str | None = None
    description: str | None = None
    sensor_or_schedule: bool = True

    def build_defs(self, context: dg.ComponentLoadContext) -> dg.Definitions:
        job = IngestionJob(
            name=self.name,
            source=self.source.build(context),
            planner=self.planner.build(),
            target=TargetTable(self.target.table or self.name, list(self.target.primary_key),
                               self.target.build_schema(context, f"ingestion job {self.name!r} target")),
            workflow_name=self.workflow_name,
            transform=None if self.transform is None else import_function(context, self.transform),
        )
        asset = ingestion_asset(job, **given_fields(self, include={"group_name", "description"}))
        launchers: dict[str, list[Any]] = {"sensors": [], "schedules": []}
        if self.sensor_or_schedule and isinstance(job.planner, TimeWindowPlanner):
            launchers["schedules"].append(build_ingestion_schedule(asset))
        elif self.sensor_or_schedule:
            launchers["sensors"].append(build_ingestion_sensor(job, asset))
        return dg.Definitions(assets=[asset], **launchers)


class OffsetChecksModel(dg.Model):
    """The `offset_age` and `offset_backlog` checks (`build_offset_checks`)."""

    warn_after_s: float = DEFAULT_WARN_AFTER_S
    error_after_s: float = DEFAULT_ERROR_AFTER_S
    max_backlog_versions: int = 0
    error_backlog_versions: int | None = None
    error_backlog_age_s: float | None = None


class IncrementalAssetComponent(dg.Component, dg.Model, dg.Resolvable):
    """An incremental transformation as an asset: `function` (a function of Spark
    DataFrames, one parameter per input, by import path) computed over the changed keys
    only. Builds what `incremental_asset(...)(function)` builds, with its offset checks
    (`checks: null` for none); `on_input_commits: true` sets the automation condition that
    runs it once an input has materialized."""

    function: str = Field(description="import path of the transformation function, e.g. .transform.enrich")
    name: str | None = Field(default=None, description="the asset's name (default: the function's)")
    transform_keys: list[str]
    primary_key: list[str]
    columns: Columns | None = Field(default=None, description="the output's columns: name: Spark type [not null]")
    struct_type: str | None = Field(default=None, description="import path of the output's StructType")
    ins: dict[str, str] | None = Field(default=None, description="parameter -> upstream asset key, where they differ")
    join_keys: dict[str, dict[str, str]] | None = Field(
        default=None, description="reference input parameter -> {primary_col: reference_col}")
    deps: list[str] | None = None
    batch_size: int | None = None
    commit_mode: CommitMode = CommitMode.end
    change_detection: ChangeDetection = ChangeDetection.v2
    on_failed_keys: Literal["raise", "warn"] = "raise"
    on_input_commits: bool = False
    checks: Annotated[OffsetChecksModel | None, parsed(OffsetChecksModel, "checks")] = OffsetChecksModel()
    group_name: str | None = None
    description: str | None = None

    def build_defs(self, context: dg.ComponentLoadContext) -> dg.Definitions:
        function = import_function(context, self.function)
        output = ColumnsOrSchema(columns=self.columns, struct_type=self.struct_type)
        asset = incremental_asset(
            transform_keys=self.transform_keys,
            primary_key=self.primary_key,
            schema=output.build_schema(context, f"incremental asset {self.name or function.__name__!r}"),
            ins=self.ins,
            join_keys=self.join_keys,
            deps=self.deps or (),
            automation_condition=on_input_commits() if self.on_input_commits else None,
            **given_fields(self, include={"name", "batch_size", "commit_mode", "change_detection", "on_failed_keys",
                                    "group_name", "description"}),
        )(function)
        checks = [] if self.checks is None else build_offset_checks(asset, **self.checks.model_dump())
        return dg.Definitions(assets=[asset], asset_checks=checks)
