"""What a SQL source's values become in the Spark types their columns are read as
(`sql.py` `spark_type_for`), and which of them do not fit (`sql_read.py` reads them).

A value is never read as another value. SQLite keeps any value in any column: a REAL in
an INTEGER column, text in a number column, a 2 or a 'false' in a BOOLEAN one, a REAL
with more digits than a NUMERIC(p, s) column's scale; PostgreSQL has infinite timestamps
and dates. Each does not fit its column's Spark type, and the read marks or refuses it.

A batch's column is converted at Arrow's speed only when each of its values is of a
Python type Arrow converts exactly into the column's type (`EXACT_KINDS`: an int into a
bigint, a float or an int into a double (Arrow refuses an int no double holds), a Decimal
into a decimal (Arrow refuses one that loses digits), a date into a date, ...); any other
column goes value by value through `to_spark_value`, which converts a value exactly or
says it does not fit. The two paths agree value for value: Arrow's own conversion of the
other kinds is lossy (2.5 into a bigint is 2, a datetime into a date loses its time).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from datetime import UTC, date, datetime
from decimal import Decimal
from functools import partial
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from pyspark.sql import types as T

if TYPE_CHECKING:
    import pyarrow as pa

# What converting one value can raise: a processor's parse error, a conversion's refusal.
CONVERSION_ERRORS = (ValueError, TypeError, ArithmeticError, OverflowError)

# The Python types of the values Arrow converts exactly into each Spark type's Arrow type.
EXACT_KINDS: dict[type[T.DataType], frozenset[type]] = {
    T.LongType: frozenset({int}),
    T.DoubleType: frozenset({float, int}),
    T.DecimalType: frozenset({Decimal, int}),
    T.BooleanType: frozenset({bool}),
    T.TimestampType: frozenset({datetime}),
    T.DateType: frozenset({date}),
    T.StringType: frozenset({str}),
    T.BinaryType: frozenset({bytes}),
}

Processor = Callable[[Any], Any]


def read_type(sql_type: sa.types.TypeEngine) -> sa.types.TypeEngine:
    """The type a column is selected as: its reflected type, whose result processor parses
    its values (SQLite's text timestamps), except for booleans and numbers, whose values
    `to_spark_value` takes as the database sends them. SQLAlchemy's processors of those
    are lossy on SQLite: a BOOLEAN's reads any value by its truth (2, 'false': True), a
    NUMERIC's rounds a float to the column's scale (2.555 in NUMERIC(10, 2): 2.56)."""
    if isinstance(sql_type, sa.Boolean | sa.Numeric | sa.Float):
        return sa.types.NullType()
    return sql_type


def to_spark_value(value: Any, spark_type: T.DataType) -> Any:
    """`value` as the Spark type its column is read as, exactly; a `ValueError` when that
    type cannot hold it. Text is never read as a number or a boolean: a database holding
    text in such a column holds a value that is none (SQLite stores numeric text in a
    number column as a number)."""
    if value is None:
        return None
    is_int = isinstance(value, int) and not isinstance(value, bool)
    if isinstance(spark_type, T.LongType):
        if is_int:
            return value
        if isinstance(value, float | Decimal) and _finite(value) and value == int(value):
            return int(value)  # 2.0 is 2; 2.5 is no bigint
    elif isinstance(spark_type, T.DoubleType):
        if isinstance(value, float):
            return value
        if is_int and float(value) == value:
            return float(value)
        if isinstance(value, Decimal) and value.is_finite() and Decimal(repr(float(value))) == value:
            return float(value)
    elif isinstance(spark_type, T.DecimalType):
        if isinstance(value, Decimal):
            return value  # Arrow refuses one beyond the type's precision or scale
        if is_int:
            return Decimal(value)
        if isinstance(value, float) and math.isfinite(value):
            return Decimal(repr(value))  # the decimal the float was written as: 0.1, not 0.1000000000000000055...
    elif isinstance(spark_type, T.BooleanType):
        if isinstance(value, bool):
            return value
        if is_int and value in (0, 1):
            return bool(value)
    elif isinstance(spark_type, T.TimestampType):
        if isinstance(value, datetime):
            return value if value.tzinfo else value.replace(tzinfo=UTC)  # naive database timestamps are UTC
    elif isinstance(spark_type, T.DateType):
        if isinstance(value, date) and not isinstance(value, datetime):
            return value
    else:
        return value  # text and bytes: Arrow's own conversion (text as UTF-8)
    raise ValueError(f"{value!r} is not {spark_type.simpleString()}")


def _finite(value: float | Decimal) -> bool:
    return value.is_finite() if isinstance(value, Decimal) else math.isfinite(value)


def processed(values: Sequence[Any], process: Processor | None, does_not_fit: Callable[[int], object]) -> Sequence[Any]:
    """`values` through their column type's result processor: the whole column at once,
    value by value only when one raised (it is reported by its row and read as a null)."""
    if process is None:
        return values
    try:
        return [process(value) for value in values]
    except CONVERSION_ERRORS:
        pass
    kept = []
    for row, value in enumerate(values):
        try:
            kept.append(process(value))
        except CONVERSION_ERRORS:
            does_not_fit(row)
            kept.append(None)
    return kept


def column_array(
    values: Sequence[Any], spark_type: T.DataType, arrow_type: pa.DataType, does_not_fit: Callable[[int], object]
) -> pa.Array:
    """A batch's column as an Arrow array of `arrow_type`: by Arrow at once when its values'
    kinds convert exactly (`EXACT_KINDS`), else value by value (`to_spark_value`); a
    value that does not fit is reported by its row (`does_not_fit`) and read as a null."""
    import pyarrow as pa  # on the executors only: a driver that plans ranges never loads it

    errors = (pa.ArrowInvalid, pa.ArrowTypeError, *CONVERSION_ERRORS)
    kinds = set(map(type, values))
    kinds.discard(type(None))
    if kinds <= EXACT_KINDS.get(type(spark_type), frozenset()):
        try:
            return pa.array(values, type=arrow_type)
        except errors:
            pass
    try:
        return pa.array([to_spark_value(v, spark_type) for v in values], type=arrow_type)
    except errors:
        pass
    converted = []
    for row, value in enumerate(values):
        try:
            value = to_spark_value(value, spark_type)
            pa.array([value], type=arrow_type)
        except errors:
            does_not_fit(row)
            value = None
        converted.append(value)
    return pa.array(converted, type=arrow_type)


def infinite_dates_as_text(dbapi_connection: Any, _record: Any = None) -> None:
    """On a psycopg2 connection (a `connect` event of a source's engine): PostgreSQL's
    'infinity' and '-infinity' timestamps and dates read as that text, which no Spark type
    holds, so the read marks or refuses them. psycopg2 reads them as `datetime.max` and
    `datetime.min`, real instants Spark would store in their place."""
    import psycopg2.extensions as ext

    for caster in (ext.PYDATETIME, ext.PYDATETIMETZ, ext.PYDATE):
        ext.register_type(
            ext.new_type(caster.values, f"{caster.name}_OR_INFINITY", partial(_finite_or_text, caster)),
            dbapi_connection,
        )


def _finite_or_text(caster: Any, text: str | None, cursor: Any) -> Any:
    if text is not None and text.endswith("infinity"):
        return text
    return caster(text, cursor)
