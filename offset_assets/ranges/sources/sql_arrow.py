"""An id slice of a SQLite source read through the Arrow ADBC SQLite driver: the rows
reach Arrow in C, not one Python object per value (`sql_read.py` reads every other slice,
and this one when the database says it may not convert exactly).

The read measured on one core: 0.7 CPU seconds a million rows of (id, name, city), where
SQLAlchemy's rows and a Python conversion per value took 6.3 (`bench/ingest.py`).

The driver's values are the database's own, as sqlite3 hands them over, only when each
column holds one storage class: it infers a column's Arrow type from the values of a batch,
and of an INTEGER column holding 5 and 2.5 it makes the double 5.0, of a TEXT column
holding 1 the text '1.000000e+00'. So, in the slice's read transaction, SQLite first
counts the slice's rows holding a value of another storage class than its column's Spark
type is read from (`STORAGE_CLASSES`: integer for a bigint, real for a double or a
decimal, text for a string, a timestamp or a date, blob for bytes). A slice with any
such row is read by the exact path (`SlicedRead`'s SQLAlchemy read, which refuses or
marks the value); the others are fetched as one Arrow batch, whose types the driver then
infers from all the slice's rows (a column null in its first rows is no other type), and
handed to Spark in batches of `fetch_size` rows.

Each column of a batch becomes the read's type by Arrow's checked casts only (a double to
a decimal through its shortest text, as Python's `repr` writes it: 2.555 is no
decimal(10,2), 0.1 is 0.10; an integer to a boolean only when 0 or 1); timestamps and
dates, text in SQLite, are parsed by their column type's SQLAlchemy processor, as the
exact path parses them. A batch any of whose values does not convert goes, as Python
values (the same values sqlite3 reads), through the exact path's conversion
(`SlicedRead.record_batch`), which refuses or marks them.
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


class NotExact(Exception):
    """A batch's column that Arrow's checked casts do not convert: the batch goes value by value."""


def sqlite_file(url: str) -> Path | None:
    """The SQLite file a source URL names, None for any other database (or an in-memory one)."""
    parsed = sqlalchemy_url(url)
    path = parsed.database if parsed.get_backend_name() == "sqlite" else None
    if not path or path == ":memory:" or path.startswith("file:"):
        return None
    return Path(path).absolute()


def arrow_readable(url: str, schema: T.StructType) -> bool:
    """Whether a slice of this source and these columns may be read through the driver:
    a SQLite file, every column of a type the driver's storage classes map, the driver
    importable where the slice is read."""
    if sqlite_file(url) is None or not all(type(f.dataType) in STORAGE_CLASSES for f in schema.fields):
        return False
    try:
        import adbc_driver_sqlite.dbapi  # noqa: F401
    except ImportError:
        return False
    return True


def misfit_condition(columns: Sequence[tuple[str, T.DataType]], quote: Callable[[str], str]) -> str:
    """SQL true for a row holding a value of another storage class than its column's."""
    checks = [f"typeof({quote(name)}) NOT IN ('{STORAGE_CLASSES[type(spark_type)]}', 'null')"
              for name, spark_type in columns]
    return " OR ".join(checks) or "0"


def read_arrow_slice(url: str, count_sql: str, rows_sql: str, fetch_size: int,
                     convert: Callable[[pa.RecordBatch], pa.RecordBatch]) -> Iterator[pa.RecordBatch] | None:
    """The slice's rows (`rows_sql`) as converted batches of at most `fetch_size` rows, or
    None when `count_sql` (the slice's rows, and those of its rows that hold a value of
    another storage class) says the slice needs the exact path. Both run in one read
    transaction: what was counted is what is read."""
    import adbc_driver_sqlite.dbapi as adbc

    file = sqlite_file(url)
    if file is None or not file.is_file():
        raise SourceError(f"SQLite source file {file} does not exist")
    conn = adbc.connect(f"{file.as_uri()}?mode=ro")  # autocommit off: one read transaction
    try:
        cursor = conn.cursor()
        cursor.execute(count_sql)
        rows, misfits = cursor.fetchone()
        if misfits:
            conn.close()
            return None
    except BaseException:
        conn.close()
        raise
    return _batches(conn, cursor, rows_sql, max(int(rows or 0), 1), fetch_size, convert)


def _batches(conn: Any, cursor: Any, rows_sql: str, rows: int, fetch_size: int,
             convert: Callable[[pa.RecordBatch], pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    try:
        # One batch of all the slice's rows: the driver infers each column's type from them all.
        cursor.adbc_statement.set_options(**{"adbc.sqlite.query.batch_rows": str(rows)})
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

    if array.null_count == len(array):
        return pa.nulls(len(array), arrow_type)
    try:
        if isinstance(spark_type, T.TimestampType | T.DateType):
            return _parsed(array, spark_type, arrow_type, process)
        if isinstance(spark_type, T.BooleanType):
            if not pa.types.is_integer(array.type) or not pc.all(pc.is_in(array.drop_null(), pa.array([0, 1]))).as_py():
                raise NotExact
            return pc.cast(array, arrow_type)
        if isinstance(spark_type, T.DecimalType) and pa.types.is_floating(array.type):
            # The decimal a float is written as (Python's `repr`, Arrow's shortest text).
            return pc.cast(pc.cast(array, pa.string()), arrow_type, safe=True)
        if not _same_kind(array.type, arrow_type):
            raise NotExact
        return pc.cast(array, arrow_type, safe=True)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        raise NotExact from None


def _same_kind(given: pa.DataType, wanted: pa.DataType) -> bool:
    import pyarrow as pa

    kinds = (pa.types.is_integer, pa.types.is_floating, pa.types.is_string, pa.types.is_binary)
    return any(kind(given) and kind(wanted) for kind in kinds) or given == wanted


def _parsed(array: pa.Array, spark_type: T.DataType, arrow_type: pa.DataType, process: Processor | None) -> pa.Array:
    """SQLite's text timestamps and dates, parsed by their column type's processor."""
    misfits: list[int] = []
    values = processed(array.to_pylist(), process, misfits.append)
    converted = column_array(values, spark_type, arrow_type, misfits.append)
    if misfits:
        raise NotExact
    return converted

