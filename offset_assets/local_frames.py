"""Frames of rows the driver holds, which Spark can count without a job.

Spark keeps such rows in the plan itself (a local relation): a frame built from a pandas
or Arrow table, or, over Spark Connect, from any list. A classic session turns a Python
list into an RDD of Python objects instead, which only Spark's Python workers can read
and whose size nothing knows before a job has counted it. `local_frame` builds the first
kind from a list; `local_rows` reads how many rows a frame holds when it is of that kind,
so that a direct write into a versioned table runs in one pass, as the engine's own
writes do (a write of 10 rows into a small table in the test session: 0.57 s and 2 Spark
jobs as a list, 0.26 s and 1 job as a local relation).

Timestamps cross between the driver and Spark as instants both ways: `local_frame`
reads a naive datetime as the process's local time (as `createDataFrame` does), and
`collect_instants` collects timestamps as datetimes in UTC, so that the keys the engine
collects are distinct Python values and find their rows again whatever the session's and
the process's time zones.
"""

from __future__ import annotations

import datetime
from collections.abc import Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    DataType,
    MapType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from offset_assets.spark_internals import connect_arrow_rows, is_connect_session, local_relation_rows

if TYPE_CHECKING:
    import pyarrow as pa

_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


def local_frame(spark: SparkSession, rows: Sequence[Sequence[Any]], schema: StructType | str) -> DataFrame:
    """`rows` (tuples in `schema`'s column order) as a local relation: sent to Spark as
    one Arrow table of `schema`'s types, each value meaning what `createDataFrame` makes
    of it (a naive datetime in a timestamp column is the process's local time, whatever
    the session's time zone). A null in a column `schema` declares not nullable is
    refused, as `createDataFrame` refuses it (Arrow would keep it).

    A schema with a timestamp inside an array, map or struct is handed to
    `createDataFrame` as a list (Arrow would read its naive values as UTC): the same
    values, in a frame a classic session does not count without a job."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema

    struct = StructType.fromDDL(schema) if isinstance(schema, str) else schema
    width = len(struct.fields)
    for row in rows:
        if len(row) != width:
            raise ValueError(f"row {tuple(row)!r} has {len(row)} values, the schema {width} columns {struct.names}")
    if any(_nested_timestamp(field.dataType) for field in struct.fields):
        return spark.createDataFrame([tuple(row) for row in rows], struct)
    columns = [[row[i] for row in rows] for i in range(width)]
    for field, values in zip(struct.fields, columns, strict=True):
        if not field.nullable and any(value is None for value in values):
            raise ValueError(f"column {field.name!r} is not nullable, but a row holds None in it")
    arrays = [_arrow_values(field, values) for field, values in zip(struct.fields, columns, strict=True)]
    return spark.createDataFrame(pa.Table.from_arrays(arrays, schema=to_arrow_schema(struct, timezone="UTC")),
                                 struct)


def _arrow_values(field: StructField, values: list[Any]) -> list[Any]:
    """`values` of `field` as Arrow takes them to mean what `createDataFrame` makes of
    them (and a Spark Connect client sends): a naive datetime in a timestamp column is
    the process's local time (Arrow alone would read it as UTC, and Spark as the
    session's time zone), kept exact also in the hour a clock turns back (`fold`); a
    timestamp without time zone keeps its wall-clock time, whatever its `tzinfo`."""
    if isinstance(field.dataType, TimestampType):
        return [_instant(field, v) for v in values]
    if isinstance(field.dataType, TimestampNTZType):
        return [_datetime(field, v).replace(tzinfo=None) if v is not None else None for v in values]
    return values


def _instant(field: StructField, value: Any) -> datetime.datetime | None:
    return None if value is None else _datetime(field, value).astimezone(datetime.UTC)


def _datetime(field: StructField, value: Any) -> datetime.datetime:
    if not isinstance(value, datetime.datetime):
        raise TypeError(f"column {field.name!r} is {field.dataType.simpleString()}: "
                        f"{value!r} ({type(value).__name__}) is not a datetime")
    return value


def _nested_timestamp(data_type: DataType) -> bool:
    """True when `data_type` holds a timestamp inside an array, map or struct."""
    return not isinstance(data_type, (TimestampType, TimestampNTZType)) and _holds_timestamp(data_type)


def _holds_timestamp(data_type: DataType) -> bool:
    if isinstance(data_type, (TimestampType, TimestampNTZType)):
        return True
    if isinstance(data_type, ArrayType):
        return _holds_timestamp(data_type.elementType)
    if isinstance(data_type, MapType):
        return _holds_timestamp(data_type.keyType) or _holds_timestamp(data_type.valueType)
    if isinstance(data_type, StructType):
        return any(_holds_timestamp(f.dataType) for f in data_type.fields)
    return False


def collect_instants(frame: DataFrame, columns: Sequence[str], timestamps: Collection[str]) -> list[tuple]:
    """The rows of `frame` (whose columns are `columns`, in this order) as tuples, the
    columns named in `timestamps` (of Spark's `timestamp` type) as exact instants:
    datetimes in UTC, read from their microseconds since the epoch.

    pyspark collects a timestamp as a naive local time of the process, and in the hour a
    clock turns back two instants are then one Python value (equal, one hash): keys
    gathered in a set or a dict would lose one of them, and a Spark Connect client does
    not even keep which of the two it was. Values collected so go back to Spark as the
    same instants (`local_frame`, `createDataFrame`, literals), whatever the session's
    or the process's time zone."""
    if not any(c in timestamps for c in columns):
        return [tuple(row) for row in frame.collect()]
    selected = frame.select(*[F.unix_micros(F.col(f"`{c}`")).alias(c) if c in timestamps else F.col(f"`{c}`")
                              for c in columns])
    positions = [i for i, c in enumerate(columns) if c in timestamps]
    rows = []
    for row in selected.collect():
        values = list(row)
        for i in positions:
            if values[i] is not None:
                values[i] = _EPOCH + datetime.timedelta(microseconds=values[i])
        rows.append(tuple(values))
    return rows


def timestamp_columns(types: Mapping[str, DataType]) -> frozenset[str]:
    """The columns of `types` that hold instants (Spark's `timestamp`), for `collect_instants`."""
    return frozenset(c for c, t in types.items() if isinstance(t, TimestampType))


def local_rows(df: DataFrame) -> int | None:
    """How many rows `df` holds at most, when its plan says so without a Spark job: local
    relations, through projections, filters and unions of them; None for any other plan
    (and where this PySpark's plan cannot be read: `spark_internals.local_relation_rows`),
    so that the caller counts."""
    return local_relation_rows(df)


def collect_arrow(df: DataFrame, schema: StructType, limit: int) -> pa.Table | None:
    """The rows of `df` (of `schema`'s columns and types) as an Arrow table of the types
    Spark gives them (timestamps as instants in UTC; every column nullable, so that a
    NULL the schema does not allow reaches the caller, who refuses it), or None when it
    holds more than `limit` rows (the caller then leaves them to Spark).

    A frame whose plan holds its rows (`local_rows`: local relations through projections
    and filters, which Spark's optimizer folds into one) is collected as rows: a classic
    session returns those without a Spark job, where `toArrow` always starts one. Any
    other plan, and every plan over Spark Connect (whose server answers a folded local
    relation without a job either way), is collected with `toArrow`."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema

    target = pa.schema([f.with_nullable(True) for f in to_arrow_schema(schema, timezone="UTC")])
    held = local_rows(df)
    if held is None or is_connect_session(df.sparkSession):
        bounded = df if held is not None and held <= limit else df.limit(limit + 1)
        rows = (connect_arrow_rows(bounded, schema.names) if is_connect_session(df.sparkSession)
                else bounded.toArrow().select(schema.names))
        return None if rows.num_rows > limit else rows.cast(target)
    if held > limit:
        return None
    selected = df if df.columns == schema.names else df.select(*[F.col(f"`{c}`") for c in schema.names])
    rows = collect_instants(selected, schema.names, timestamp_columns({f.name: f.dataType for f in schema.fields}))
    columns = list(zip(*rows, strict=True)) if rows else [[] for _ in schema.fields]
    return pa.Table.from_arrays([pa.array([_arrow_value(v) for v in values], field.type)
                                 for values, field in zip(columns, target, strict=True)], schema=target)


def _arrow_value(value: Any) -> Any:
    """A collected value as Arrow takes it: a binary column is collected as bytearray."""
    return bytes(value) if isinstance(value, bytearray) else value
