"""`column IN (values)` built in one call to the JVM.

`Column.isin(values)` creates one literal per value, each a call from Python to the JVM:
about 0.6 ms a value on the test machine, so 6 s to build the filter of 10,000 keys, and
a run builds several (the primary read, the stray-row check, the previous output). That
made a run of 5,000 changed keys cost 2.5x a run of 20,000, which look keys up by a
semi-join instead. The SQL text of the same IN is parsed in one call.

Each value is rendered as the literal `F.lit(value)` would make (Python `str` a string,
`int` an int or a bigint, `float` a double, `bool` a boolean, `None` a null), so Spark
resolves and coerces the expression exactly as it does the `isin` it replaces. Strings
that SQL text could misread (a quote, a backslash, a `$` that variable substitution would
act on) are spelled as UTF-8 bytes in hex. A list holding anything else (dates, decimals,
bytes, non-finite floats), or a column name with a `$` or a backtick, falls back to
`isin`: correct, only slower.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable

from pyspark.sql import Column
from pyspark.sql import functions as F

_NEEDS_HEX = re.compile(r"['\\$]")
_INT_MIN, _INT_MAX = -(2**31), 2**31 - 1
_LONG_MIN, _LONG_MAX = -(2**63), 2**63 - 1


def in_values(column: str, values: Iterable[object]) -> Column:
    """`column IN (values)`, the same condition as `F.col(column).isin(values)`."""
    values = list(values)
    rendered = [_literal(value) for value in values]
    if not values or None in rendered or _NEEDS_HEX.search(column) or "`" in column:
        return F.col(f"`{column}`").isin(values)
    return F.expr(f"`{column}` IN ({', '.join(rendered)})")


def _literal(value: object) -> str | None:
    """SQL text of the literal `F.lit(value)` makes; None when there is no safe text."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        value = int(value)  # a subclass (an IntEnum, say) may print itself otherwise
        if _INT_MIN <= value <= _INT_MAX:
            return f"({value})" if value < 0 else str(value)
        if _LONG_MIN <= value <= _LONG_MAX:
            return f"({value}L)" if value < 0 else f"{value}L"
        return None
    if isinstance(value, float):
        value = float(value)
        # repr() of a float is the shortest text that parses back to the same double.
        return f"({value!r}D)" if math.isfinite(value) else None
    if isinstance(value, str):
        value = str.__str__(value)
        if not _NEEDS_HEX.search(value):
            return f"'{value}'"
        # A quote or a backslash needs an escape, and whether Spark reads `\` as one
        # depends on spark.sql.parser.escapedStringLiterals; `${...}` is replaced by a
        # conf value (spark.sql.variable.substitute) before parsing: a key "${env:HOME}"
        # would match the home folder. The UTF-8 bytes in hex mean the same in all cases.
        try:
            return f"CAST(X'{value.encode('utf-8').hex()}' AS STRING)"
        except UnicodeEncodeError:
            return None
    return None
