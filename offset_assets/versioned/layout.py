"""Where a versioned table's files live, and the file operations on them.

    {warehouse}/{table}/deltas/{delta_num:012d}-{id}/w{write:04d}/part-*.parquet
    {warehouse}/{table}/deltas/{delta_num:012d}-{id}/_noop/w{write:04d}/...   (writer-only)
    {warehouse}/{table}/snapshots/{delta_num:012d}-{id}/part-*.parquet

Every folder is written once and never changed. Readers read exactly the folders the
catalog names (a delta folder holds one sub-folder per write into the hot delta; names
starting with `_` are skipped by Spark's file listing, which hides the writer's own
bookkeeping). All file operations go through the Hadoop FileSystem API of the Spark JVM,
so the warehouse can be any Hadoop URI (file:, hdfs:, s3a:, abfs:, gs:, ...).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from pyspark.sql import SparkSession

DELTAS_DIR = "deltas"
SNAPSHOTS_DIR = "snapshots"
NOOP_DIR = "_noop"

SYS_FROM = "sys_from"
SYS_TO = "sys_to"
SYS_OP = "sys_op"
UPDATE_TS = "update_ts"
SYSTEM_COLUMNS = (SYS_FROM, SYS_TO, SYS_OP, UPDATE_TS)

OP_UPSERT = 0
OP_DELETE = 1


def table_root(warehouse: str, table_name: str) -> str:
    return f"{warehouse.rstrip('/')}/{table_name}"


def _unique_name(delta_num: int) -> str:
    # The random part keeps a reopened delta number (after a rollback) from ever sharing
    # a folder with the files of the delta that was discarded.
    return f"{delta_num:012d}-{uuid.uuid4().hex[:12]}"


def new_delta_path(root: str, delta_num: int) -> str:
    return f"{root}/{DELTAS_DIR}/{_unique_name(delta_num)}"


def new_snapshot_path(root: str, delta_num: int) -> str:
    return f"{root}/{SNAPSHOTS_DIR}/{_unique_name(delta_num)}"


def write_path(delta_path: str, write_no: int) -> str:
    """Folder of the versions of one write into a hot delta."""
    return f"{delta_path}/w{write_no:04d}"


def noop_path(delta_path: str, write_no: int) -> str:
    """Folder of the rows of one write that created no version (identical to the actual
    state): kept only so that a later write into the same hot delta that gives those
    keys a different state is refused too."""
    return f"{delta_path}/{NOOP_DIR}/w{write_no:04d}"


@dataclass(frozen=True)
class FolderStatus:
    path: str
    name: str
    modified_at: float  # epoch seconds


class WarehouseFiles:
    """Hadoop FileSystem operations (exists, list, delete) through the Spark JVM."""

    def __init__(self, spark: SparkSession) -> None:
        self._jvm = spark._jvm
        self._conf = spark._jsc.hadoopConfiguration()

    def _fs_path(self, path: str):  # noqa: ANN202 - py4j objects
        jpath = self._jvm.org.apache.hadoop.fs.Path(path)
        return jpath.getFileSystem(self._conf), jpath

    def exists(self, path: str) -> bool:
        fs, jpath = self._fs_path(path)
        return bool(fs.exists(jpath))

    def delete(self, path: str) -> bool:
        """Delete a folder and everything under it; False when it did not exist."""
        fs, jpath = self._fs_path(path)
        return bool(fs.delete(jpath, True))

    def list_folders(self, path: str) -> list[FolderStatus]:
        """Sub-folders of `path` (none when `path` does not exist)."""
        fs, jpath = self._fs_path(path)
        if not fs.exists(jpath):
            return []
        return [
            FolderStatus(
                str(status.getPath().toString()),
                status.getPath().getName(),
                status.getModificationTime() / 1000.0,
            )
            for status in fs.listStatus(jpath)
            if status.isDirectory()
        ]
