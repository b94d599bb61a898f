"""The attributes of the components (`components.py`) as pydantic models: a table's
columns or schema, a source, a planner, a target, each refusing unknown keys, and how a
nested model's error is named (`parsed`).

A source or a planner is one of several kinds, given as its one key (`sql_table:`,
`kafka:`, `folder:`; `time_window:`, `auto_increment_id:`, `kafka_offsets:`,
`upstream:`); each model builds the object the Python form takes.
"""

# No `from __future__ import annotations`: Dagster resolves these models' field types at
# class creation, so they must not be strings.

import importlib
import inspect
import typing
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, TypeVar

import dagster as dg
from pydantic import Field, TypeAdapter, ValidationError, model_validator
from pyspark.sql.types import StructType

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


class ColumnsOrSchema(dg.Model):
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
        return SqlTableSource(**given_fields(self))


class FolderSourceModel(ColumnsOrSchema):
    """Files landing in dated folders, read by Spark (`FolderSource`). `columns` or
    `struct_type`: the files' schema (needed for csv and json; parquet files carry their own)."""

    root: str
    format: str = "parquet"
    partition_column: str | None = None
    partition_format: str | None = None
    time_column: str | None = None
    options: dict[str, str] | None = None

    def build(self, context: dg.ComponentLoadContext) -> FolderSource:
        kwargs = given_fields(self, exclude={"columns", "struct_type"})
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
        kwargs = given_fields(self, exclude={"value_columns"})
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
        return TimeWindowPlanner(start, period, **given_fields(self, exclude={"start", "period"}))


class AutoIncrementIdPlannerModel(dg.Model):
    """Ranges (last id ingested, max id at the source] (`AutoIncrementIdPlanner`)."""

    default_start: int | None = None
    max_range_size: int | None = None
    max_ranges_per_plan: int | None = None

    def build(self) -> AutoIncrementIdPlanner:
        return AutoIncrementIdPlanner(**given_fields(self))


class KafkaOffsetPlannerModel(dg.Model):
    """Per topic-partition offset ranges from the last committed end (`KafkaOffsetPlanner`);
    `default_start`: the first range's start offsets as JSON (default `{}`: each
    partition's earliest offset)."""

    default_start: str | None = None
    max_offsets_per_partition: int | None = None

    def build(self) -> KafkaOffsetPlanner:
        return KafkaOffsetPlanner(**given_fields(self))


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


class TargetModel(ColumnsOrSchema):
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


def given_fields(model: dg.Model, include: set[str] | None = None, exclude: Sequence[str] = ()) -> dict[str, Any]:
    """The fields set in the YAML (defaults left to the class they build)."""
    values = model.model_dump(exclude_unset=True, exclude=set(exclude))
    return {name: value for name, value in values.items() if include is None or name in include}


def _first_error(exc: ValidationError) -> str:
    error = exc.errors()[0]
    return f"{error['input']!r}: {error['msg']}"
