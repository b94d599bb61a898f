"""SQL over the versioned tables without a JVM: DuckDB, embedded in this process, over
the Arrow tables of one pinned catalog state.

For a shell, a notebook or a BI tool over a local warehouse, where a Spark driver's start
costs more than the query: the query is the same Spark SQL `VersionedTables.sql` runs, its
clauses found and rewritten the same way (`system_time.py`), each read done without a JVM
(`arrow.py`: the actual state; `ArrowHistory`: `STARTED` / `FINISHED`), all at the state
`CatalogState.pin` took in one statement. sqlglot translates the rewritten text from
Spark's dialect to DuckDB's (back-quoted names, double-quoted strings, function names), so
a query means the same on both engines; what sqlglot cannot read or DuckDB cannot run is
`EmbeddedQueryError`, and `offset-assets sql --engine auto` then runs it on Spark.

Every table a query reads is held in memory (`arrow.py`'s `max_bytes` bounds each): large
tables, clusters and remote warehouses stay Spark's (`choose_engine`).
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

from offset_assets.control_plane.database import ControlPlane, connect
from offset_assets.control_plane.delta_catalog import DeltaCatalog
from offset_assets.reading.arrow import DEFAULT_MAX_BYTES, ArrowHistory, ArrowRead
from offset_assets.reading.clause_checks import check_clause, uncommitted_refusal
from offset_assets.reading.errors import EmbeddedQueryError
from offset_assets.reading.sql_tokens import tokenize
from offset_assets.reading.state import CatalogState, parse_timestamp
from offset_assets.reading.statements import check_reads_only
from offset_assets.reading.system_time import PLACEHOLDER_PREFIX, ClauseKind, SystemTimeClause, parse_system_time
from offset_assets.versioned.layout import OP_DELETE, OP_UPSERT

__all__ = ["LOCAL_VERSIONS_LIMIT", "choose_engine", "duckdb_sql"]

# `choose_engine` picks DuckDB for the tables of a query whose committed deltas hold at
# most this many versions in all (the catalog's counts): what the reads without a JVM
# hold in memory comfortably (docs/reading.md measures 70 MB of Arrow for 1M plain rows).
LOCAL_VERSIONS_LIMIT = 2_000_000
LOOKS_AT_SPARK = frozenset({"DESCRIBE", "DESC", "SHOW", "EXPLAIN"})
# Timestamps are read and shown in UTC, as the project's Spark sessions read them.
SESSION_TIME_ZONE = "UTC"


def duckdb_sql(plane: ControlPlane | str, query: str, max_bytes: int | None = DEFAULT_MAX_BYTES) -> pa.Table:
    """The rows of Spark SQL `query` over the versioned tables of `plane`, run by DuckDB
    without a JVM: the clauses of `VersionedTables.sql` (but `AS OF
    LATEST_UNCOMMITTED_DELTA`, which only the hot delta's writer reads), one committed
    catalog state for the whole query, the same rows and column types. A table whose
    files exceed `max_bytes` is `TableTooLargeError`; a query DuckDB cannot read or run,
    `EmbeddedQueryError`."""
    check_reads_only(query)
    plane = connect(plane, create=False) if isinstance(plane, str) else plane
    catalog = DeltaCatalog(plane)
    if tokenize(query)[0].text.upper() in LOOKS_AT_SPARK:
        raise EmbeddedQueryError("DESCRIBE, SHOW and EXPLAIN look at Spark's catalog and plans: run them on Spark")
    # The tables named without a clause are registered under their own names, so a CTE of
    # the query's own shadows one as in Spark (sqlglot merges nested WITH lists).
    parsed = parse_system_time(query, catalog.tables(), plain_as_ctes=False)
    state = CatalogState.pin(catalog, parsed.tables)
    relations = {
        placeholder: _clause_read(catalog, state, table, clause, max_bytes)
        for placeholder, (table, clause) in parsed.reads.items()
    }
    text = _duckdb_text(parsed.text.format(**{name: name for name in relations if name.startswith(PLACEHOLDER_PREFIX)}))
    import duckdb  # here: a process that never runs this path does not load it

    with duckdb.connect() as con:
        con.execute(f"SET TimeZone = '{SESSION_TIME_ZONE}'")
        for placeholder, rows in relations.items():
            con.register(placeholder, rows)
        try:
            result = con.sql(text)
            return result.arrow().read_all() if result is not None else pa.table({})
        except duckdb.Error as exc:
            raise EmbeddedQueryError(f"DuckDB: {' '.join(str(exc).split())}") from None


def choose_engine(plane: ControlPlane, query: str, limit: int = LOCAL_VERSIONS_LIMIT) -> str:
    """ "duckdb" when every versioned table `query` reads has its files on this machine and
    together they hold at most `limit` versions (the catalog's counts), else "spark"."""
    catalog = DeltaCatalog(plane)
    tables = parse_system_time(query, catalog.tables()).tables
    if not all(_is_local(catalog, table) for table in tables):
        return "spark"
    stored = catalog.versions_stored(tables)
    if any(count is None for count in stored.values()) or sum(stored.values()) > limit:
        return "spark"
    return "duckdb"


def _clause_read(
    catalog: DeltaCatalog, state: CatalogState, table: str, clause: SystemTimeClause | None, max_bytes: int | None
) -> pa.Table:
    last = state.last(table)
    if clause is None:
        return ArrowRead.at(catalog, table, last, max_bytes).read()
    if clause.kind is ClauseKind.AS_OF_UNCOMMITTED:
        raise uncommitted_refusal(clause, catalog)
    check_clause(clause, last)
    if clause.kind is ClauseKind.AS_OF_DELTA:
        return ArrowRead.at(catalog, table, clause.delta, max_bytes).read()
    if clause.kind is ClauseKind.AS_OF_TIME:
        delta = state.as_of_time(catalog, table, parse_timestamp(clause.timestamp, SESSION_TIME_ZONE))
        return ArrowRead.at(catalog, table, delta, max_bytes).read()
    if clause.kind in (ClauseKind.STARTED_TS, ClauseKind.FINISHED_TS):
        first, last_ts = (parse_timestamp(text, SESSION_TIME_ZONE) for text in clause.timestamps)
        deltas: Sequence = state.committed_between(catalog, table, first, last_ts)
    else:
        d1, d2 = clause.deltas
        deltas = catalog.committed(table, after_delta=d1 - 1, up_to_delta=d2)
    started = clause.kind in (ClauseKind.STARTED_IN, ClauseKind.STARTED_TS)
    return ArrowHistory.at(catalog, table, deltas, max_bytes).read(OP_UPSERT if started else OP_DELETE)


def _duckdb_text(spark_sql: str) -> str:
    """Spark SQL text in DuckDB's dialect (sqlglot), or `EmbeddedQueryError`."""
    import sqlglot
    from sqlglot.errors import SqlglotError

    try:
        statements = sqlglot.transpile(spark_sql, read="spark", write="duckdb")
    except SqlglotError as exc:
        raise EmbeddedQueryError(f"not read as Spark SQL for DuckDB: {' '.join(str(exc).split())[:300]}") from None
    if len(statements) != 1:
        raise EmbeddedQueryError("DuckDB runs one query at a time")
    return statements[0]


def _is_local(catalog: DeltaCatalog, table: str) -> bool:
    """Whether table `table`'s files are on this machine: its newest delta's folder is a
    path or a `file:` URI."""
    newest = catalog.deltas(table, limit=1)
    if not newest:
        return True
    path = newest[0].data_path
    return "://" not in path or path.startswith("file:")
