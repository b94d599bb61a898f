"""The Parquet files of one hot delta: each write's new versions and unchanged rows.

A write's versions are stored under `layout.write_path`, sorted by key, one file per
partition of the write (one per `ROWS_PER_FILE` versions when the frame is coalesced).
Its unchanged rows (upserts equal to the state the key already has) get a file of their
own under `layout.noop_path` only when a later write into the same delta may follow:
that file lets it refuse another state of those keys. A write whose files fail leaves
none (`discard`); `savepoint` and `restore` undo whole writes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from pyspark.sql import DataFrame, SparkSession

from offset_assets.spark import is_connect_session
from offset_assets.versioned import writes
from offset_assets.versioned.evaluation import ROWS_PER_PARTITION
from offset_assets.versioned.hot_table import HotTable
from offset_assets.versioned.layout import ROWS_PER_FILE, SYS_OP, noop_path, write_path
from offset_assets.versioned.writes import WriteStats

__all__ = ["DeltaFiles", "write_partitions"]

# Options of every write into a delta. No `_SUCCESS` marker: the catalog's commit says
# which writes are complete, and readers list files, not markers (a tiny write 73 -> 64 ms:
# one file fewer to create, checksum and rename). Passed with the write, not set on the
# session, so a session the user shares keeps its own settings; a Spark Connect server
# gets them with the write too.
WRITE_OPTIONS = {"mapreduce.fileoutputcommitter.marksuccessfuljobs": "false"}


class DeltaFiles:
    """The files the writes into one hot delta (`delta_num`, under `data_path`) made."""

    def __init__(self, table: HotTable, data_path: str, delta_num: int) -> None:
        self.table = table
        self.data_path = data_path
        self.delta_num = delta_num
        self._writes = 0
        self._versions: list[str] = []
        self._unchanged: list[str] = []

    def next_paths(self) -> tuple[str, str]:
        """Where the next write's versions and unchanged rows go."""
        number = self._writes + 1
        return write_path(self.data_path, number), noop_path(self.data_path, number)

    def kept(self, versions_at: str | None, unchanged_at: str | None) -> None:
        """Count a write whose files are complete: its versions' and unchanged rows'
        folders (None: it wrote none)."""
        self._writes += 1
        if versions_at is not None:
            self._versions.append(versions_at)
        if unchanged_at is not None:
            self._unchanged.append(unchanged_at)

    def discard(self, *paths: str) -> None:
        """Delete the folders of a write that failed or made nothing."""
        for path in paths:
            self.table.files.delete(path)

    def write_sorted(self, frame: DataFrame, path: str) -> DataFrame:
        """`_write_sorted` by the table's primary key."""
        return _write_sorted(frame, path, self.table.primary_key)

    def store(self, classified: DataFrame, stats: WriteStats, keep_unchanged: bool, committed: bool) -> None:
        """Write a classified, counted write's versions and (`keep_unchanged`) its
        unchanged rows; a failed write leaves no file: the delta stays usable, or is rolled back."""
        table = self.table
        versions_at, unchanged_at = self.next_paths()
        versions = stats.rows_upserted + stats.rows_deleted
        unchanged = bool(stats.rows_unchanged and keep_unchanged)
        try:
            if versions:
                frame = writes.versions_of(classified, table.schema, table.primary_key, self.delta_num,
                                           committed=committed)
                _write_parquet(frame, versions_at, versions, table.primary_key)
            if unchanged:
                frame = writes.unchanged_of(classified, table.schema)
                _write_parquet(frame, unchanged_at, stats.rows_unchanged, table.primary_key)
        except BaseException:
            self.discard(versions_at, unchanged_at)
            raise
        self.kept(versions_at if versions else None, unchanged_at if unchanged else None)

    def append_versions(self, versions: DataFrame, rows: int) -> None:
        """Write `rows` versions the caller built (no classification) as one write."""
        versions_at, _ = self.next_paths()
        try:
            _write_parquet(versions, versions_at, rows, self.table.primary_key)
        except BaseException:
            self.discard(versions_at)
            raise
        self.kept(versions_at, None)

    def written_folders(self) -> list[str]:
        """The folders of the writes made so far: versions, then unchanged rows."""
        return [*self._versions, *self._unchanged]

    def prior_states(self) -> DataFrame | None:
        """States already written into this hot delta (versions and unchanged rows)."""
        if not self._versions and not self._unchanged:
            return None
        table = self.table
        versions = writes.state_of(table.reader.scan(self._versions), table.schema, table.primary_key)
        unchanged = table.reader.scan(self._unchanged).select(*table.data_columns, SYS_OP)
        return versions.unionByName(unchanged)

    def savepoint(self) -> tuple[int, int]:
        """The writes made so far, to return to with `restore`."""
        return len(self._versions), len(self._unchanged)

    def restore(self, point: tuple[int, int]) -> None:
        """Delete the folders of the writes made since `point`."""
        versions, unchanged = point
        self.discard(*self._versions[versions:], *self._unchanged[unchanged:])
        del self._versions[versions:]
        del self._unchanged[unchanged:]


def write_partitions(spark: SparkSession, rows: int) -> int:
    """Partitions of a write of `rows` that is not small: one per core of the session (a
    Spark Connect client asks `spark.default.parallelism`), at least one per
    `ROWS_PER_FILE`, none below `ROWS_PER_PARTITION` rows."""
    if is_connect_session(spark):
        cores = int(spark.conf.get("spark.default.parallelism", None) or 1)
    else:
        cores = spark.sparkContext.defaultParallelism
    return max(1, math.ceil(rows / ROWS_PER_FILE), min(cores, rows // ROWS_PER_PARTITION))


def _write_parquet(frame: DataFrame, path: str, rows: int, primary_key: Sequence[str]) -> None:
    files = max(1, math.ceil(rows / ROWS_PER_FILE))
    _write_sorted(frame.coalesce(files), path, primary_key)


def _write_sorted(frame: DataFrame, path: str, primary_key: Sequence[str]) -> DataFrame:
    """One file per partition of `frame`, sorted by key (Spark drops the sort when the
    partition already is, as a classification in `partitions` leaves it); returns the
    frame written (its `executionInfo` holds a Spark Connect write's observed metrics)."""
    sorted_frame = frame.sortWithinPartitions(*primary_key)
    # "error", not its alias "errorifexists": Spark Connect accepts only the former.
    sorted_frame.write.mode("error").options(**WRITE_OPTIONS).parquet(path)
    return sorted_frame
