"""Files landing in time-partitioned folders as a range source: a time range reads the
folders of its partitions, through Spark's own file readers."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from offset_assets.ranges.errors import SourceError
from offset_assets.ranges.planners import DataRange, parse_time
from offset_assets.ranges.sources.batch import SourceBatch
from offset_assets.versioned.layout import WarehouseFiles
from offset_assets.versioned.writes import StateOrder


@dataclass(frozen=True)
class FolderSource:
    """Files landing in time-partitioned folders, `{root}/{partition_column}={value}/`.

    A time range [start, end) reads every partition folder whose partition instant lies
    in [floor(start), end), where floor is the partition granularity; `time_column`
    additionally keeps only rows inside the range (for ranges finer than a folder).
    Folders are located through the Hadoop file system of `root`, so any URI Spark can
    read works; a folder that has not landed yet simply contributes no rows.
    """

    root: str
    format: str = "parquet"
    partition_column: str = "dt"
    partition_format: str = "%Y-%m-%d"
    partition_step: timedelta = timedelta(days=1)
    schema: T.StructType | None = None  # needed for csv/json; parquet files carry their own
    options: Mapping[str, str] = field(default_factory=dict)
    time_column: str | None = None
    order_by: str | None = None  # as `SqlTableSource.order_by`: the last row of a key wins
    source_type: str = field(default="files", init=False)

    def partition_paths(self, data_range: DataRange) -> list[str]:
        """Candidate folders of the range, in time order (whether they exist or not)."""
        if data_range.end is None:
            raise SourceError(f"folder source {self.root!r}: range {data_range.start!r} has no end")
        start, end = parse_time(data_range.start), parse_time(data_range.end)
        moment = datetime.strptime(start.strftime(self.partition_format), self.partition_format)
        paths: list[str] = []
        while moment < end:
            value = moment.strftime(self.partition_format)
            path = f"{self.root.rstrip('/')}/{self.partition_column}={value}"
            if path not in paths:
                paths.append(path)
            moment += self.partition_step
        return paths

    def read_range(self, spark: SparkSession, data_range: DataRange) -> SourceBatch:
        # The warehouse's file layer (fsspec): no JVM call, so a Spark Connect session works too.
        files = WarehouseFiles()
        paths = [path for path in self.partition_paths(data_range) if files.exists(path)]
        order = StateOrder(self.order_by) if self.order_by is not None else None
        if not paths:
            if self.schema is None:
                return SourceBatch(spark.createDataFrame([], T.StructType([])), data_range.end, 0)
            return SourceBatch(spark.createDataFrame([], self.schema), data_range.end, 0, order=order)
        reader = spark.read.format(self.format).options(basePath=self.root, **self.options)
        if self.schema is not None:
            reader = reader.schema(self.schema)
        try:
            df = reader.load(paths)
        except Exception as exc:  # Spark analysis errors: name the folder instead of a JVM trace
            raise SourceError(
                f"folder source {self.root!r}: cannot read {paths}: {str(exc).splitlines()[0]}"
            ) from None
        if self.time_column is not None:
            start = parse_time(data_range.start).replace(tzinfo=UTC)
            end = parse_time(data_range.end or data_range.start).replace(tzinfo=UTC)
            column = F.col(self.time_column)
            df = df.where((column >= F.lit(start)) & (column < F.lit(end)))
        return SourceBatch(df, data_range.end, order=order)
