"""A SQL source's range, read by Spark's executors in slices (the source: `sql.py`).

The driver plans a `SlicedRead`: the range's column, its bounds cut into slices
(sub-ranges of ids, sub-windows of time) and the columns with their reflected SQL
types. Spark runs one task per slice; the task opens its own connection to the source
and yields Arrow record batches of `fetch_size` rows. No row passes the driver: it plans
the slices, and the engine's write commits what the executors read.

The tasks are a range of slice numbers, each mapped to its slice's rows
(`slice_tasks.py`), not a Python data source, whose four kinds of Python daemon every
Spark Connect session started again (a session's first read of a 100-row range 3.3-3.8 s,
now 1.6-2.1 s; the next reads 0.15-0.22 s either way; 2-core machine, a fresh local
server).

Why Python and not Spark's JDBC reader:
- the rows go through the same SQLAlchemy dialect and column types the driver reflects
  (SQLite's text timestamps, numerics as `Decimal`), so the values are the ones the
  source's reflected schema promises, on every database SQLAlchemy reaches, with no
  JDBC driver jar to ship to the cluster;
- it works unchanged over Spark Connect (the function reaches the server pickled, the
  executors import this module);
- the slices are planned here, with the same boundary rule as the whole range, instead
  of JDBC's `partitionColumn`/`lowerBound`/`upperBound`, which leave the outer slices
  open-ended and know nothing of time windows.
Executors need this package, SQLAlchemy, the database's DBAPI driver and pyarrow in
their Python, and a path or address that reaches the database: a SQLite file only
works where the executors share the driver's file system.

A value its column's type cannot hold (SQLite keeps any value in any column: `'many'` or
2.5 in an INTEGER one, `'yesterday'` in a DATETIME one) is never read as a null, nor as
another value. A plain read fails on the first such row, naming its key, the column and
the value; a marked read (`SlicedRead.marked`) nulls the value and describes the record in
its `MALFORMED` column, for a job that quarantines it. The values are converted column by
column (`sql_values.py`): a whole column at once where its values convert exactly, one by
one where they may not: a range without such a value costs what it cost before.
"""

from __future__ import annotations

import contextlib
import json
import math
import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import sqlalchemy as sa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T
from sqlalchemy.exc import SQLAlchemyError

from offset_assets.control_plane.database import mask_url, sqlalchemy_url
from offset_assets.ranges.errors import MalformedValueError, SourceError
from offset_assets.ranges.sources.batch import MALFORMED, MALFORMED_TYPE, SHOWN_CHARS
from offset_assets.ranges.sources.slice_tasks import slice_tasks, whole_waves
from offset_assets.ranges.sources.sql_arrow import (
    NotExact,
    arrow_backend,
    cast_column,
    misfit_condition,
    python_values,
    read_arrow_slice,
)
from offset_assets.ranges.sources.sql_values import (
    Processor,
    column_array,
    infinite_dates_as_text,
    processed,
    read_type,
)

if TYPE_CHECKING:
    import pyarrow as pa

# Below this many rows a slice costs more in connection and task start-up than it saves.
MIN_ROWS_PER_SLICE = 10_000

# How a SQL range is cut into slices: by id, or by time (not the planners' `RangeKind`,
# the kind of a job's ranges).
SliceKind = Literal["id", "time"]

_engines: dict[str, sa.Engine] = {}
_engines_lock = threading.Lock()


def source_engine(url: str) -> sa.Engine:
    """One engine per source URL and process (the driver's, or an executor's Python worker).

    A SQLite file is opened read-only and without a pool (`sqlite_file_reader`): a read
    never creates a missing file, and a long-lived process (the sensor daemon) reads the
    file that is in place now, also one put there or replaced after its first read."""
    with _engines_lock:
        engine = _engines.get(url)
        if engine is None:
            try:
                parsed = sqlalchemy_url(url)
                path = parsed.database if parsed.get_backend_name() == "sqlite" else None
                if path and path != ":memory:" and not path.startswith("file:"):
                    engine = sa.create_engine(parsed, creator=sqlite_file_reader(path),
                                              poolclass=sa.pool.NullPool)
                else:
                    engine = sa.create_engine(parsed, pool_pre_ping=True)
                    if parsed.get_backend_name() == "postgresql" and parsed.get_driver_name() == "psycopg2":
                        sa.event.listen(engine, "connect", infinite_dates_as_text)
            except (sa.exc.ArgumentError, sa.exc.NoSuchModuleError, ImportError) as exc:
                raise SourceError(f"bad source URL {mask_url(url)!r}: {exc}") from None
            _engines[url] = engine
        return engine


def sqlite_file_reader(path: str) -> Callable[[], sqlite3.Connection]:
    """Connections to the SQLite file at `path`, read-only (`mode=ro`): a missing file is a
    `SourceError` naming it, where a plain connection would create it empty."""

    def connect() -> sqlite3.Connection:
        file = Path(path).absolute()
        if not file.is_file():
            raise SourceError(f"SQLite source file {file} does not exist")
        return sqlite3.connect(f"{file.as_uri()}?mode=ro", uri=True, check_same_thread=False)

    return connect


def range_condition(column: sa.ColumnElement, kind: SliceKind, lower: Any, upper: Any) -> sa.ColumnElement:
    """The one boundary rule of a SQL range and of each of its slices: ids (lower, upper],
    as the id planner hands out ranges ending at the largest id read; times
    [lower, upper), so that a row at a window's end belongs to the next window."""
    if kind == "id":
        return sa.and_(column > lower, column <= upper)
    return sa.and_(column >= lower, column < upper)


def slice_bounds(kind: SliceKind, lower: Any, upper: Any, slices: int) -> list[Any]:
    """`slices` + 1 increasing bounds from `lower` to `upper` (fewer when the range is too
    narrow): consecutive pairs are the slices. The outer bounds are the range's own, so
    the slices, read with `range_condition`, hold exactly the range's rows."""
    if slices < 1:
        raise ValueError(f"slices must be at least 1, got {slices}")
    if kind == "id":
        inner = [lower + math.ceil(i * (upper - lower) / slices) for i in range(1, slices)]
    else:  # timestamps, epoch seconds, or dates (a date plus part of a day is that date)
        step = (upper - lower) / slices
        inner = [lower + i * step for i in range(1, slices)]
    bounds = [lower]
    for bound in [*inner, upper]:
        if bound > bounds[-1]:
            bounds.append(bound)
    return bounds if len(bounds) > 1 else [lower, upper]


def slice_count(rows: int, rows_per_slice: int, parallelism: int) -> int:
    """Slices for a range of `rows`: at most `rows_per_slice` rows each, in whole waves
    over the cores (`whole_waves`), and at least one per core of the session while each
    still holds `MIN_ROWS_PER_SLICE` rows."""
    by_size = whole_waves(math.ceil(rows / rows_per_slice), parallelism)
    by_cores = min(parallelism, rows // MIN_ROWS_PER_SLICE)
    return max(1, by_size, by_cores)


@dataclass(frozen=True)
class SqlSlice:
    """One slice of a range: the rows between `lower` and `upper` (see `range_condition`)."""

    index: int
    lower: Any
    upper: Any


@dataclass(frozen=True)
class SlicedRead:
    """Everything a task needs to read its slice, planned on the driver: picklable, holding
    no connection. `columns` carry their reflected SQL types so that the executors' rows
    come back through the same SQLAlchemy types the driver sees."""

    url: str
    table: str
    db_schema: str | None
    columns: tuple[tuple[str, sa.types.TypeEngine], ...]
    schema: T.StructType
    range_column: str
    range_type: sa.types.TypeEngine
    kind: SliceKind
    bounds: tuple[Any, ...]
    fetch_size: int
    key_columns: tuple[str, ...] = ()  # what names a row in errors and quarantines
    marked: bool = False  # malformed records read and marked (`MALFORMED`), not refused
    arrow_driver: bool = True  # id slices of SQLite and PostgreSQL through their ADBC driver (`sql_arrow.py`)

    @property
    def where(self) -> str:
        return f"SQL source {self.table!r} at {mask_url(self.url)}"

    @property
    def output_schema(self) -> T.StructType:
        """The read's columns: the table's, and `MALFORMED` in a marked read."""
        if not self.marked:
            return self.schema
        return T.StructType([*self.schema.fields, T.StructField(MALFORMED, MALFORMED_TYPE)])

    def _table(self) -> sa.TableClause:
        return sa.table(self.table, *[sa.column(name, read_type(type_)) for name, type_ in self.columns],
                        schema=self.db_schema)

    def _range_column(self) -> sa.ColumnClause:
        return sa.column(self.range_column, self.range_type)

    def slices(self) -> list[SqlSlice]:
        return [SqlSlice(i, lower, upper) for i, (lower, upper) in enumerate(pairwise(self.bounds))]

    def count_rows(self) -> int:
        """The range's rows, counted by the database on the driver (no Spark job)."""
        column = self._range_column()
        query = (sa.select(sa.func.count()).select_from(self._table())
                 .where(range_condition(column, self.kind, self.bounds[0], self.bounds[-1])))
        try:
            with source_engine(self.url).connect() as conn:
                return int(conn.execute(query).scalar() or 0)
        except SQLAlchemyError as exc:
            raise SourceError(f"{self.where}: {str(exc).splitlines()[0]}") from None

    def arrow_bytes(self) -> int:
        """About the bytes the read's rows take as Arrow, reckoned by the database on the
        driver: the lengths of their text and binary values (as text), and 8 bytes for every
        other value."""
        table, column = self._table(), self._range_column()
        varying = [table.c[f.name] for f in self.schema.fields if isinstance(f.dataType, T.StringType | T.BinaryType)]
        lengths = [sa.func.coalesce(sa.func.sum(sa.func.length(sa.cast(c, sa.Text))), 0) for c in varying]
        query = (sa.select(sa.func.count(), *lengths).select_from(table)
                 .where(range_condition(column, self.kind, self.bounds[0], self.bounds[-1])))
        try:
            with source_engine(self.url).connect() as conn:
                rows, *text = conn.execute(query).one()
        except SQLAlchemyError as exc:
            raise SourceError(f"{self.where}: {str(exc).splitlines()[0]}") from None
        return int(rows) * 8 * (len(self.schema.fields) - len(varying)) + sum(int(n) for n in text)

    def slice_query(self, piece: SqlSlice) -> sa.Select:
        table, column = self._table(), self._range_column()
        query = sa.select(*table.c).where(range_condition(column, self.kind, piece.lower, piece.upper))
        # Id slices keep the source's id order (a read of the range lists rows as inserted).
        return query.order_by(column) if self.kind == "id" else query

    def read_slice(self, piece: SqlSlice) -> Iterator[pa.RecordBatch]:
        """The slice's rows as Arrow record batches of at most `fetch_size` rows (runs on an
        executor)."""
        from pyspark.sql.pandas.types import to_arrow_schema

        arrow_schema = to_arrow_schema(self.output_schema, timezone="UTC")
        backend = None
        if self.arrow_driver and self.kind == "id":
            backend = arrow_backend(self.url, self.columns, self.schema)
        if backend is not None:
            batches = self._read_arrow(backend, piece, arrow_schema)
            if batches is not None:
                yield from batches
                return
        try:
            with source_engine(self.url).connect() as conn:
                for columns, processors in self._fetch_columns(conn, piece):
                    yield self._record_batch(columns, processors, arrow_schema)
        except SQLAlchemyError as exc:
            raise SourceError(
                f"{self.where}: slice {piece.index} ({piece.lower!r}, {piece.upper!r}) of "
                f"{self.range_column!r}: {str(exc).splitlines()[0]}"
            ) from None

    def _read_arrow(self, backend: str, piece: SqlSlice, arrow_schema: pa.Schema) -> Iterator[pa.RecordBatch] | None:
        """The slice through the backend's Arrow driver (`sql_arrow.py`), None when the
        database counts a row in it the driver would not read as the exact path does."""
        import pyarrow as pa

        dialect = source_engine(self.url).dialect
        condition = range_condition(self._range_column(), self.kind, piece.lower, piece.upper)
        misfit = misfit_condition(backend, [(f.name, f.dataType) for f in self.schema.fields],
                                  dialect.identifier_preparer.quote)
        counted = (sa.select(sa.func.count(), sa.func.coalesce(sa.func.sum(sa.case((sa.text(misfit), 1), else_=0)), 0))
                   .select_from(self._table()).where(condition))
        processors = [read_type(type_).dialect_impl(dialect).result_processor(dialect, None)
                      for _, type_ in self.columns]

        def convert(batch: pa.RecordBatch) -> pa.RecordBatch:
            try:
                arrays = [cast_column(batch.column(i), field.dataType, arrow_schema.field(i).type, processors[i])
                          for i, field in enumerate(self.schema.fields)]
            except NotExact:  # the batch as the exact path converts it, from the same values
                return self._record_batch([python_values(column) for column in batch.columns], processors,
                                          arrow_schema)
            if self.marked:
                arrays.append(pa.nulls(batch.num_rows, arrow_schema.field(len(arrays)).type))
            return pa.RecordBatch.from_arrays(arrays, schema=arrow_schema)

        def sql(query: sa.Select) -> str:
            return str(query.compile(dialect=dialect, compile_kwargs={"literal_binds": True}))

        with self._driver_errors_named(piece):
            batches = read_arrow_slice(backend, self.url, sql(counted), sql(self.slice_query(piece)), self.fetch_size,
                                       convert)
        return None if batches is None else self._named_errors_of(batches, piece)

    def _named_errors_of(self, batches: Iterator[pa.RecordBatch], piece: SqlSlice) -> Iterator[pa.RecordBatch]:
        with self._driver_errors_named(piece):
            yield from batches

    @contextlib.contextmanager
    def _driver_errors_named(self, piece: SqlSlice) -> Iterator[None]:
        import adbc_driver_manager

        try:
            yield
        except adbc_driver_manager.Error as exc:
            raise SourceError(f"{self.where}: slice {piece.index} ({piece.lower!r}, {piece.upper!r}) of "
                              f"{self.range_column!r}: {str(exc).splitlines()[0]}") from None

    def _fetch_columns(self, conn: sa.Connection, piece: SqlSlice
                       ) -> Iterator[tuple[list[Sequence[Any]], list[Processor | None]]]:
        """The slice's values, `fetch_size` rows at a time, column by column, with the
        result processor each column's values still need (None: none).

        A database with server-side cursors (PostgreSQL) streams them through SQLAlchemy's
        rows, processed. Without them (SQLite, whose cursor steps through the table as rows
        are fetched) the rows come from the DBAPI cursor of SQLAlchemy's execution, and the
        column types' result processors are applied per column (`_processed`): the values
        are the same, and building SQLAlchemy's row objects cost twice the fetch itself."""
        query = self.slice_query(piece)
        dialect = conn.dialect
        if dialect.supports_server_side_cursors:
            unprocessed: list[Processor | None] = [None] * len(self.columns)
            for rows in conn.execution_options(yield_per=self.fetch_size).execute(query).partitions():
                yield list(zip(*rows, strict=True)), unprocessed
            return
        processors = [read_type(type_).dialect_impl(dialect).result_processor(dialect, None)
                      for _, type_ in self.columns]
        cursor = conn.execute(query).cursor
        while rows := cursor.fetchmany(self.fetch_size):
            yield list(zip(*rows, strict=True)), processors

    def _record_batch(self, columns: list[Sequence[Any]], processors: list[Processor | None],
                      arrow_schema: pa.Schema) -> pa.RecordBatch:
        """The batch's rows as Arrow arrays of the read's schema. A value that does not fit
        its column fails the read (`MalformedValueError`, the batch's first such row) or,
        in a marked read, becomes a null and marks its row."""
        import pyarrow as pa  # on the executors only: a driver that plans ranges never loads it

        bad: dict[int, int] = {}  # row -> the first column whose value does not fit
        arrays = []
        for i, (values, process, field) in enumerate(zip(columns, processors, self.schema.fields, strict=True)):
            def does_not_fit(row: int, column: int = i) -> None:
                bad.setdefault(row, column)

            arrays.append(column_array(processed(values, process, does_not_fit), field.dataType,
                                       arrow_schema.field(i).type, does_not_fit))
        if bad and not self.marked:
            row = min(bad)
            raise MalformedValueError(f"{self.where}: {self._reason(columns, row, bad[row])}")
        if self.marked:
            records = [None if row not in bad else self._malformed(columns, row, bad[row])
                       for row in range(len(columns[0]) if columns else 0)]
            arrays.append(pa.array(records, type=arrow_schema.field(len(arrays)).type))
        return pa.RecordBatch.from_arrays(arrays, schema=arrow_schema)

    def _row_key(self, columns: list[Sequence[Any]], row: int) -> str:
        names = [name for name, _ in self.columns]
        return json.dumps({c: columns[names.index(c)][row] for c in self.key_columns if c in names}, default=str)

    def _reason(self, columns: list[Sequence[Any]], row: int, column: int) -> str:
        """Which value of the row does not fit which type, naming the row by its key."""
        field = self.schema.fields[column]
        return (f"row {self._row_key(columns, row)}: column {field.name!r} holds {_shown(columns[column][row])}, "
                f"which is not {field.dataType.simpleString()}")

    def _malformed(self, columns: list[Sequence[Any]], row: int, column: int) -> dict[str, str]:
        raw = {name: values[row] for (name, _), values in zip(self.columns, columns, strict=True)}
        return {"source_key": self._row_key(columns, row), "raw_value": json.dumps(raw, default=str),
                "reason": f"SQL source {self.table!r} {self._reason(columns, row, column)}"}

    def read_slice_number(self, index: int) -> Iterator[pa.RecordBatch]:
        """Slice `index`'s rows (`slice_tasks` hands a task its slice's number)."""
        return self.read_slice(self.slices()[index])

    def dataframe(self, spark: SparkSession) -> DataFrame:
        """The range as a DataFrame read by one task per slice (`slice_tasks.py`)."""
        return slice_tasks(spark, len(self.slices()), self.read_slice_number, self.output_schema)


def _shown(value: Any) -> str:
    """A source value as a reason shows it: its repr, at most `SHOWN_CHARS` characters."""
    text = repr(value)
    return text if len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS] + "..."
