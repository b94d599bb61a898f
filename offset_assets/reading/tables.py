"""`VersionedTables`: the versioned tables of a control plane, read by name with Spark.

A reader names a table; its primary key, schema and files come from the delta catalog:

    tables = VersionedTables(spark, plane)
    tables.read("posts")                                   # the actual state
    tables.read("posts", as_of_delta=3)                    # as delta 3 left it
    tables.read("posts", as_of="2026-11-28 12:00:00")      # as a reader saw it then
    tables.changes("posts", since_delta=3)                 # every version deltas 4.. wrote
    tables.sql("SELECT ... FROM posts FOR SYSTEM_TIME AS OF DELTA_NUM 3 JOIN profiles ...")
    tables.register_views()                                # each table a temp view of its actual state

Every call pins the catalog state once (`state.py`) and reads committed deltas up to it
through the versioned tables' own reads (`VersionedTable.read_actual`, `read_started_in`,
`read_finished_in`, `TableReader.history`). The DataFrames it returns are plans over
named files, so later commits do not change them, locally and over Spark Connect alike.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pyspark.sql import DataFrame, SparkSession

from offset_assets.control_plane.database import ControlPlane, connect
from offset_assets.control_plane.delta_catalog import DeltaCatalog
from offset_assets.reading.clause_checks import check_clause, check_query, uncommitted_refusal
from offset_assets.reading.errors import FilesRemovedError
from offset_assets.reading.state import CatalogState, Instant, epoch_seconds, parse_timestamp, table_spec
from offset_assets.reading.statements import check_reads_only
from offset_assets.reading.system_time import ClauseKind, SystemTimeClause, parse_system_time
from offset_assets.versioned.errors import VersionedTableError
from offset_assets.versioned.hot_delta import HotDelta
from offset_assets.versioned.layout import DELTAS_DIR, SNAPSHOTS_DIR
from offset_assets.versioned.registered import open_registered_table
from offset_assets.versioned.table import VersionedTable

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["VersionedTables", "check_query", "to_arrow"]

# Spark's error conditions of a file that its plan named and that is gone.
_MISSING_FILE_CONDITIONS = ("FAILED_READ_FILE", "PATH_NOT_FOUND")
_TABLE_PATH = re.compile(rf"(\S+?)/(?:{DELTAS_DIR}|{SNAPSHOTS_DIR})/[0-9]{{12}}-[0-9a-f]+")


class VersionedTables:
    """The versioned tables of the control plane `plane` (a `ControlPlane` or its URL),
    read by name in the Spark session `spark` (classic or Spark Connect): the delta
    catalog knows each table's key, schema and files.

    `read(name, as_of_delta=..., as_of=...)` is the actual state, `changes(name,
    since_delta=... | since=...)` the versions written since, `sql(query)` Spark SQL with
    Prostore's `FOR SYSTEM_TIME` clauses, `register_views()` every table as a temp view.
    Each call reads one committed catalog state. `warehouse` is only a fallback: reads
    open the files the catalog names, and a table's warehouse is taken from them."""

    def __init__(self, spark: SparkSession, plane: ControlPlane | str, warehouse: str | None = None) -> None:
        self.spark = spark
        self.plane = connect(plane, create=False) if isinstance(plane, str) else plane
        self.catalog = DeltaCatalog(self.plane)
        self.warehouse = warehouse

    def names(self) -> list[str]:
        """Every versioned table of the control plane (a transformation's meta included)."""
        return self.catalog.tables()

    def table(self, name: str) -> VersionedTable:
        """The versioned table `name` as the catalog registered it (`UnknownTableError`
        listing the tables otherwise)."""
        table_spec(self.catalog, name)
        table = open_registered_table(self.spark, self.plane, name, self._warehouse_of(name))
        assert table is not None  # registered: checked above
        return table

    # -- reads -----------------------------------------------------------------------

    def read(self, name: str, as_of_delta: int | None = None, as_of: str | Instant | None = None) -> DataFrame:
        """The actual state of table `name`: as of committed delta `as_of_delta`, or as a
        reader saw it at `as_of` (ISO 8601 text, in the session's time zone unless it names
        an offset; a datetime; epoch seconds), else as of the last committed delta.
        Columns: the table's, then sys_from, sys_to, sys_op, update_ts."""
        if as_of_delta is not None and as_of is not None:
            raise VersionedTableError(name, "give as_of_delta or as_of, not both")
        table = self.table(name)
        state = CatalogState.pin(self.catalog, [name])
        if as_of is None:
            return table.read_actual(as_of_delta=state.as_of_delta(name, as_of_delta))
        ts = self._instant(as_of) if isinstance(as_of, str) else epoch_seconds(name, as_of)
        if ts is None:
            raise VersionedTableError(name, f"as_of {as_of!r} is not an ISO 8601 timestamp")
        return table.read_actual(as_of_delta=state.as_of_time(self.catalog, name, ts))

    def changes(self, name: str, since_delta: int | None = None, since: str | Instant | None = None) -> DataFrame:
        """Every version (upserts and the tombstones of deletes) that table `name`'s
        deltas after `since_delta` wrote, or that were committed at or after `since`
        (inclusive, as offsets are), up to the last committed delta; sys_to within them."""
        if (since_delta is None) == (since is None):
            raise VersionedTableError(name, "give since_delta or since, one of them")
        table = self.table(name)
        last = CatalogState.pin(self.catalog, [name]).last(name)
        if since_delta is not None:
            if isinstance(since_delta, bool) or not isinstance(since_delta, int) or since_delta < 0:
                raise VersionedTableError(name, f"since_delta must be an integer >= 0, got {since_delta!r}")
            return table.reader.history(self.catalog.committed(name, after_delta=since_delta, up_to_delta=last))
        ts = self._instant(since) if isinstance(since, str) else epoch_seconds(name, since)
        if ts is None:
            raise VersionedTableError(name, f"since {since!r} is not an ISO 8601 timestamp")
        return table.read_changes_since(ts, up_to_delta=last)

    def sql(self, query: str, args: Mapping[str, Any] | list[Any] | None = None,
            hot_deltas: Sequence[HotDelta] = ()) -> DataFrame:
        """Spark SQL `query`, in which a versioned table's name means its actual state and
        Prostore's clauses select its history, per table reference:
        `FOR SYSTEM_TIME AS OF DELTA_NUM n`, `AS OF '<timestamp>'` (ISO 8601, in the
        session's time zone unless it names an offset), `STARTED IN (d1, d2)` (the
        versions deltas d1..d2 created), `FINISHED IN (d1, d2)` (the tombstones of the
        keys they deleted), `STARTED TS ('t1', 't2')` and `FINISHED TS ('t1', 't2')` (the
        same for the deltas committed from t1 to t2), and `AS OF LATEST_UNCOMMITTED_DELTA`
        (the state a hot delta of `hot_deltas`, which the caller holds, leaves once
        committed). The whole query reads one catalog state; planning it starts no
        Spark job. `args` are Spark's own query parameters. A statement that writes is
        refused (`WriteRefusedError`): this reads."""
        check_reads_only(query)
        parsed = parse_system_time(query, self.names())
        if not parsed.reads:
            return self.spark.sql(query, args)
        state = CatalogState.pin(self.catalog, parsed.tables)
        tables = {name: self.table(name) for name in parsed.tables}
        hot = {delta.table.name: delta for delta in hot_deltas}
        frames = {placeholder: self._clause_read(tables[name], clause, state, hot.get(name))
                  for placeholder, (name, clause) in parsed.reads.items()}
        return self.spark.sql(parsed.text, args, **frames)

    def register_views(self, global_views: bool = False) -> dict[str, int]:
        """Register every table as a temporary view of its actual state (in the session's
        `global_temp` database with `global_views`, seen by every session of the Spark
        application, a Connect server's clients included), all at one catalog state;
        returns the delta each view shows. A view is a plan over the files of that state:
        later commits show after this is called again."""
        names = self.names()
        state = CatalogState.pin(self.catalog, names)
        for name in names:
            frame = self.table(name).read_actual(as_of_delta=state.last(name))
            if global_views:
                frame.createOrReplaceGlobalTempView(name)
            else:
                frame.createOrReplaceTempView(name)
        return dict(state.last_delta)

    # -- helpers -------------------------------------------------------------------------

    def _clause_read(self, table: VersionedTable, clause: SystemTimeClause | None, state: CatalogState,
                     hot: HotDelta | None) -> DataFrame:
        last = state.last(table.name)
        if clause is None:
            return table.read_actual(as_of_delta=last)
        if clause.kind is ClauseKind.AS_OF_UNCOMMITTED:
            if hot is None:
                raise uncommitted_refusal(clause, self.catalog)
            return table.read_latest_uncommitted(hot)
        check_clause(clause, last)
        if clause.kind is ClauseKind.AS_OF_DELTA:
            return table.read_actual(as_of_delta=clause.delta)
        if clause.kind is ClauseKind.AS_OF_TIME:
            ts = self._instant(clause.timestamp)
            return table.read_actual(as_of_delta=state.as_of_time(self.catalog, table.name, ts))
        if clause.kind in (ClauseKind.STARTED_TS, ClauseKind.FINISHED_TS):
            first, last_ts = (self._instant(text) for text in clause.timestamps)
            deltas = state.committed_between(self.catalog, table.name, first, last_ts)
            started = clause.kind is ClauseKind.STARTED_TS
            return table.reader.started_in(deltas) if started else table.reader.finished_in(deltas)
        if clause.kind is ClauseKind.STARTED_IN:
            return table.read_started_in(*clause.deltas)
        return table.read_finished_in(*clause.deltas)

    def _instant(self, text: str) -> float | None:
        """Epoch seconds of ISO 8601 timestamp `text`, in the session's time zone unless
        it names an offset; None when it is not one. Parsed here, not by a Spark query:
        a query of a literal still costs a Spark job."""
        return parse_timestamp(text, self.spark.conf.get("spark.sql.session.timeZone"))

    def _warehouse_of(self, name: str) -> str | None:
        """The warehouse holding table `name`'s files, from its newest delta's path (a
        table's deltas and snapshots share one root)."""
        newest = self.catalog.deltas(name, limit=1)
        marker = f"/{name}/{DELTAS_DIR}/"
        if newest and marker in newest[0].data_path:
            return newest[0].data_path[:newest[0].data_path.rindex(marker)]
        return self.warehouse


def to_arrow(frame: DataFrame, limit: int | None = None) -> pa.Table:
    """The rows of `frame` (the first `limit` of them) as an Arrow table; a file its plan
    named that cleanup removed while it ran is `FilesRemovedError`, which a new read
    (planned on the catalog as it is now) does not meet."""
    try:
        return (frame if limit is None else frame.limit(limit)).toArrow()
    except Exception as exc:
        removed = files_removed(exc)
        if removed is None:
            raise
        raise removed from None


def files_removed(error: BaseException) -> FilesRemovedError | None:
    """`error` as `FilesRemovedError` when Spark raised it for a versioned table's file
    that is gone, else None."""
    condition = getattr(error, "getCondition", lambda: None)() or ""
    text = str(error)
    if not (condition.startswith(_MISSING_FILE_CONDITIONS) or "FileNotFoundException" in text):
        return None
    found = _TABLE_PATH.search(text)
    if found is None:
        return None
    table = found.group(1).rstrip("/").rsplit("/", 1)[-1]
    return FilesRemovedError(
        f"table {table!r}: {found.group(0)} was removed while this read ran (cleanup removes a snapshot "
        "once a newer one has superseded it for longer than its retention): run it again")
