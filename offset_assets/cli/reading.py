"""`offset-assets show TABLE` and `offset-assets sql "SELECT ..."`: the rows of versioned
tables, from a shell.

`show` reads a table's actual state without a JVM (`offset_assets.reading.arrow`: the
catalog and the Parquet files, in seconds), through Spark when its files are beyond what
that read holds in memory. `sql` runs Spark SQL with Prostore's system-time clauses on
DuckDB embedded in the process (`offset_assets.reading.duckdb_sql`, no JVM) when the
tables are local and small, else with `VersionedTables.sql` on the session
`OFFSET_ASSETS_SPARK_REMOTE` / `OFFSET_ASSETS_SPARK_MASTER` name (a local driver by
default); `--engine` chooses. Both print the first `--limit` rows as an aligned table,
CSV or JSON lines. Neither imports PySpark or Dagster unless Spark runs the query.
"""

from __future__ import annotations

import base64
import csv
import datetime
import decimal
import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import click

from offset_assets.cli.base import clear_errors, main, open_control_plane, pandas_kept_out
from offset_assets.errors import OffsetAssetsError

if TYPE_CHECKING:
    import pyarrow as pa

FORMATS = ("table", "csv", "json")
ENGINES = ("auto", "duckdb", "spark")
# What `show` reads without a JVM (the no-JVM read's own default: 256 MiB of files).
DEFAULT_MAX_BYTES = 256 << 20
DEFAULT_LIMIT = 20
# A cell of the aligned table is cut to this many characters (CSV and JSON never are).
CELL_WIDTH = 60


class SparkQueryError(OffsetAssetsError):
    """Spark refused or failed a query (its own message, without the JVM's stack trace)."""


def _query_text(_ctx: click.Context, _param: click.Parameter, text: str) -> str:
    return sys.stdin.read() if text == "-" else text


limit_option = click.option("--limit", "-n", type=click.IntRange(min=0), default=DEFAULT_LIMIT, show_default=True,
                            help="Rows to print (0: every row).")
format_option = click.option("--format", "fmt", type=click.Choice(FORMATS), default="table", show_default=True,
                             help="An aligned table, CSV with a header, or one JSON object per row.")


@main.command("show")
@click.argument("table")
@click.option("--as-of", "as_of", default=None, metavar="DELTA|TIME",
              help="The state as of a committed delta number, or as a reader saw it at a time "
              "(ISO 8601, UTC unless it names an offset); default: the last committed delta.")
@limit_option
@format_option
@click.option("--max-bytes", type=click.IntRange(min=0), default=DEFAULT_MAX_BYTES, show_default=True,
              help="Read without a JVM up to this many bytes of files; a larger table through Spark.")
@click.pass_obj
@clear_errors
def show_command(obj: dict[str, Any], table: str, as_of: str | None, limit: int, fmt: str, max_bytes: int) -> None:
    """Print the actual state of versioned TABLE: its columns, then sys_from, sys_to,
    sys_op and update_ts. Read without a JVM when its files fit --max-bytes, else through
    Spark."""
    with pandas_kept_out(obj):
        from offset_assets.reading.arrow import ArrowRead
        from offset_assets.reading.errors import TableTooLargeError
        from offset_assets.reading.state import delta_or_time

        as_of_delta, as_of_time = delta_or_time(table, as_of) if as_of is not None else (None, None)
        plane = open_control_plane(obj)
        try:
            rows = ArrowRead.plan(plane, table, as_of_delta, as_of_time, max_bytes).read()
        except TableTooLargeError as exc:
            click.echo(f"{exc}: reading it through Spark", err=True)
            rows = None
    if rows is None:
        rows = _spark_rows(lambda tables: tables.read(table, as_of_delta, as_of_time), plane, limit)
    _print(rows, limit, fmt)


@main.command("sql")
@click.argument("query", callback=_query_text)
@limit_option
@format_option
@click.option("--engine", type=click.Choice(ENGINES), default="auto", show_default=True,
              help="duckdb: embedded, no JVM, the tables held in memory; spark: a Spark driver (or the Connect "
              "server the environment names); auto: duckdb when every table's files are on this machine and the "
              "catalog counts at most 2,000,000 versions, else spark (and spark when duckdb cannot run the query).")
@click.pass_obj
@clear_errors
def sql_command(obj: dict[str, Any], query: str, limit: int, fmt: str, engine: str) -> None:
    """Run Spark SQL QUERY ("-": read it from standard input) over the versioned tables
    and print its rows. A table's name means its actual state; per table reference,
    FOR SYSTEM_TIME AS OF DELTA_NUM n, AS OF '<timestamp>' (UTC), STARTED IN (d1, d2),
    FINISHED IN (d1, d2), STARTED TS ('t1', 't2') and FINISHED TS ('t1', 't2') select its
    history. The whole query reads one committed state; a statement that writes is refused."""
    rows = None
    with pandas_kept_out(obj):
        from offset_assets.reading.arrow_types import UnsupportedTypeError
        from offset_assets.reading.clause_checks import check_query
        from offset_assets.reading.duckdb_sql import choose_engine, duckdb_sql
        from offset_assets.reading.errors import EmbeddedQueryError, TableTooLargeError
        from offset_assets.reading.statements import check_reads_only

        plane = open_control_plane(obj)
        check_reads_only(query)
        check_query(plane, query)  # a mistyped clause is refused before any engine starts
        chosen = choose_engine(plane, query) if engine == "auto" else engine
        if chosen == "duckdb":
            try:
                rows = duckdb_sql(plane, query)
            except (EmbeddedQueryError, TableTooLargeError, UnsupportedTypeError) as exc:
                if engine == "duckdb":
                    raise
                # A query DuckDB cannot run (Spark's own functions, or a mistake) is Spark's
                # to run or refuse, with Spark's one line; tables DuckDB cannot hold are said.
                if not isinstance(exc, EmbeddedQueryError):
                    click.echo(f"{exc}: running it on Spark", err=True)
    if rows is None:
        rows = _spark_rows(lambda tables: tables.sql(query), plane, limit)
    _print(rows, limit, fmt)


def _spark_rows(frame_of: Any, plane: Any, limit: int) -> pa.Table:
    """The first `limit` + 1 rows (every row with 0) of the frame `frame_of(tables)`
    builds, on this process's Spark session; Spark's errors as one line."""
    from pyspark.errors import PySparkException

    from offset_assets.reading.tables import VersionedTables, to_arrow
    from offset_assets.spark import get_spark_session, is_connect_session

    # No progress bars or web UI for a command whose output is its rows.
    spark = get_spark_session(app_name="offset-assets-cli", conf={"spark.ui.showConsoleProgress": "false",
                                                                  "spark.ui.enabled": "false"})
    if not is_connect_session(spark):
        spark.sparkContext.setLogLevel("ERROR")
    try:
        with _quiet_query_context_loggers():
            return to_arrow(frame_of(VersionedTables(spark, plane)), limit + 1 if limit else None)
    except PySparkException as exc:
        # Spark's message without its plan or stack trace, on one line; positions are left
        # out: they would count in the text Spark ran, which the clauses rewrote.
        raise SparkQueryError(" ".join(exc.getMessage().split())) from None


@contextmanager
def _quiet_query_context_loggers() -> Iterator[None]:
    """PySpark logs a failed query's error to stderr as a JSON line before raising it;
    the command prints it once, as its error."""
    # PySparkLogger's own getLogger: a logger made by logging.getLogger first would be a plain
    # Logger, and PySpark's later calls with its extra fields (file=, line=) would fail on it.
    from pyspark.logger import PySparkLogger

    loggers = [PySparkLogger.getLogger(name) for name in ("SQLQueryContextLogger", "DataFrameQueryContextLogger")]
    before = [logger.disabled for logger in loggers]
    for logger in loggers:
        logger.disabled = True
    try:
        yield
    finally:
        for logger, disabled in zip(loggers, before, strict=True):
            logger.disabled = disabled


def _print(rows: pa.Table, limit: int, fmt: str) -> None:
    shown = rows.slice(0, limit) if limit else rows
    names = shown.column_names
    # Column by column, by position: a join's result may name two columns alike (`a.v`,
    # `b.v`, or both tables' `sys_from` in `SELECT *`), and rows taken as dicts by name
    # would print one column's values under both names.
    records = list(zip(*(column.to_pylist() for column in shown.columns), strict=True))
    if fmt == "csv":
        writer = csv.writer(sys.stdout, lineterminator="\n")
        writer.writerow(names)
        writer.writerows([["" if v is None else _text(v) for v in record] for record in records])
    elif fmt == "json":
        keys = json_keys(names)
        for record in records:
            click.echo(json.dumps(dict(zip(keys, record, strict=True)), default=_json_value))
    else:
        click.echo(_aligned(names, [[_cell(v) for v in record] for record in records]))
    if limit and rows.num_rows > limit:
        click.echo(f"(the first {limit} rows; --limit N for more, --limit 0 for all)", err=True)


def json_keys(names: list[str]) -> list[str]:
    """The keys of a JSON row: the column names, a repeated one numbered from its second
    occurrence (`v`, `v_2`), as a JSON object holds each key once."""
    keys: list[str] = []
    for name in names:
        key, n = name, 1
        while key in keys or (n > 1 and key in names):
            n += 1
            key = f"{name}_{n}"
        keys.append(key)
    return keys


def _aligned(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(line[i]) for line in [header, *rows]) for i in range(len(header))]
    return "\n".join("  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
                     for line in [header, *rows])


def _text(value: Any) -> str:
    if isinstance(value, (datetime.datetime, datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    return str(value)


def _cell(value: Any) -> str:
    text = "null" if value is None else _text(value).replace("\n", "\\n")
    return text if len(text) <= CELL_WIDTH else text[:CELL_WIDTH - 3] + "..."


def _json_value(value: Any) -> Any:
    if isinstance(value, decimal.Decimal):
        return str(value)
    return _text(value)
