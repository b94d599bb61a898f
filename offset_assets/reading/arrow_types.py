"""A table's schema as the delta catalog stores it (Spark's schema JSON), in Arrow's types,
without importing PySpark: the types Spark's `toArrow()` gives the same columns (PySpark's
`to_arrow_type`, timestamps in UTC as the project's sessions read them).

The reads without a JVM (`arrow.py`, `duckdb_sql.py`) run in a shell command that must
not pay for PySpark's import (about a second), so the few types a versioned table holds
are spelled here; `tests/test_reading_arrow.py` checks them against PySpark's own.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pyarrow as pa

from offset_assets.errors import OffsetAssetsError

_SIMPLE = {
    "boolean": pa.bool_(),
    "byte": pa.int8(),
    "short": pa.int16(),
    "integer": pa.int32(),
    "long": pa.int64(),
    "float": pa.float32(),
    "double": pa.float64(),
    "string": pa.string(),
    "binary": pa.binary(),
    "date": pa.date32(),
    "timestamp": pa.timestamp("us", tz="UTC"),
    "timestamp_ntz": pa.timestamp("us"),
    "void": pa.null(),
}
_DECIMAL = re.compile(r"decimal\((\d+),\s*(\d+)\)")


class UnsupportedTypeError(OffsetAssetsError):
    """A column type the reads without a JVM do not spell: such a table is read with Spark."""


def arrow_type(spark_type: Any) -> pa.DataType:
    """The Arrow type of one type of Spark's schema JSON (a name or an object)."""
    if isinstance(spark_type, str):
        if spark_type in _SIMPLE:
            return _SIMPLE[spark_type]
        decimal = _DECIMAL.fullmatch(spark_type)
        if decimal is not None:
            return pa.decimal128(int(decimal.group(1)), int(decimal.group(2)))
        raise UnsupportedTypeError(f"type {spark_type!r} is not read without a JVM")
    kind = spark_type.get("type")
    if kind == "array":
        element = pa.field("element", arrow_type(spark_type["elementType"]), spark_type["containsNull"])
        return pa.list_(element)
    if kind == "struct":
        return pa.struct([arrow_field(field) for field in spark_type["fields"]])
    if kind == "map":
        key = pa.field("key", arrow_type(spark_type["keyType"]), nullable=False)
        value = pa.field("value", arrow_type(spark_type["valueType"]), spark_type["valueContainsNull"])
        return pa.map_(key, value)
    raise UnsupportedTypeError(f"type {json.dumps(spark_type)[:100]} is not read without a JVM")


def arrow_field(field: dict[str, Any]) -> pa.Field:
    return pa.field(field["name"], arrow_type(field["type"]), field.get("nullable", True))


def arrow_schema(schema_json: str) -> pa.Schema:
    """The Arrow schema of a table's data columns, from the catalog's schema JSON."""
    return pa.schema([arrow_field(field) for field in json.loads(schema_json)["fields"]])
