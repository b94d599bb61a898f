"""The committed versions a write into a hot delta is classified against: its candidates.

They are the versions of its keys in the latest snapshot and the deltas after it. When
the catalog counts more than `WHOLE_SCAN_ROWS` of those, the scan is bounded by the
written keys first (one Spark job), so that Parquet skips the files (sorted by key) that
cannot hold them: by the min and max of the first key column, or its values for a write
of a few rows. A new id range written into a large table reads no file of it. A caller
that knows the range of its first key column (an id range's bounds) gives it instead: no
Spark job, no semi-join, and the written keys are checked against it as they are written
(`check_key_range`). Parquet's min and max ignore nulls, so a bound by key values also
reads the versions whose first key column is NULL (`IS NULL`, which Parquet answers from
its null counts) when that column may hold one: a NULL key is a key (`writes.py`) and
must meet its actual version. A small write does not semi-join its candidates with its
keys (no shuffle, no broadcast): the classification drops the rest, which for keys
spread over a large table means aggregating much of it in one task.

A replacing write (`writes.Replacement`) is given its keys instead: the committed
versions of those keys are its candidates, selected by the caller (an IN filter, or a
join with the keys), so they are read once, by the write's own job. A small one reads
them into its one partition when the catalog counts at most `ONE_TASK_ROWS` committed
versions (a join there needs no exchange); a larger table is scanned in parallel and only
the selected versions are shuffled into that partition.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import DateType, DecimalType, IntegralType, StringType, TimestampType

from offset_assets.local_frames import collect_instants, timestamp_columns
from offset_assets.versioned.errors import VersionedTableError
from offset_assets.versioned.hot_table import HotTable
from offset_assets.versioned.in_filter import in_values
from offset_assets.versioned.key_joins import join_on_keys, nullable_columns
from offset_assets.versioned.layout import ROWS_PER_FILE
from offset_assets.versioned.reads import versions_bound
from offset_assets.versioned.writes import Replacement

__all__ = ["Committed", "bounds_by_key_range", "check_key_range", "committed_before", "write_candidates"]

# A small write of at most this many rows bounds its candidates by its keys' values
# (an IN list), a larger one by their min and max.
IN_LIST_ROWS = 1_000
# Committed versions (the catalog's count) below which a write's candidates are read
# whole: bounding the scan by the written keys would cost a Spark job to save little.
WHOLE_SCAN_ROWS = 100_000
# Committed versions a small replacing write reads in its one task (no shuffle), about
# two of the files compaction writes; a larger table is scanned in parallel.
ONE_TASK_ROWS = 2 * ROWS_PER_FILE
# Column types whose Parquet statistics can bound a scan by a key's values.
_PRUNABLE = (IntegralType, StringType, DateType, TimestampType, DecimalType)

# The folders of the versions that may be actual before a delta, and the catalog's count
# of those versions (None when one is unknown).
Committed = tuple[list[str], int | None]


def committed_before(table: HotTable, delta_num: int) -> Committed | None:
    """The folders of the versions that may be actual before delta `delta_num` (the latest
    snapshot's and the deltas' after it) and the catalog's count of those versions (None
    when one is unknown); None when nothing is committed."""
    snapshot, after, _ = table.actual_sources(delta_num - 1)
    if snapshot is None and not after:
        return None
    paths = ([snapshot.data_path] if snapshot else []) + [d.data_path for d in after]
    listed = versions_bound(after)
    return paths, None if listed is None else listed + (snapshot.row_count if snapshot else 0)


def bounds_by_key_range(table: HotTable, key_range: tuple[Any, Any] | None) -> bool:
    """Whether a caller's `key_range` bounds the candidates' scan: given, and on a first
    key column whose Parquet statistics can bound it."""
    return key_range is not None and isinstance(table.schema[table.primary_key[0]].dataType, _PRUNABLE)


def write_candidates(table: HotTable, incoming: DataFrame, committed: Committed | None, *,
                     rows: int | None = None, small: bool = False, key_range: tuple[Any, Any] | None = None,
                     replacing: Replacement | None = None) -> DataFrame | None:
    """The committed versions (`committed`) `incoming` is classified against: those of the
    keys it replaces, those within the caller's `key_range`, or those of its keys (`rows`
    of them when the caller counted them; `small`: classified in one partition). None when
    nothing is committed."""
    if committed is None:
        return None
    paths, count = committed
    if replacing is not None:
        return _replaced(table, replacing, small, paths, count)
    if bounds_by_key_range(table, key_range):
        return _within_range(table, *key_range, paths)
    return _of_keys(table, incoming, rows, small, paths, count)


def check_key_range(table: HotTable, key_range: tuple[Any, Any], lowest: Any, highest: Any) -> None:
    """Refuse a write whose keys fall outside the range its caller gave: its candidates
    were bounded by it, so a key outside could have missed its actual version."""
    low, high = key_range
    if lowest is not None and (lowest < low or highest > high):
        raise VersionedTableError(
            table.name,
            f"{table.primary_key[0]!r} values {lowest!r}..{highest!r} fall outside the key range "
            f"{low!r}..{high!r} given for the write; nothing written",
        )


def _within_range(table: HotTable, low: Any, high: Any, paths: list[str]) -> DataFrame:
    """Committed versions under `paths` whose first key column lies in [low, high], or
    is NULL where the column may be: a filter Parquet answers from its statistics. Not
    semi-joined with the written keys: the classification drops the candidates of keys
    nobody writes."""
    first = table.schema[table.primary_key[0]]
    column = F.col(f"`{first.name}`")
    within = column.between(F.lit(low), F.lit(high))
    return table.reader.scan(paths).where(within | column.isNull() if first.nullable else within)


def _replaced(table: HotTable, replacing: Replacement, small: bool, paths: list[str],
              committed: int | None) -> DataFrame:
    """Committed versions under `paths` (`committed` of them) of the keys a write
    replaces. A small write is classified in one partition: its candidates are read
    into it (joined there with the keys, no exchange) when the catalog counts at most
    `ONE_TASK_ROWS` of them; a larger table is scanned in parallel and only the
    selected versions are gathered into one partition (a shuffle: one Spark job)."""
    scan = table.reader.scan(paths)
    if not small:
        return replacing.select(scan, False)
    if committed is not None and committed <= ONE_TASK_ROWS:
        return replacing.select(scan, True)
    return replacing.select(scan, False).repartition(1)


def _of_keys(table: HotTable, incoming: DataFrame, rows: int | None, small: bool, paths: list[str],
             committed: int | None) -> DataFrame:
    """Committed versions (under `paths`, `committed` of them) of the keys of
    `incoming` (`rows` rows, when the caller counted them). A small write is classified
    in one partition, where the candidates are not semi-joined with its keys (a join
    would be a shuffle or a broadcast, a Spark job of its own): the classification
    drops the keys nobody writes. Its candidates are bounded by the values of its first
    key column when it has at most `IN_LIST_ROWS` rows (a longer IN list costs more to
    parse than it saves), by their min and max otherwise."""
    pk = table.primary_key
    scan = table.reader.scan(paths)
    keys = incoming.select(*pk)
    nullable = nullable_columns(table.schema)
    if committed is not None and committed <= WHOLE_SCAN_ROWS:
        return scan if small else join_on_keys(scan, keys, pk, "left_semi", nullable)
    first = table.schema[pk[0]]
    if not isinstance(first.dataType, _PRUNABLE):
        return join_on_keys(scan, keys, pk, "left_semi", nullable)
    if not small:
        return join_on_keys(scan.where(_within(incoming, pk[0])), keys, pk, "left_semi", nullable)
    # One partition, no join: the classification drops the candidates of keys not written.
    if rows <= IN_LIST_ROWS:  # the first key column's values (a NULL among them: IS NULL)
        values = [row[0] for row in collect_instants(
            incoming.coalesce(1).select(pk[0]).distinct(), [pk[0]],
            timestamp_columns({pk[0]: first.dataType}))]
        return scan.where(in_values(pk[0], values, first.dataType))
    return scan.where(_within(incoming.coalesce(1), pk[0]))


def _within(incoming: DataFrame, column: str) -> Column:
    """`column` between the smallest and the largest value `incoming` has in it, or NULL
    when `incoming` has a NULL in it (one Spark job): a filter Parquet answers from its
    statistics (min and max, which ignore nulls, and null counts), skipping the files and
    row groups outside. No value (an empty write): no candidate."""
    name = f"`{column}`"
    low, high, nulls = incoming.agg(F.min(name), F.max(name), F.max(F.col(name).isNull())).first()
    condition = F.lit(False) if low is None else F.col(name).between(F.lit(low), F.lit(high))
    return condition | F.col(name).isNull() if nulls else condition
