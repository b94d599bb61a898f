"""A range read on the executors as one Spark task per slice: a range of slice numbers,
one per partition (`spark.range`), each mapped by `mapInArrow` to its slice's rows on the
executor that runs it. No row passes the driver, which only plans the slices.

Both range sources that read outside Spark use it (`sql_read.py`, `kafka_read.py`).
It needs one kind of Python worker, the one every Python function of a session uses. A
Python data source (`pyspark.sql.datasource`) asked for four: the look-up of data
sources, the data source itself, the planning of its read and the read, each a Python
daemon of its own, and a Spark Connect session starts its own daemons, so every Dagster
run over Connect paid them again.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from functools import partial
from typing import TYPE_CHECKING

from pyspark import StorageLevel
from pyspark.sql import DataFrame, Observation, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

if TYPE_CHECKING:
    import pyarrow as pa

# Reads slice number i as Arrow record batches (on an executor: picklable, holding no connection).
SliceReader = Callable[[int], Iterator["pa.RecordBatch"]]


def session_parallelism(spark: SparkSession) -> int:
    """The session's default parallelism; a Spark Connect client has no SparkContext to
    ask, so there it is `spark.default.parallelism` when set, else 1."""
    if not type(spark).__module__.startswith("pyspark.sql.connect"):
        return spark.sparkContext.defaultParallelism
    return int(spark.conf.get("spark.default.parallelism", None) or 1)


def whole_waves(count: int, parallelism: int) -> int:
    """`count` tasks rounded up to whole waves over `parallelism` cores once there are
    more than cores: 5 tasks on 2 cores would run as 2, 2 and 1, the last wave leaving a
    core idle; 6 smaller ones keep both busy to the end."""
    if count > parallelism > 0:
        return math.ceil(count / parallelism) * parallelism
    return count


def slice_tasks(spark: SparkSession, count: int, read_slice: SliceReader, schema: T.StructType) -> DataFrame:
    """The rows of slices 0..count-1 (`count` >= 1) as a lazy DataFrame of `schema`, one
    task per slice."""
    return spark.range(0, count, 1, numPartitions=count).mapInArrow(partial(_read_numbered, read_slice), schema)


def _read_numbered(read_slice: SliceReader, numbers: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The rows of the slices whose numbers a task gets (one, as `slice_tasks` partitions them)."""
    for batch in numbers:
        for index in batch.column(0).to_pylist():
            yield from read_slice(index)


def read_once(frame: DataFrame, counts: Mapping[str, str]) -> tuple[DataFrame, dict[str, int]]:
    """`frame`'s rows, read now, once, and `counts` of them (name -> SQL aggregate).

    One Spark job reads the rows, computes the counts as they pass (an observed metric;
    over Spark Connect, a second job counts the copy) and keeps them on the executors'
    disks (a local checkpoint: disk only, as a range may not fit in memory). The frame
    returned reads that copy, so what follows (the write, a quarantine) does not read the
    source again. A lost executor loses its part of the copy: the range then fails and its
    retry reads the source again. The copy is dropped once the frame is garbage-collected
    (Spark's context cleaner)."""
    read = Observation()
    aggregates = [F.expr(f"{sql} AS {name}") for name, sql in counts.items()]
    kept = frame.observe(read, *aggregates).localCheckpoint(eager=True, storageLevel=StorageLevel.DISK_ONLY)
    observed = read.get
    if any(observed.get(name) is None for name in counts):
        # A Spark Connect checkpoint reports no observed metric: the copy is counted instead
        # (one more job, reading the executors' copy, not the source).
        observed = kept.agg(*aggregates).first().asDict()
    return kept, {name: int(observed.get(name) or 0) for name in counts}
