"""Reading only the rows a run needs (the filtered join).

A run never reads a whole table to find a handful of rows: key values are collected
(they are few: the changed keys of one batch) and pushed down to the Parquet scan as an
IN filter. Above `pushdown_limit` distinct values the lookup becomes a semi-join, which
Spark still plans as a broadcast join against the (small) key set.
"""

from __future__ import annotations

from collections.abc import Mapping

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from offset_assets.versioned.table import VersionedTable

DEFAULT_PUSHDOWN_LIMIT = 10_000


def read_actual_matching(
    table: VersionedTable,
    values: DataFrame,
    columns: Mapping[str, str],
    as_of_delta: int | None,
    pushdown_limit: int = DEFAULT_PUSHDOWN_LIMIT,
) -> DataFrame:
    """Actual rows of `table` (as of `as_of_delta`) whose `columns` values occur in `values`.

    `columns` maps a column of `values` to the column of `table` it must equal.
    """
    wanted = values.select(*[F.col(src).alias(dst) for src, dst in columns.items()])
    wanted = wanted.where(" AND ".join(f"`{c}` IS NOT NULL" for c in columns.values())).distinct()
    if len(columns) == 1:
        (column,) = columns.values()
        rows = wanted.limit(pushdown_limit + 1).collect()
        if len(rows) <= pushdown_limit:
            found = [row[0] for row in rows]
            if not found:
                return table.read_actual(as_of_delta=as_of_delta).where(F.lit(False))
            return table.read_actual(as_of_delta=as_of_delta, where_in={column: found})
    return table.read_actual(as_of_delta=as_of_delta, keys=wanted)
