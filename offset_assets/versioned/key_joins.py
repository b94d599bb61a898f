"""Joins on key columns, where NULL is a key value like any other.

SQL's `=` never matches NULL, so a join `on=[columns]` drops every row whose key holds
one: a NULL key would never find its own actual version, its meta or its batch, and its
rows would be skipped without a word. Keys are therefore matched with `<=>` (equal, or
both NULL). Spark plans a join on `<=>` as an equi-join (on `coalesce(column, default)`
and `isnull(column)`), so broadcast, hash and sort-merge joins still apply, and a join
hint on either side still holds.

A reference's join value is not a key: its joins keep SQL's `=`, so a NULL there joins
nothing, as in SQL (`engine/candidates.py`, `engine/loading.py`).
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from offset_assets.versioned.sql_text import all_of, quoted

_RIGHT = "__right_key_"  # the right side's key columns, renamed for the join


def same_keys(on: Sequence[str], right_prefix: str = _RIGHT) -> Column:
    """`left.c <=> right.c` for every column `c` of `on`, the right side's key columns
    named `right_prefix + c`."""
    return F.expr(all_of(f"{quoted(c)} <=> {quoted(right_prefix + c)}" for c in on))


def join_on_keys(left: DataFrame, right: DataFrame, on: Sequence[str], how: str = "inner") -> DataFrame:
    """`left.join(right, on=list(on), how=how)` with `<=>` for `=`: a NULL key matches a
    NULL key. A semi- or anti-join returns `left`'s columns; an inner or left join
    `left`'s columns (the key columns `left`'s, equal to `right`'s where they matched),
    then `right`'s others. The right side's keys are renamed, not asked of its schema (a
    Spark Connect client would ask the server), and a hint on it stays (Spark carries
    hints through projections)."""
    renamed = right.withColumnsRenamed({c: _RIGHT + c for c in on})
    joined = left.join(renamed, same_keys(on), how)
    if how in ("left_semi", "semi", "leftsemi", "left_anti", "anti", "leftanti"):
        return joined
    return joined.drop(*[_RIGHT + c for c in on])
