"""Version files read and written by the driver with pyarrow: the few rows of a small
write and the versions it is classified against, without a Spark job.

The files are the ones Spark writes and reads (`delta_files.py`, `reads.py`): the table's
data columns, then sys_op and sys_from, in the Arrow types Spark's own conversion gives
them (`to_arrow_schema`). A file written here is read by Spark and by the reader without
a JVM exactly as a file Spark wrote, and Spark's files are read here as Spark reads them
(INT96 timestamps as microseconds). Folders and listings are the warehouse's
(`layout.WarehouseFiles`: fsspec, any URI the warehouse uses), so a driver that deletes a
hot delta's files can write them.

Only tables of atomic column types are handled here (`held_schema`): numbers, strings,
binaries, booleans, dates, timestamps and decimals, and no floating-point primary key,
whose values Spark compares after normalising NaN and -0.0. Other tables are written by
Spark.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from fsspec.implementations.local import LocalFileSystem
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    FractionalType,
    IntegralType,
    StringType,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from offset_assets.versioned.layout import SYS_FROM, WarehouseFiles
from offset_assets.versioned.table_schema import file_schema

__all__ = ["DEFAULT_HELD_ROWS_LIMIT", "HELD_BYTES_LIMIT", "arrow_schema", "held_schema", "key_filter",
           "key_range_filter", "newest_per_key", "read_versions", "write_versions"]

_ATOMIC = (
    IntegralType,
    FractionalType,
    StringType,
    BinaryType,
    BooleanType,
    DateType,
    TimestampType,
    TimestampNTZType,
    DecimalType,
)
_ROW_INDEX = "__row_index"
# The most versions the driver reads for one batch, the most committed versions (and
# written rows) of an output it classifies itself, and the most rows of a range it reads
# and writes itself: a few MB of Arrow, read in a few milliseconds, where a Spark job
# costs tens of them however few its rows.
DEFAULT_HELD_ROWS_LIMIT = 50_000
# The most bytes of a range's rows the driver reads as Arrow before it leaves them to Spark:
# rows of unknown width (documents, blobs) are bounded by their size, not their count.
HELD_BYTES_LIMIT = 32 * 1024 * 1024


def held_schema(schema: StructType, primary_key: Sequence[str]) -> bool:
    """Whether a table of `schema` is read and written by the driver: atomic columns only,
    and no floating-point primary-key column."""
    return all(isinstance(f.dataType, _ATOMIC) for f in schema.fields) and not any(
        isinstance(schema[c].dataType, FractionalType) for c in primary_key
    )


def arrow_schema(schema: StructType, with_system: bool = True) -> pa.Schema:
    """The Arrow types of a table's data columns (`with_system`: then sys_op and
    sys_from) as Spark converts them, every column nullable as in the files."""
    fields = file_schema(schema) if with_system else schema
    return pa.schema([f.with_nullable(True) for f in to_arrow_schema(fields, timezone="UTC")])


def read_versions(files: WarehouseFiles, schema: StructType, folders: Iterable[str],
                  where: ds.Expression | None = None) -> pa.Table:
    """The versions stored under `folders` (data columns, sys_op, sys_from), read as Spark
    reads them: every data file at any depth, names starting with `_` or `.` hidden;
    `where`: only the rows it holds for, the files' row groups skipped by their statistics."""
    target = arrow_schema(schema)
    paths = [path for folder in folders for path, _ in files.data_files(folder)]
    if not paths:
        return target.empty_table()
    parquet = ds.ParquetFileFormat(read_options=ds.ParquetReadOptions(coerce_int96_timestamp_unit="us"))
    return ds.dataset(paths, schema=target, format=parquet, filesystem=_arrow_fs(files, paths[0])).to_table(
        filter=where)


def key_range_filter(schema: StructType, column: str, low: Any, high: Any) -> ds.Expression:
    """`column` between `low` and `high`, or NULL where the column may be (a NULL key is a
    key): `write_candidates`' bound by an id range, for `read_versions`."""
    field = ds.field(column)
    within = (field >= low) & (field <= high)
    return within | field.is_null() if schema[column].nullable else within


def write_versions(
    files: WarehouseFiles, folder: str, versions: pa.Table, schema: StructType, primary_key: Sequence[str]
) -> None:
    """`versions` (data columns, sys_op, sys_from) as one Parquet file under `folder`,
    sorted by key as Spark's writes are; a file that fails half-way is deleted with its
    folder."""
    table = versions.select(arrow_schema(schema).names).cast(arrow_schema(schema))
    table = table.sort_by([(c, "ascending") for c in primary_key])
    fs = files.file_system(folder)
    # The file system's own form of the path: Arrow's file systems take no URI scheme.
    path = fs._strip_protocol(f"{folder.rstrip('/')}/part-00000-{uuid.uuid4()}.snappy.parquet")
    try:
        fs.makedirs(fs._strip_protocol(folder), exist_ok=True)
        pq.write_table(table, path, filesystem=_arrow_fs(files, folder), compression="snappy")
    except BaseException:
        files.delete(folder)
        raise


def newest_per_key(versions: pa.Table, primary_key: Sequence[str]) -> pa.Table:
    """The newest version (highest sys_from) of each key of `versions`; NULL is a key
    value, grouped as Spark groups it."""
    if versions.num_rows == 0:
        return versions
    ordered = versions.sort_by([(SYS_FROM, "ascending")])
    indexed = ordered.append_column(_ROW_INDEX, pa.array(range(ordered.num_rows), pa.int64()))
    newest = indexed.group_by(list(primary_key), use_threads=False).aggregate([(_ROW_INDEX, "max")])
    positions = newest[f"{_ROW_INDEX}_max"]
    return ordered.take(pc.take(positions, pc.sort_indices(positions)))


def key_filter(table: pa.Table, columns: Sequence[str], keys: Iterable[tuple]) -> pa.Table:
    """The rows of `table` whose `columns` hold one of `keys` (tuples of Python values;
    None matches NULL, a NULL key being a key)."""
    wanted = set(keys)
    if not wanted or table.num_rows == 0:
        return table.slice(0, 0)
    if len(columns) == 1:
        values = pa.array([key[0] for key in wanted], table.schema.field(columns[0]).type)
        return table.filter(pc.is_in(table[columns[0]], value_set=values, skip_nulls=False))
    found = zip(*(table[c].to_pylist() for c in columns), strict=True)
    return table.filter(pa.array([key in wanted for key in found], pa.bool_()))


def _arrow_fs(files: WarehouseFiles, path: str) -> pafs.FileSystem:
    """Arrow's own local file system for local paths (fsspec's through Arrow's handler
    costs a Python call per read), else the warehouse's fsspec file system."""
    fs = files.file_system(path)
    return pafs.LocalFileSystem() if isinstance(fs, LocalFileSystem) else pafs.PyFileSystem(pafs.FSSpecHandler(fs))
