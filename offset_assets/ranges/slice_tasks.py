"""A range read on the executors as one Spark task per slice: a range of slice numbers,
one per partition (`spark.range`), each mapped by `mapInArrow` to its slice's rows on the
executor that runs it. No row passes the driver, which only plans the slices.

Both range sources that read outside Spark use it (`sql_slices.py`, `kafka_slices.py`).
It needs one kind of Python worker, the one every Python function of a session uses. A
Python data source (`pyspark.sql.datasource`) asked for four: the look-up of data
sources, the data source itself, the planning of its read and the read, each a Python
daemon of its own, and a Spark Connect session starts its own daemons, so every Dagster
run over Connect paid them again.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from functools import partial
from typing import TYPE_CHECKING

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T

if TYPE_CHECKING:
    import pyarrow as pa

# Reads slice number i as Arrow record batches (on an executor: picklable, holding no connection).
SliceReader = Callable[[int], Iterator["pa.RecordBatch"]]


def slice_tasks(spark: SparkSession, count: int, read_slice: SliceReader, schema: T.StructType) -> DataFrame:
    """The rows of slices 0..count-1 (`count` >= 1) as a lazy DataFrame of `schema`, one
    task per slice."""
    return spark.range(0, count, 1, numPartitions=count).mapInArrow(partial(_read_numbered, read_slice), schema)


def _read_numbered(read_slice: SliceReader, numbers: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The rows of the slices whose numbers a task gets (one, as `slice_tasks` partitions them)."""
    for batch in numbers:
        for index in batch.column(0).to_pylist():
            yield from read_slice(index)
