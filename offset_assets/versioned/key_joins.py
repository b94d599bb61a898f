"""Joins on key columns, where NULL is a key value like any other.

SQL's `=` never matches NULL, so a join `on=[columns]` drops every row whose key holds
one: a NULL key would never find its own actual version, its meta or its batch, and its
rows would be skipped without a word. A key column that can hold NULL is therefore
matched with `<=>` (equal, or both NULL). Spark plans a join on `<=>` as an equi-join (on
`coalesce(column, default)` and `isnull(column)`), so broadcast, hash and sort-merge
joins still apply and a join hint on either side still holds; but a side already
partitioned by the column (an aggregate, a window by key) no longer satisfies the join's
distribution and is shuffled again, which in a run beyond the small-run limit is a
Spark job more under adaptive execution. So only the columns that can hold NULL pay it:
those the schema declares nullable. A column declared not nullable refuses NULL at every
write (`writes.py`), so `=` finds exactly what `<=>` would, in the plan it always had.

A reference's join value is not a key: its joins keep SQL's `=`, so a NULL there joins
nothing, as in SQL (`engine/changed_keys/candidates.py`, `engine/loading.py`).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from offset_assets.versioned.sql_text import all_of, quoted

_RIGHT = "__right_key_"  # the right side's key columns, renamed for the join
_SEMI_OR_ANTI = frozenset({"left_semi", "semi", "leftsemi", "left_anti", "anti", "leftanti"})


def nullable_columns(schema: StructType) -> frozenset[str]:
    """The columns of `schema` declared nullable: the only ones that can hold NULL."""
    return frozenset(f.name for f in schema.fields if f.nullable)


def join_on_keys(left: DataFrame, right: DataFrame, on: Sequence[str], how: str,
                 nullable: Collection[str]) -> DataFrame:
    """`left.join(right, on=list(on), how=how)`, where a NULL in a column of `on` that is
    in `nullable` matches a NULL (`<=>`). Without such a column, that very join. With
    one, a semi- or anti-join returns `left`'s columns; an inner or left join `left`'s
    columns (the key columns `left`'s, equal to `right`'s where they matched), then
    `right`'s others. The right side's keys are renamed, not asked of its schema (a Spark
    Connect client would ask the server), and a hint on it stays (Spark carries hints
    through projections)."""
    if not any(c in nullable for c in on):
        return left.join(right, on=list(on), how=how)
    renamed = right.withColumnsRenamed({c: _RIGHT + c for c in on})
    condition = all_of(f"{quoted(c)} {'<=>' if c in nullable else '='} {quoted(_RIGHT + c)}" for c in on)
    joined = left.join(renamed, F.expr(condition), how)
    if how in _SEMI_OR_ANTI:
        return joined
    return joined.drop(*[_RIGHT + c for c in on])
