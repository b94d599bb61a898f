"""Building the read DataFrames of a versioned table from the files the catalog names.

Every read returns the data columns plus `sys_from`, `sys_to`, `sys_op`, `update_ts`.
Files store `sys_from` and `sys_op`; the rest is derived here:
- `update_ts` is the commit_ts of delta `sys_from`, looked up in an array literal built
  from the catalog (an expression: no join, no Spark job of its own); a snapshot written
  by compaction stores it, so an actual read looks up only the deltas after the snapshot
  and its literal stays as short as the table's recent history, however old the table;
- `sys_to` is the next version's `sys_from - 1`, among the versions the read covers:
  a read presents history as it stood at its upper delta, so a result never changes
  when later deltas are committed (the engine's run snapshots rely on that).

The actual state at delta n is the latest version of each key among the snapshot below
n (if any) and the deltas after it, without tombstones. Filters on primary-key columns
apply to every file before the latest version is chosen (all versions of a key share
them); filters on other columns apply to the snapshot before (it holds one version per
key) and to the deltas after, so a filtered read of a compacted table prunes the large
snapshot scan with Parquet filters. Both match NULL as a value (`where_in` with None, a
`keys` row holding NULL), and a later version replaces a snapshot row of a NULL key as
any other: a NULL key is a key (`key_joins.py`).

Inside `broadcast_limit(rows)` (the engine builds its reads there) the anti-join that
drops the snapshot rows replaced by later deltas is planned from the catalog, not from
Spark's size estimate: when the whole read (snapshot rows and the deltas' versions) is
bounded within `rows`, there is no join: the newest version of each key among both is
ranked in one partition (no exchange, no broadcast); when only the deltas are, Spark may
broadcast the replaced keys; otherwise it is a shuffled sort-merge join, so no JVM holds
them whole. Versions bounded that way are ranked (newest per key) in one partition,
without an exchange. Outside it, Spark decides as usual.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from functools import reduce

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import DoubleType, StructField, StructType

from offset_assets.control_plane.delta_catalog.records import DeltaInfo, SnapshotInfo
from offset_assets.lazy_session import LazySession, SessionSource
from offset_assets.versioned.errors import VersionedTableError
from offset_assets.versioned.in_filter import in_values
from offset_assets.versioned.key_joins import join_on_keys, nullable_columns
from offset_assets.versioned.layout import OP_DELETE, OP_UPSERT, SYS_FROM, SYS_OP, SYS_TO, UPDATE_TS
from offset_assets.versioned.sql_text import case_when, quoted
from offset_assets.versioned.table_schema import file_schema

_BROADCAST_LIMIT: ContextVar[int | None] = ContextVar("offset_assets_broadcast_limit", default=None)


@contextmanager
def broadcast_limit(rows: int | None) -> Iterator[None]:
    """Reads built in the block broadcast a relation only when the catalog bounds it
    within `rows` rows (None: Spark decides by its size estimate)."""
    token = _BROADCAST_LIMIT.set(rows)
    try:
        yield
    finally:
        _BROADCAST_LIMIT.reset(token)


def versions_bound(deltas: Sequence[DeltaInfo]) -> int | None:
    """The versions `deltas` wrote, from the catalog's row counts (None when one is unknown)."""
    total = 0
    for d in deltas:
        if d.rows_upserted is None or d.rows_deleted is None:
            return None
        total += d.rows_upserted + d.rows_deleted
    return total


def actual_bound(snapshot: SnapshotInfo | None, deltas_after: Sequence[DeltaInfo]) -> int | None:
    """The versions an actual read of `snapshot` and `deltas_after` scans, from the
    catalog's row counts (None when one is unknown)."""
    after = versions_bound(deltas_after)
    return None if after is None else after + (snapshot.row_count if snapshot is not None else 0)


@dataclass(frozen=True)
class ActualFilter:
    """Row filters of an actual read: `where_in` (column -> values) and `keys` (semi-join)."""

    where_in: Mapping[str, Sequence] | None = None
    keys: DataFrame | None = None


class TableReader:
    """Read plans over the committed files of one table."""

    def __init__(self, spark: SessionSource, name: str, schema: StructType, primary_key: Sequence[str]):
        self._session = LazySession(spark)
        self.name = name
        self.schema = schema
        self.primary_key = list(primary_key)
        self.file_schema = file_schema(schema)
        self.snapshot_schema = StructType([*self.file_schema.fields, StructField(UPDATE_TS, DoubleType(), True)])
        self.nullable = nullable_columns(schema)  # the columns that can hold NULL, matched with `<=>`

    # -- building blocks ---------------------------------------------------------------


    @property
    def spark(self) -> SparkSession:
        return self._session.get()
    def scan(self, paths: Sequence[str], with_update_ts: bool = False) -> DataFrame:
        """The versions stored under `paths` (data columns, sys_op, sys_from; and the
        update_ts a snapshot stores when `with_update_ts`, null in files without it)."""
        schema = self.snapshot_schema if with_update_ts else self.file_schema
        if not paths:
            return self.spark.createDataFrame([], schema)
        # Recursive lookup: a delta folder holds one sub-folder per write; it also turns
        # off partition discovery, so folder names never become columns.
        return self.spark.read.schema(schema).option("recursiveFileLookup", "true").parquet(*paths)

    @staticmethod
    def update_ts_of(deltas: Sequence[DeltaInfo]) -> str:
        """update_ts of each version (SQL text): the commit_ts of its delta, looked up in
        an array literal indexed by delta number. An expression, not a join: a broadcast
        of even a tiny relation is a Spark job of its own, and every read needs this
        column. The literal is text, not a column per delta: a table keeps thousands of
        deltas, and a read must not cost a JVM call for each."""
        if not deltas:
            return "CAST(NULL AS DOUBLE)"
        base = min(d.delta_num for d in deltas)
        by_num = {d.delta_num: d.commit_ts for d in deltas}
        times = [by_num.get(num) for num in range(base, max(by_num) + 1)]
        # repr() of a float is the shortest text that parses back to the same double.
        lookup = "array({})".format(", ".join(
            "CAST(NULL AS DOUBLE)" if ts is None else f"{float(ts)!r}D" for ts in times))
        position = f"CAST({SYS_FROM} - {base} + 1 AS INT)"
        return case_when([(f"{position} BETWEEN 1 AND {len(times)}", f"element_at({lookup}, {position})")])

    def finish(self, versions: DataFrame, deltas: Sequence[DeltaInfo], sys_to: str,
               stored_update_ts: bool = False) -> DataFrame:
        """Add update_ts (looked up in `deltas`; with `stored_update_ts`, the column's own
        value where a snapshot stored one) and sys_to (SQL text); columns in the
        documented order. One projection, as text (`sql_text.py`): in classic PySpark
        each DataFrame step is analysed at once, and each Column call is a JVM round trip."""
        update_ts = self.update_ts_of(deltas)
        if stored_update_ts:
            update_ts = f"coalesce({UPDATE_TS}, {update_ts})"
        return versions.selectExpr(
            *[quoted(c) for c in self.schema.fieldNames()],
            SYS_FROM,
            f"CAST({sys_to} AS BIGINT) AS {SYS_TO}",
            SYS_OP,
            f"{update_ts} AS {UPDATE_TS}",
        )

    # -- reads -------------------------------------------------------------------------

    def actual(
        self,
        snapshot: SnapshotInfo | None,
        deltas_after: Sequence[DeltaInfo],
        spanned_deltas: Sequence[DeltaInfo],
        row_filter: ActualFilter,
    ) -> DataFrame:
        """Actual state from `snapshot` (or nothing) and the non-empty `deltas_after` it;
        `spanned_deltas`: those whose commit times the read looks up (`deltas_after` when
        the snapshot stores its rows' update_ts, else every non-empty delta)."""
        stored = snapshot is not None and snapshot.stores_update_ts
        state = self.actual_versions(snapshot, deltas_after, row_filter, with_update_ts=stored)
        return self.finish(state, spanned_deltas, "NULL", stored_update_ts=stored)

    def actual_versions(
        self,
        snapshot: SnapshotInfo | None,
        deltas_after: Sequence[DeltaInfo],
        row_filter: ActualFilter,
        with_update_ts: bool = False,
    ) -> DataFrame:
        """The stored columns (data, sys_op, sys_from; `with_update_ts`: and update_ts,
        null for rows of deltas) of the actual versions."""
        key_filters, value_filters = self._split_filters(row_filter)
        base = None
        if snapshot is not None:
            base = _apply(self.scan([snapshot.data_path], with_update_ts), key_filters + value_filters)
        live = None
        if deltas_after:
            versions = _apply(self.scan([d.data_path for d in deltas_after], with_update_ts), key_filters)
            limit = _BROADCAST_LIMIT.get()
            bound = versions_bound(deltas_after)
            bounded = limit is not None and bound is not None and bound <= limit
            whole = actual_bound(snapshot, deltas_after)  # `bound` plus the snapshot's rows
            if (base is not None and row_filter.keys is None and limit is not None
                    and whole is not None and whole <= limit):
                # The whole read within the limit (and no semi-join, which Spark would move
                # a `coalesce` across): the newest version of each key among the snapshot's
                # row and the deltas' versions, ranked in one partition. No join drops the
                # replaced snapshot rows: even a broadcast of the deltas' keys is a job of
                # its own, and a join's size estimate (the product of its sides) would make
                # every join above it shuffle.
                merged = self._latest(base.unionByName(versions).coalesce(1))
                return _apply(merged.where(f"{SYS_OP} = {OP_UPSERT}"), value_filters)
            if len(deltas_after) > 1:
                # Versions the catalog bounds within the limit are ranked in one partition:
                # the window plans no exchange (a Spark job of its own under adaptive execution).
                latest = self._latest(versions.coalesce(1) if bounded else versions)
            else:
                latest = versions
            if base is not None:
                # The keys the deltas wrote, from their scan, not from `latest`: the same
                # keys, without ranking them a second time on the join's other side.
                replaced = versions.select(*self.primary_key)
                if limit is not None and not bounded:
                    replaced = replaced.hint("merge")  # shuffled: not held whole by one JVM
                base = join_on_keys(base, replaced, self.primary_key, "left_anti", self.nullable)
            live = _apply(latest.where(f"{SYS_OP} = {OP_UPSERT}"), value_filters)
        parts = [p for p in (base, live) if p is not None]
        return reduce(DataFrame.unionByName, parts) if parts else self.scan([], with_update_ts)

    def history(self, deltas: Sequence[DeltaInfo], sys_op: int | None = None) -> DataFrame:
        """All versions written by `deltas`, sys_to within them; optionally one sys_op only."""
        readable = [d for d in deltas if not d.is_empty]
        versions = self.scan([d.data_path for d in readable])
        keys = ", ".join(quoted(c) for c in self.primary_key)
        following = f"lead({SYS_FROM}) OVER (PARTITION BY {keys} ORDER BY {SYS_FROM})"
        result = self.finish(versions, readable, f"{following} - 1")
        if sys_op is not None:
            result = result.where(f"{SYS_OP} = {int(sys_op)}")
        return result

    def started_in(self, deltas: Sequence[DeltaInfo]) -> DataFrame:
        return self.history(deltas, OP_UPSERT)

    def finished_in(self, deltas: Sequence[DeltaInfo]) -> DataFrame:
        return self.history(deltas, OP_DELETE)

    # -- helpers -----------------------------------------------------------------------

    def _latest(self, versions: DataFrame) -> DataFrame:
        keys = ", ".join(quoted(c) for c in self.primary_key)
        rank = f"row_number() OVER (PARTITION BY {keys} ORDER BY {SYS_FROM} DESC)"
        return versions.withColumn("_rank", F.expr(rank)).where("_rank = 1").drop("_rank")

    def _split_filters(self, row_filter: ActualFilter) -> tuple[list, list]:
        """(filters on primary-key columns only, filters touching other columns)."""
        key_filters: list = []
        value_filters: list = []
        columns = self.schema.fieldNames()
        for column, values in (row_filter.where_in or {}).items():
            if column not in columns:
                raise VersionedTableError(self.name, f"where_in column {column!r} is not in {columns}")
            condition = in_values(column, values, self.schema[column].dataType)
            (key_filters if column in self.primary_key else value_filters).append(condition)
        if row_filter.keys is not None:
            on = [c for c in row_filter.keys.columns if c in columns]
            if not on:
                raise VersionedTableError(
                    self.name,
                    f"keys has none of the table's columns {columns}: {row_filter.keys.columns}",
                )
            semi = row_filter.keys.select(*on)
            (key_filters if set(on) <= set(self.primary_key) else value_filters).append((semi, on, self.nullable))
        return key_filters, value_filters


def _apply(df: DataFrame, filters: Sequence) -> DataFrame:
    for item in filters:
        if isinstance(item, tuple):
            keys, on, nullable = item
            df = join_on_keys(df, keys, on, "left_semi", nullable)
        else:
            df = df.where(item)
    return df
