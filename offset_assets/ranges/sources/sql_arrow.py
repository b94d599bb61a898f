"""An id slice of a SQLite or PostgreSQL source read through an Arrow ADBC driver
(`adbc-driver-sqlite`; `adbc-driver-postgresql`, PostgreSQL's binary COPY): the rows reach
Arrow in C, not as one Python object per value. `sql_read.py` reads every other slice
(other databases, time slices, columns of other types, the driver not installed), and
these too when the database says they may not convert exactly.

Measured on one busy core, a million rows of (id, name, city) from SQLite: 1.6 CPU
seconds through the driver, the count below included, where SQLAlchemy's rows and a
Python conversion per value took 6.3.

What the database counts first, in the slice's read transaction (a slice with such a row
is read by the exact path, which refuses or marks the value as ever):
- SQLite, a value of another storage class than its column's Spark type is read from
  (`STORAGE_CLASSES`). The driver infers a column's Arrow type from the values of a batch:
  of an INTEGER column holding 5 and 2.5 it makes the double 5.0, of a TEXT column holding
  1 the text '1.000000e+00'. With one storage class per column its values are sqlite3's.
  The slice is fetched as one Arrow batch, so that the types are inferred from all its
  rows (a column null in its first rows is no other type);
- PostgreSQL, an infinite timestamp or date, which the driver reads as a far instant.

Each column of a batch becomes the read's type by Arrow's checked casts only: an integer
into a bigint, a double into a decimal through its shortest text, as Python's `repr`
writes it (2.555 is no decimal(10, 2), 0.1 is 0.10), PostgreSQL's numeric text into a
decimal, a real (float4) through its shortest text as psycopg2 reads it, an integer into a
boolean only when 0 or 1; SQLite's text timestamps and dates are parsed by their column
type's SQLAlchemy processor, as the exact path parses them. A batch any of whose values
does not convert goes, as Python values (the values the exact path reads), through the
exact path's conversion (`SlicedRead._record_batch`), which refuses or marks them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pyspark.sql import types as T

from offset_assets.control_plane.database import sqlalchemy_url
from offset_assets.ranges.errors import SourceError
from offset_assets.ranges.sources.sql_values import Processor, column_array, processed

if TYPE_CHECKING:
    import pyarrow as pa

# The SQLite storage classes whose values a column read as each Spark type may hold for
# the driver to hand them over as they are (null is every column's).
STORAGE_CLASSES: dict[type[T.DataType], str] = {
    T.LongType: "integer",
    T.BooleanType: "integer",
    T.DoubleType: "real",
    T.DecimalType: "real",
    T.StringType: "text",
    T.TimestampType: "text",
    T.DateType: "text",
    T.BinaryType: "blob",
}
# The PostgreSQL types (SQLAlchemy's reflected names) the driver reads into Arrow as they are.
POSTGRESQL_TYPES = {"SMALLINT", "INTEGER", "BIGINT", "REAL", "DOUBLE_PRECISION", "DOUBLE PRECISION", "NUMERIC",
                    "BOOLEAN", "TEXT", "VARCHAR", "CHAR", "BYTEA", "TIMESTAMP", "DATE"}


class NotExact(Exception):
    """A batch's column that Arrow's checked casts do not convert: the batch goes value by value."""


def sqlite_file(url: str) -> Path | None:
    """The SQLite file a source URL names, None for any other database (or an in-memory one)."""
    parsed = sqlalchemy_url(url)
    path = parsed.database if parsed.get_backend_name() == "sqlite" else None
    if not path or path == ":memory:" or path.startswith("file:"):
        return None
    return Path(path).absolute()


def arrow_backend(url: str, columns: Sequence[tuple[str, Any]], schema: T.StructType) -> str | None:
    """'sqlite' or 'postgresql' when a slice of these columns may be read through that
    backend's driver (installed where the slice is read), else None."""
    backend = sqlalchemy_url(url).get_backend_name()
    if backend == "sqlite" and sqlite_file(url) is not None:
        readable = all(type(f.dataType) in STORAGE_CLASSES for f in schema.fields)
    elif backend == "postgresql":
        readable = all(type(sql_type).__name__ in POSTGRESQL_TYPES for _, sql_type in columns)
    else:
        return None
    if not readable:
        return None
    try:
        if backend == "sqlite":
            import adbc_driver_sqlite.dbapi  # noqa: F401
        else:
            import adbc_driver_postgresql.dbapi  # noqa: F401
    except ImportError:
        return None
    return backend


def misfit_condition(backend: str, columns: Sequence[tuple[str, T.DataType]], quote: Callable[[str], str]) -> str:
    """SQL true for a row the driver would not read as the exact path does."""
    if backend == "sqlite":
        checks = [f"typeof({quote(name)}) NOT IN ('{STORAGE_CLASSES[type(spark_type)]}', 'null')"
                  for name, spark_type in columns]
    else:
        checks = [f"NOT isfinite({quote(name)})" for name, spark_type in columns
                  if isinstance(spark_type, T.TimestampType | T.DateType)]
    return " OR ".join(checks) or "1 = 0"


def connect(backend: str, url: str) -> Any:
    """A driver connection, autocommit off: what a slice counts and reads is one transaction."""
    if backend == "sqlite":
        import adbc_driver_sqlite.dbapi as adbc

        file = sqlite_file(url)
        if file is None or not file.is_file():
            raise SourceError(f"SQLite source file {file} does not exist")
        return adbc.connect(f"{file.as_uri()}?mode=ro")
    import adbc_driver_postgresql.dbapi as adbc

    conn = adbc.connect(sqlalchemy_url(url).set(drivername="postgresql").render_as_string(hide_password=False))
    conn.cursor().execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
    return conn


def read_arrow_slice(backend: str, url: str, count_sql: str, rows_sql: str, fetch_size: int,
                     convert: Callable[[pa.RecordBatch], pa.RecordBatch]) -> Iterator[pa.RecordBatch] | None:
    """The slice's rows (`rows_sql`) as converted batches of at most `fetch_size` rows, or
    None when `count_sql` (the slice's rows, and its rows `misfit_condition` holds for)
    says the slice needs the exact path."""
    conn = connect(backend, url)
    try:
        cursor = conn.cursor()
        cursor.execute(count_sql)
        rows, misfits = cursor.fetchone()
        if misfits:
            conn.close()
            return None
        if backend == "sqlite":  # one batch of all the slice's rows: types inferred from them all
            cursor.adbc_statement.set_options(**{"adbc.sqlite.query.batch_rows": str(max(int(rows or 0), 1))})
    except BaseException:
        conn.close()
        raise
    return _batches(conn, cursor, rows_sql, fetch_size, convert)


def _batches(conn: Any, cursor: Any, rows_sql: str, fetch_size: int,
             convert: Callable[[pa.RecordBatch], pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    try:
        cursor.execute(rows_sql)
        for fetched in cursor.fetch_record_batch():
            for offset in range(0, fetched.num_rows, fetch_size):
                yield convert(fetched.slice(offset, fetch_size))
    finally:
        conn.close()


def cast_column(array: pa.Array, spark_type: T.DataType, arrow_type: pa.DataType,
                process: Processor | None) -> pa.Array:
    """`array`, as the driver read it, as `arrow_type`, exactly; `NotExact` otherwise."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if isinstance(array, pa.ExtensionArray):  # PostgreSQL's numeric: its text
        array = array.storage
    if array.null_count == len(array):
        return pa.nulls(len(array), arrow_type)
    try:
        if isinstance(spark_type, T.TimestampType | T.DateType) and pa.types.is_string(array.type):
            return _parsed(array, spark_type, arrow_type, process)
        if isinstance(spark_type, T.BooleanType) and pa.types.is_integer(array.type):
            if not pc.all(pc.is_in(array.drop_null(), pa.array([0, 1], array.type))).as_py():
                raise NotExact
        elif pa.types.is_floating(array.type) and (isinstance(spark_type, T.DecimalType)
                                                    or array.type == pa.float32()):
            # The decimal a float is written as (Python's `repr`, Arrow's shortest text).
            array = pc.cast(array, pa.string())
        elif not _same_kind(array.type, arrow_type):
            raise NotExact
        return pc.cast(array, arrow_type, safe=True)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        raise NotExact from None


def python_values(array: pa.Array) -> list[Any]:
    """A column's values as the exact path reads them (PostgreSQL's numeric as a Decimal)."""
    import pyarrow as pa

    if isinstance(array, pa.ExtensionArray):
        from decimal import Decimal

        return [None if text is None else Decimal(text) for text in array.storage.to_pylist()]
    if array.type == pa.float32():
        return [None if value is None else float(repr_text) for value, repr_text in
                zip(array.to_pylist(), array.cast(pa.string()).to_pylist(), strict=True)]
    return array.to_pylist()


def _same_kind(given: pa.DataType, wanted: pa.DataType) -> bool:
    import pyarrow as pa

    kinds = (pa.types.is_integer, pa.types.is_floating, pa.types.is_string, pa.types.is_binary,
             pa.types.is_timestamp, pa.types.is_date, pa.types.is_boolean)
    return any(kind(given) and kind(wanted) for kind in kinds)


def _parsed(array: pa.Array, spark_type: T.DataType, arrow_type: pa.DataType, process: Processor | None) -> pa.Array:
    """SQLite's text timestamps and dates, parsed by their column type's processor."""
    misfits: list[int] = []
    values = processed(array.to_pylist(), process, misfits.append)
    converted = column_array(values, spark_type, arrow_type, misfits.append)
    if misfits:
        raise NotExact
    return converted
