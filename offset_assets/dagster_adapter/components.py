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

import importlib
import inspect
import typing
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Annotated, Any, Literal, TypeVar

import dagster as dg
from pydantic import Field, TypeAdapter, ValidationError, model_validator
from pyspark.sql.types import StructType

from offset_assets.dagster_adapter.assets import incremental_asset
from offset_assets.dagster_adapter.automation import on_input_commits
from offset_assets.dagster_adapter.checks import DEFAULT_ERROR_AFTER_S, DEFAULT_WARN_AFTER_S, build_offset_checks
from offset_assets.dagster_adapter.ingestion_assets import ingestion_asset
from offset_assets.dagster_adapter.ingestion_schedule import build_ingestion_schedule
from offset_assets.dagster_adapter.ingestion_sensor import build_ingestion_sensor
from offset_assets.engine.vocabulary import ChangeDetection, CommitMode
from offset_assets.ranges.ingestion import IngestionJob, TargetTable
from offset_assets.ranges.planners import AutoIncrementIdPlanner, KafkaOffsetPlanner, TimeWindowPlanner, UpstreamPlanner
from offset_assets.ranges.sources import FolderSource, SqlTableSource
from offset_assets.ranges.sources.kafka import KafkaSource

Columns = dict[str, str]
_DATETIME = TypeAdapter(datetime)
_TIMEDELTA = TypeAdapter(timedelta)


# Spark SQL's names of the types whose JSON names differ (`bigint` is `long`).
_SQL_TYPE_NAMES = {"bigint": "long", "int": "integer", "smallint": "short", "tinyint": "byte", "bool": "boolean"}


def schema_of_columns(columns: Mapping[str, str]) -> StructType:
    """`{name: "long not null"}` as a Spark StructType, without a Spark session: a type is
    Spark's JSON or SQL name (`long` or `bigint`, `decimal(10,2)`, ...)."""
    fields = []
    for name, declared in columns.items():
        text = str(declared).strip().lower()
        nullable = not text.endswith(" not null")
        type_name = text if nullable else text.removesuffix(" not null").strip()
        field = {"name": name, "type": _SQL_TYPE_NAMES.get(type_name, type_name), "nullable": nullable, "metadata": {}}
        try:
            StructType.fromJson({"type": "struct", "fields": [field]})
        except (ValueError, KeyError) as exc:
            raise ValueError(f"column {name!r}: {declared!r} is not a Spark type (`name: <type> [not null]`, "
                             "e.g. `long not null`, `string`, `decimal(10,2)`)") from exc
        fields.append(field)
    return StructType.fromJson({"type": "struct", "fields": fields})


class _ColumnsOrSchema(dg.Model):
    """A table's columns (`columns:`) or a StructType by import path (`struct_type:`)."""

    columns: Columns | None = Field(default=None, description="name: Spark type [not null], in order")
    struct_type: str | None = Field(default=None, description="import path of a pyspark StructType, "
                                    "e.g. .schemas.ORDERS, for types YAML cannot spell")

    def build_schema(self, context: dg.ComponentLoadContext, what: str) -> StructType:
        if (self.columns is None) == (self.struct_type is None):
            raise dg.DagsterInvalidDefinitionError(f"{what}: give either columns or struct_type")
        if self.columns is not None:
            try:
                return schema_of_columns(self.columns)
            except ValueError as exc:
                raise dg.DagsterInvalidDefinitionError(f"{what}: {exc}") from None
        schema = import_object(context, self.struct_type)
        if not isinstance(schema, StructType):
            raise dg.DagsterInvalidDefinitionError(f"{what}: struct_type {self.struct_type} is not a StructType")
        return schema


class _OneOf(dg.Model):
    """A choice written as a one-key mapping (`source: {sql_table: {...}}`), so a misspelt
    choice is an unknown key, refused in one line."""

    @model_validator(mode="after")
    def _exactly_one(self) -> "_OneOf":
        chosen = [name for name in type(self).model_fields if getattr(self, name) is not None]
        if len(chosen) != 1:
            raise ValueError(f"give exactly one of {list(type(self).model_fields)}, got {chosen or 'none'}")
        return self

    def chosen(self) -> Any:
        return next(getattr(self, name) for name in type(self).model_fields if getattr(self, name) is not None)


# -- sources ---------------------------------------------------------------------------------


class SqlTableSourceModel(dg.Model):
    """A SQL table read through SQLAlchemy, by id or time ranges (`SqlTableSource`)."""

    url: str
    table: str
    id_column: str | None = None
    time_column: str | None = None
    columns: list[str] | None = None
    db_schema: str | None = None
    rows_per_slice: int | None = None

    def build(self, context: dg.ComponentLoadContext) -> SqlTableSource:
        return SqlTableSource(**_given(self))


class FolderSourceModel(_ColumnsOrSchema):
    """Files landing in dated folders, read by Spark (`FolderSource`). `columns` or
    `struct_type`: the files' schema (needed for csv and json; parquet files carry their own)."""

    root: str
    format: str = "parquet"
    partition_column: str | None = None
    partition_format: str | None = None
    time_column: str | None = None
    options: dict[str, str] | None = None

    def build(self, context: dg.ComponentLoadContext) -> FolderSource:
        kwargs = _given(self, exclude={"columns", "struct_type"})
        if self.columns is not None or self.struct_type is not None:
            kwargs["schema"] = self.build_schema(context, f"folder source {self.root}")
        return FolderSource(**kwargs)


class KafkaSourceModel(dg.Model):
    """Kafka topics (`KafkaSource`; the `kafka` extra). `value_columns`: the JSON values'
    columns (`name: Spark type`), else the raw value."""

    bootstrap_servers: str
    topics: list[str]
    consumer_config: dict[str, str] | None = None
    value_columns: Columns | None = None
    max_messages_per_partition: int | None = None
    timeout_s: float | None = None

    def build(self, context: dg.ComponentLoadContext) -> KafkaSource:
        kwargs = _given(self, exclude={"value_columns"})
        if self.value_columns is not None:
            kwargs["value_schema"] = schema_of_columns(self.value_columns)
        return KafkaSource(**kwargs)


class SourceModel(_OneOf):
    """Where the rows come from: exactly one of `sql_table`, `folder`, `kafka`."""

    sql_table: SqlTableSourceModel | None = None
    folder: FolderSourceModel | None = None
    kafka: KafkaSourceModel | None = None

    def build(self, context: dg.ComponentLoadContext) -> Any:
        return self.chosen().build(context)


# -- planners --------------------------------------------------------------------------------


class TimeWindowPlannerModel(dg.Model):
    """Windows [start + k·period, start + (k+1)·period) from `start` (`TimeWindowPlanner`):
    `start` an ISO date or time (UTC), `period` ISO 8601 (`P1D`, `PT1H`) or seconds."""

    # Text, parsed when built: Dagster's YAML resolution takes no datetime or timedelta
    # fields, and a value may be a template (`{{ env('START') }}`) until then.
    start: str
    period: str
    max_windows_per_plan: int | None = None

    def build(self) -> TimeWindowPlanner:
        try:
            start, period = _DATETIME.validate_python(self.start), _TIMEDELTA.validate_python(self.period)
        except ValidationError as exc:
            raise ValueError(f"time_window: {_first_error(exc)}") from exc
        if period <= timedelta(0):
            raise ValueError(f"time_window: period {self.period!r} is not a positive duration")
        return TimeWindowPlanner(start, period, **_given(self, exclude={"start", "period"}))


class AutoIncrementIdPlannerModel(dg.Model):
    """Ranges (last id ingested, max id at the source] (`AutoIncrementIdPlanner`)."""

    default_start: int | None = None
    max_range_size: int | None = None
    max_ranges_per_plan: int | None = None

    def build(self) -> AutoIncrementIdPlanner:
        return AutoIncrementIdPlanner(**_given(self))


class KafkaOffsetPlannerModel(dg.Model):
    """Per topic-partition offset ranges from the last committed end (`KafkaOffsetPlanner`);
    `default_start`: the first range's start offsets as JSON (default `{}`: each
    partition's earliest offset)."""

    default_start: str | None = None
    max_offsets_per_partition: int | None = None

    def build(self) -> KafkaOffsetPlanner:
        return KafkaOffsetPlanner(**_given(self))


class UpstreamPlannerModel(dg.Model):
    """One range per successful range of another ingestion job (`UpstreamPlanner`)."""

    upstream_job: str

    def build(self) -> UpstreamPlanner:
        return UpstreamPlanner(self.upstream_job)


class PlannerModel(_OneOf):
    """How the ranges are planned: exactly one of `time_window`, `auto_increment_id`,
    `kafka_offsets`, `upstream`."""

    time_window: TimeWindowPlannerModel | None = None
    auto_increment_id: AutoIncrementIdPlannerModel | None = None
    kafka_offsets: KafkaOffsetPlannerModel | None = None
    upstream: UpstreamPlannerModel | None = None

    def build(self) -> Any:
        return self.chosen().build()


class TargetModel(_ColumnsOrSchema):
    """The versioned table a job ingests into: its name (default: the job's), primary key
    and columns."""

    table: str | None = None
    primary_key: list[str]


# -- nested attributes -----------------------------------------------------------------------

M = TypeVar("M", bound=dg.Model)


def parsed(model: type[M], field: str) -> dg.Resolver:
    """Resolve a nested attribute (`source:`, `planner:`, ...) by rendering its templates
    and validating it as `model`, whose mistakes are said in one line naming the key
    (`source.sql_table: unknown key 'id_colum' (keys: url, table, ...)`). Dagster's own
    resolution would accept a template string for every nested object, and so report a
    misspelt key among the failures of each alternative."""

    def resolve(context: dg.ResolutionContext, value: Any) -> M | None:
        if value is None:
            return None
        try:
            return model.model_validate(context.resolve_value(value))
        except ValidationError as exc:
            # An unknown key first: a misspelt key is also the required one said missing.
            errors = sorted(exc.errors(), key=lambda error: error["type"] != "extra_forbidden")
            raise ValueError("; ".join(_error_text(model, field, error) for error in errors)) from None

    return dg.Resolver(resolve, model_field_type=dict | None, description=inspect.getdoc(model))


def _error_text(model: type[dg.Model], field: str, error: Mapping[str, Any]) -> str:
    path = [str(part) for part in error["loc"]]
    where = ".".join([field, *path[:-1]]) if path else field
    if error["type"] == "extra_forbidden":
        keys = ", ".join(_model_at(model, path[:-1]).model_fields)
        return f"{where}: unknown key {path[-1]!r} (keys: {keys})"
    if error["type"] == "missing":
        return f"{where}: missing key {path[-1]!r}"
    message = str(error["msg"]).removeprefix("Value error, ")
    return f"{'.'.join([field, *path])}: {message}"


def _model_at(model: type[dg.Model], path: Sequence[str]) -> type[dg.Model]:
    """The nested model `path` leads to from `model` (Optional fields unwrapped)."""
    for name in path:
        annotation = model.model_fields[name].annotation
        model = next(arg for arg in (typing.get_args(annotation) or (annotation,))
                     if isinstance(arg, type) and issubclass(arg, dg.Model))
    return model


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
        asset = ingestion_asset(job, **_given(self, include={"group_name", "description"}))
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
        output = _ColumnsOrSchema(columns=self.columns, struct_type=self.struct_type)
        asset = incremental_asset(
            transform_keys=self.transform_keys,
            primary_key=self.primary_key,
            schema=output.build_schema(context, f"incremental asset {self.name or function.__name__!r}"),
            ins=self.ins,
            join_keys=self.join_keys,
            deps=self.deps or (),
            automation_condition=on_input_commits() if self.on_input_commits else None,
            **_given(self, include={"name", "batch_size", "commit_mode", "change_detection", "on_failed_keys",
                                    "group_name", "description"}),
        )(function)
        checks = [] if self.checks is None else build_offset_checks(asset, **self.checks.model_dump())
        return dg.Definitions(assets=[asset], asset_checks=checks)


# -- import paths ----------------------------------------------------------------------------


def import_object(context: dg.ComponentLoadContext, path: str) -> Any:
    """The object at `module.attribute`; a path starting with `.` is relative to the
    component's folder in the defs module (as `type: .MyComponent` is)."""
    module_name, _, attribute = context.normalize_component_type_str(path).rpartition(".")
    if not module_name:
        raise dg.DagsterInvalidDefinitionError(f"{path!r} is not an import path (module.attribute)")
    try:
        return getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as exc:
        raise dg.DagsterInvalidDefinitionError(f"cannot import {path!r}: {exc}") from exc


def import_function(context: dg.ComponentLoadContext, path: str) -> Callable[..., Any]:
    function = import_object(context, path)
    if not callable(function):
        raise dg.DagsterInvalidDefinitionError(f"{path!r} is not a function")
    return function


def _given(model: dg.Model, include: set[str] | None = None, exclude: Sequence[str] = ()) -> dict[str, Any]:
    """The fields set in the YAML (defaults left to the class they build)."""
    values = model.model_dump(exclude_unset=True, exclude=set(exclude))
    return {name: value for name, value in values.items() if include is None or name in include}


def _first_error(exc: ValidationError) -> str:
    error = exc.errors()[0]
    return f"{error['input']!r}: {error['msg']}"
