"""`column IN (values)` built in one call to the JVM.

`Column.isin(values)` creates one literal per value, each a call from Python to the JVM:
about 0.6 ms a value on the test machine, so 6 s to build the filter of 10,000 keys, and
a run builds several (the primary read, the stray-row check, the previous output). That
made a run of 5,000 changed keys cost 2.5x a run of 20,000, which look keys up by a
semi-join instead. The SQL text of the same IN is parsed in one call.

Each value is rendered (`sql_text.literal`) as the literal `F.lit(value)` would make (Python `str` a string,
`int` an int or a bigint, `float` a double, `bool` a boolean, a `date` a date), so Spark
resolves and coerces the expression exactly as it does the `isin` it replaces. A `None`
among the values is a key like the others: it selects the rows whose column IS NULL
(`column IN (..., NULL)` would select none of them), and Parquet answers that part from
its null counts. Strings
that SQL text could misread (a quote, a backslash, a `$` that variable substitution would
act on) are spelled as UTF-8 bytes in hex. A datetime is rendered by the column's type
(`sql_text.timestamp_literal`): `isin` would make every naive datetime an instant of the
process's local time, which a timestamp without time zone is compared with in the
session's time zone, so those keys matched nothing when the two zones differ. A list
holding anything else (decimals, bytes, non-finite floats), or a column name with
a `$` or a backtick, falls back to `isin`: correct, only slower.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql.types import DataType, TimestampNTZType

from offset_assets.versioned.sql_text import NEEDS_HEX, literal, quoted, timestamp_literal


def in_values(column: str, values: Iterable[object], data_type: DataType | None = None) -> Column:
    """`column IN (values)`, the same condition as `F.col(column).isin(values)`, with the
    datetimes in `values` meaning what a column of `data_type` holds (None: instants),
    and a `None` in `values` selecting the rows where `column` is NULL. A row whose
    column is NULL gets NULL, not false, when `values` holds no `None` (as with `isin`):
    a caller that negates the condition coalesces it."""
    values = list(values)
    with_null = any(value is None for value in values)
    values = [value for value in values if value is not None]
    without_time_zone = isinstance(data_type, TimestampNTZType)
    rendered = [timestamp_literal(value, without_time_zone) if isinstance(value, datetime.datetime)
                else literal(value) for value in values]
    if None in rendered or NEEDS_HEX.search(column) or "`" in column:
        condition = F.col(f"`{column}`").isin(values)
        return condition | F.col(f"`{column}`").isNull() if with_null else condition
    parts = [f"{quoted(column)} IN ({', '.join(rendered)})"] if rendered else []
    if with_null:
        parts.append(f"{quoted(column)} IS NULL")
    return F.expr(" OR ".join(parts) or "false")
