"""The attributes of the components (`components.py`) as pydantic models: a table's
columns or schema, a source, a planner, a target, a multi-asset's outputs, each refusing
unknown keys.

A source or a planner is one of several kinds, given as its one key (`sql_table:`,
`kafka:`, `folder:`; `time_window:`, `auto_increment_id:`, `kafka_offsets:`,
`upstream:`); each model builds the object the Python form takes, its keys the Python
class's arguments. `key` arguments say where a model sits in the component's attributes,
so that what it refuses names the YAML key (`component_loading.declared_at`).
"""

# No `from __future__ import annotations`: Dagster resolves these models' field types at
# class creation, so they must not be strings.

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

import dagster as dg
from pydantic import Field, TypeAdapter, ValidationError, model_validator
from pyspark.sql.types import StructType

from offset_assets.dagster_adapter.component_loading import (
    ColumnTypeError,
    ComponentDeclarationError,
    declared_at,
    import_object,
    where,
)
from offset_assets.ranges.planners import AutoIncrementIdPlanner, KafkaOffsetPlanner, TimeWindowPlanner, UpstreamPlanner
from offset_assets.ranges.sources import FolderSource, SqlTableSource
from offset_assets.ranges.sources.kafka import KafkaSource

Columns = dict[str, str]
Key = Sequence[str]

_DATETIME = TypeAdapter(datetime)
_TIMEDELTA = TypeAdapter(timedelta)


# Spark SQL's names of the types whose JSON names differ (`bigint` is `long`).
_SQL_TYPE_NAMES = {"bigint": "long", "int": "integer", "smallint": "short", "tinyint": "byte", "bool": "boolean"}


def schema_of_columns(columns: Mapping[str, str]) -> StructType:
    """`{name: "long not null"}` as a Spark StructType, without a Spark session: a type is
    Spark's JSON or SQL name (`long` or `bigint`, `decimal(10,2)`, ...); a name Spark does
    not know raises `ColumnTypeError`."""
    fields = []
    for name, declared in columns.items():
        text = str(declared).strip().lower()
        nullable = not text.endswith(" not null")
        type_name = text if nullable else text.removesuffix(" not null").strip()
        field = {"name": name, "type": _SQL_TYPE_NAMES.get(type_name, type_name), "nullable": nullable, "metadata": {}}
        try:
            StructType.fromJson({"type": "struct", "fields": [field]})
        except (ValueError, KeyError) as exc:
            raise ColumnTypeError(name, declared) from exc
        fields.append(field)
    return StructType.fromJson({"type": "struct", "fields": fields})


def import_struct_type(context: dg.ComponentLoadContext, path: str, key: Key) -> StructType:
    """The pyspark StructType at import path `path`, declared at `key`."""
    schema = import_object(context, path, key)
    if not isinstance(schema, StructType):
        raise ComponentDeclarationError(f"{where(context, key)}: {path!r} is not a pyspark StructType")
    return schema


class ColumnsOrSchema(dg.Model):
    """A table's columns (`columns:`) or a StructType by import path (`struct_type:`)."""

    columns: Columns | None = Field(default=None, description="name: Spark type [not null], in order")
    struct_type: str | None = Field(
        default=None,
        description="import path of a pyspark StructType, e.g. .schemas.ORDERS, for types YAML cannot spell",
    )

    def build_schema(self, context: dg.ComponentLoadContext, key: Key) -> StructType:
        """The table's schema; `key`: where this model is in the component's attributes."""
        with declared_at(context, key):
            if (self.columns is None) == (self.struct_type is None):
                raise ValueError("give either columns or struct_type")
            if self.columns is not None:
                return schema_of_columns(self.columns)
        return import_struct_type(context, self.struct_type, [*key, "struct_type"])


class _OneOf(dg.Model):
    """A choice written as a one-key mapping (`source: {sql_table: {...}}`), so a misspelt
    choice is an unknown key, refused in one line."""

    @model_validator(mode="after")
    def _exactly_one(self) -> "_OneOf":
        chosen = [name for name in type(self).model_fields if getattr(self, name) is not None]
        if len(chosen) != 1:
            raise ValueError(f"give exactly one of {list(type(self).model_fields)}, got {chosen or 'none'}")
        return self

    def chosen(self) -> tuple[str, Any]:
        return next((name, getattr(self, name)) for name in type(self).model_fields if getattr(self, name) is not None)


# -- sources ---------------------------------------------------------------------------------


class SqlTableSourceModel(dg.Model):
    """A SQL table read through SQLAlchemy, by id or time ranges (`SqlTableSource`);
    `order_by`: the column ordering a key's rows (an append-only change log)."""

    url: str
    table: str
    id_column: str | None = None
    time_column: str | None = None
    columns: list[str] | None = None
    db_schema: str | None = None
    order_by: str | None = None
    rows_per_slice: int | None = None
    slices: int | None = None
    fetch_size: int | None = None

    def build(self, context: dg.ComponentLoadContext, key: Key) -> SqlTableSource:
        return SqlTableSource(**given_fields(self))


class FolderSourceModel(ColumnsOrSchema):
    """Files landing in dated folders, read by Spark (`FolderSource`). `columns` or
    `struct_type`: the files' schema (needed for csv and json; parquet files carry their own)."""

    root: str
    format: str = "parquet"
    partition_column: str | None = None
    partition_format: str | None = None
    time_column: str | None = None
    order_by: str | None = None
    options: dict[str, str] | None = None

    def build(self, context: dg.ComponentLoadContext, key: Key) -> FolderSource:
        kwargs = given_fields(self, exclude={"columns", "struct_type"})
        if self.columns is not None or self.struct_type is not None:
            kwargs["schema"] = self.build_schema(context, key)
        return FolderSource(**kwargs)


class KafkaSourceModel(dg.Model):
    """Kafka topics (`KafkaSource`; the `kafka` extra). `value_columns` (`name: Spark type`)
    or `value_struct_type` (an import path): the columns of the JSON values, their
    `message_key` the column(s) a message's key holds (a tombstone's key); without either,
    the raw value. `tombstones: false` skips messages without a value; `order_by`: a
    value column ordering a key's messages across partitions."""

    bootstrap_servers: str
    topics: list[str]
    consumer_config: dict[str, str] | None = None
    value_columns: Columns | None = None
    value_struct_type: str | None = None
    message_key: str | list[str] | None = None
    tombstones: bool | None = None
    order_by: str | None = None
    max_messages_per_partition: int | None = None
    timeout_s: float | None = None

    def build(self, context: dg.ComponentLoadContext, key: Key) -> KafkaSource:
        kwargs = given_fields(self, exclude={"value_columns", "value_struct_type"})
        with declared_at(context, key):
            if self.value_columns is not None and self.value_struct_type is not None:
                raise ValueError("give value_columns or value_struct_type, not both")
            if self.value_columns is not None:
                try:
                    kwargs["value_schema"] = schema_of_columns(self.value_columns)
                except ColumnTypeError as exc:
                    raise ComponentDeclarationError(
                        f"{where(context, [*key, 'value_columns', exc.column])}: {exc}"
                    ) from exc
        if self.value_struct_type is not None:
            kwargs["value_schema"] = import_struct_type(context, self.value_struct_type, [*key, "value_struct_type"])
        with declared_at(context, key):
            return KafkaSource(**kwargs)


class SourceModel(_OneOf):
    """Where the rows come from: exactly one of `sql_table`, `folder`, `kafka`."""

    sql_table: SqlTableSourceModel | None = None
    folder: FolderSourceModel | None = None
    kafka: KafkaSourceModel | None = None

    def build(self, context: dg.ComponentLoadContext, key: Key) -> Any:
        name, model = self.chosen()
        return model.build(context, [*key, name])


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
            error = exc.errors()[0]
            raise ValueError(f"{error['input']!r}: {error['msg']}") from None
        if period <= timedelta(0):
            raise ValueError(f"period {self.period!r} is not a positive duration")
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

    def build(self, context: dg.ComponentLoadContext, key: Key) -> Any:
        name, model = self.chosen()
        with declared_at(context, [*key, name]):
            return model.build()


# -- tables ----------------------------------------------------------------------------------


class TargetModel(ColumnsOrSchema):
    """The versioned table a job ingests into: its name (default: the job's), primary key
    and columns."""

    table: str | None = None
    primary_key: list[str]


class OutModel(ColumnsOrSchema):
    """One output of an incremental multi-asset (`IncrementalOut`): its table's primary
    key and columns, its asset key (default: the output's name, `/` between the parts of a
    prefixed one), description and metadata."""

    primary_key: list[str]
    key: str | None = None
    description: str | None = None
    metadata: dict[str, Any] | None = None


class OffsetChecksModel(dg.Model):
    """The `offset_age` and `offset_backlog` checks (`build_offset_checks`)."""

    warn_after_s: float | None = None
    error_after_s: float | None = None
    max_backlog_versions: int | None = None
    error_backlog_versions: int | None = None
    error_backlog_age_s: float | None = None



def given_fields(model: dg.Model, include: set[str] | None = None, exclude: Sequence[str] = ()) -> dict[str, Any]:
    """The fields set in the YAML (defaults left to the class they build)."""
    values = model.model_dump(exclude_unset=True, exclude=set(exclude))
    return {name: value for name, value in values.items() if include is None or name in include}
