"""Spark SQL text for the expressions every write and read builds: names quoted, types
spelled so that Spark's parser reads them back.

Why text: in classic PySpark each Column call is a round trip to the JVM (`F.col` is
three, a cast to a `DataType` nine, a `when(...).otherwise(...)` over columns a dozen)
and each Java object it returns is another when Python frees it. A write's
classification built several hundred of them for a handful of columns. An expression
given as text costs one call (`F.expr`), and a whole projection one call plus one per
expression (`DataFrame.selectExpr`), over Spark Connect too.
"""

from __future__ import annotations

import calendar
import datetime
import math
import re
from collections.abc import Iterable

from pyspark.sql.types import ArrayType, DataType, StructType

# Text SQL could misread in a string literal: a quote or a backslash (whether `\` is an
# escape depends on spark.sql.parser.escapedStringLiterals) or a `$` (`${...}` is replaced
# by a conf value, spark.sql.variable.substitute, before parsing).
NEEDS_HEX = re.compile(r"['\\$]")
INT_MIN, INT_MAX = -(2**31), 2**31 - 1
LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1


def quoted(name: str) -> str:
    """`name` as an identifier, whatever its characters (a backtick is doubled)."""
    return "`" + name.replace("`", "``") + "`"


def type_text(data_type: DataType) -> str:
    """`data_type` as Spark SQL spells it, its struct fields' names quoted
    (`simpleString` leaves them bare, which a name with a space or a colon breaks)."""
    if isinstance(data_type, StructType):
        return "struct<{}>".format(",".join(f"{quoted(f.name)}:{type_text(f.dataType)}" for f in data_type.fields))
    if isinstance(data_type, ArrayType):
        return f"array<{type_text(data_type.elementType)}>"
    return data_type.simpleString()


def null_of(data_type: DataType) -> str:
    """A null of `data_type`."""
    return f"CAST(NULL AS {type_text(data_type)})"


def any_of(conditions: Iterable[str]) -> str:
    """The disjunction of `conditions`: false when there are none."""
    return " OR ".join(f"({c})" for c in conditions) or "false"


def all_of(conditions: Iterable[str]) -> str:
    """The conjunction of `conditions`: true when there are none."""
    return " AND ".join(f"({c})" for c in conditions) or "true"


def case_when(branches: Iterable[tuple[str, str]], otherwise: str | None = None) -> str:
    """`CASE WHEN condition THEN value ... [ELSE otherwise] END`: the first branch whose
    condition is true gives the value."""
    whens = " ".join(f"WHEN {condition} THEN {value}" for condition, value in branches)
    return f"CASE {whens}{f' ELSE {otherwise}' if otherwise is not None else ''} END"


def literal(value: object) -> str | None:
    """SQL text of the literal `F.lit(value)` makes; None when there is no safe text."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        value = int(value)  # a subclass (an IntEnum, say) may print itself otherwise
        if INT_MIN <= value <= INT_MAX:
            return f"({value})" if value < 0 else str(value)
        if LONG_MIN <= value <= LONG_MAX:
            return f"({value}L)" if value < 0 else f"{value}L"
        return None
    if isinstance(value, datetime.date) and not isinstance(value, datetime.datetime):
        return f"DATE '{value.isoformat()}'"
    if isinstance(value, float):
        value = float(value)
        # repr() of a float is the shortest text that parses back to the same double.
        return f"({value!r}D)" if math.isfinite(value) else None
    if isinstance(value, str):
        value = str.__str__(value)
        if not NEEDS_HEX.search(value):
            return f"'{value}'"
        # (`NEEDS_HEX`: a key "${env:HOME}" would match the home folder.) The UTF-8 bytes
        # in hex mean the same whatever the parser's settings.
        try:
            return f"CAST(X'{value.encode('utf-8').hex()}' AS STRING)"
        except UnicodeEncodeError:
            return None
    return None


def timestamp_literal(value: datetime.datetime, without_time_zone: bool) -> str:
    """SQL text of a timestamp, exact whatever the session's time zone. An instant is
    spelled as microseconds since the epoch: a naive value is the process's local time,
    as `F.lit` and `createDataFrame` take it, with `fold` saying which of an hour the
    clock turned back (a timestamp literal's text would be read in the session's time
    zone). A timestamp without time zone is its wall-clock time, `tzinfo` ignored as
    pyspark ignores it."""
    if without_time_zone:
        return f"TIMESTAMP_NTZ '{value.replace(tzinfo=None).isoformat(sep=' ', timespec='microseconds')}'"
    instant = value.astimezone(datetime.UTC)
    micros = calendar.timegm(instant.utctimetuple()) * 1_000_000 + instant.microsecond
    return f"timestamp_micros({micros}L)"


def string_literal(value: str) -> str:
    """`value` as a SQL string literal (`literal`); ValueError for a string without one
    (an unpaired surrogate)."""
    text = literal(value)
    if text is None:
        raise ValueError(f"no SQL text for the string {value!r}")
    return text
