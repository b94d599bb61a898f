"""Joins planned in one partition: no exchange and no broadcast.

Under adaptive execution every exchange and every broadcast is a Spark job of its own,
which on the few rows of a small run costs more than the work. Two frames of one
partition each join where they are, since a single partition satisfies every
distribution. A caller gathers both sides only when the catalog bounds what they scan.

A semi- or anti-join would read better, but Spark's optimizer moves a one-partition
`coalesce` above it, and the join then shuffles both sides again: a left outer join
with a marker column keeps the plan as it is built here.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from offset_assets.versioned.key_joins import join_on_keys

_FOUND = "__key_found"  # the marker of `matching_in_place` and `unmatched_in_place`


def flag_matches(df: DataFrame, keys: DataFrame, on: Sequence[str], flag: str, nullable: Collection[str],
                 hint: str = "shuffle_hash", in_place: bool = True) -> DataFrame:
    """`df` with a boolean column `flag`: true where its `on` columns equal those of a
    row of `keys` (distinct on `on`), false elsewhere; a NULL in a column of `nullable`
    matches a NULL (`on` are key columns, `key_joins.py`).

    `in_place`: both sides are gathered into one partition and joined there by the
    strategy `hint` (no exchange, no broadcast); otherwise Spark plans the join."""
    marked = keys.select(*on).withColumn(flag, F.lit(True))
    if in_place:
        df, marked = df.coalesce(1), marked.coalesce(1).hint(hint)
    return join_on_keys(df, marked, on, "left", nullable).withColumn(flag, F.col(flag).isNotNull())


def matching_in_place(df: DataFrame, keys: DataFrame, on: Sequence[str], nullable: Collection[str],
                      hint: str = "shuffle_hash") -> DataFrame:
    """Rows of `df` whose `on` columns match a row of `keys`: a semi-join in one partition."""
    return flag_matches(df, keys, on, _FOUND, nullable, hint).where(F.col(_FOUND)).drop(_FOUND)


def unmatched_in_place(df: DataFrame, keys: DataFrame, on: Sequence[str], nullable: Collection[str],
                       hint: str = "shuffle_hash") -> DataFrame:
    """Rows of `df` whose `on` columns match no row of `keys`: an anti-join in one partition."""
    return flag_matches(df, keys, on, _FOUND, nullable, hint).where(~F.col(_FOUND)).drop(_FOUND)
