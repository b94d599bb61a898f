"""Where a versioned table's files live, and the file operations on them.

    {warehouse}/{table}/deltas/{delta_num:012d}-{id}/w{write:04d}/part-*.parquet
    {warehouse}/{table}/deltas/{delta_num:012d}-{id}/_noop/w{write:04d}/...   (writer-only)
    {warehouse}/{table}/snapshots/{delta_num:012d}-{id}/part-*.parquet

Every folder is written once and never changed. Readers read exactly the folders the
catalog names (a delta folder holds one sub-folder per write into the hot delta; names
starting with `_` are skipped by Spark's file listing, which hides the writer's own
bookkeeping). Spark reads and writes the Parquet files; the few operations Spark has no
DataFrame API for (exists, list, delete) go through fsspec on the Python side, so they
work the same whether the session is a local driver, a cluster driver or a Spark Connect
client (which has no JVM to ask). fsspec speaks the URIs Hadoop does: local paths and
`file://`, `hdfs://` (through pyarrow's libhdfs), `s3a://` (s3fs), `abfs[s]://` (adlfs),
`gs://` (gcsfs), once the implementation package is installed.
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import fsspec
from fsspec.core import split_protocol

from offset_assets.errors import OffsetAssetsError

if TYPE_CHECKING:  # the reads without a JVM list files with this module: no PySpark import
    from offset_assets.lazy_session import SessionSource

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

# Versions per Parquet file written by one write into a delta (more files only for very
# large writes).
ROWS_PER_FILE = 1_000_000


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


class WarehousePathError(OffsetAssetsError, ValueError):
    """The warehouse location cannot be used by this session (the message names it)."""


def check_warehouse_location(spark: SessionSource, warehouse: str) -> str:
    """`warehouse` unchanged when every process that touches it resolves it alike.

    A relative path means the current folder of whoever resolves it: the driver's with a
    local master (the only process), but each executor's own work folder on a cluster and
    the server's on Spark Connect, so files would scatter or vanish. Refused there, before
    anything is written, with the path named.
    """
    from offset_assets.lazy_session import LazySession
    from offset_assets.spark import is_local_driver

    protocol, _ = split_protocol(warehouse)
    if protocol is None and not os.path.isabs(warehouse) and not is_local_driver(LazySession(spark).get()):
        raise WarehousePathError(
            f"warehouse {warehouse!r} is a relative path, which executors (or a Spark Connect "
            "server) resolve against their own working folder: use an absolute path or a URI "
            "such as hdfs://namenode/warehouse"
        )
    return warehouse


@dataclass(frozen=True)
class FolderStatus:
    path: str
    name: str
    modified_at: float  # epoch seconds


class WarehouseFiles:
    """exists, list and delete on warehouse URIs, through fsspec (one file system per URI
    scheme, created on first use)."""

    def __init__(self) -> None:
        self._file_systems: dict[str, fsspec.AbstractFileSystem] = {}

    def _fs(self, path: str) -> fsspec.AbstractFileSystem:
        protocol = split_protocol(path)[0] or "file"
        if protocol not in self._file_systems:
            try:
                self._file_systems[protocol] = fsspec.core.url_to_fs(path)[0]
            except (ImportError, OSError, ValueError) as exc:
                raise WarehousePathError(
                    f"cannot open the file system of {path!r}: {str(exc).splitlines()[0]}"
                ) from None
        return self._file_systems[protocol]

    def exists(self, path: str) -> bool:
        return bool(self._fs(path).exists(path))

    def delete(self, path: str) -> bool:
        """Delete a folder and everything under it; False when it did not exist."""
        fs = self._fs(path)
        if not fs.exists(path):
            return False
        fs.rm(path, recursive=True)
        return True

    def file_system(self, path: str) -> fsspec.AbstractFileSystem:
        """The fsspec file system of `path`'s scheme (for a reader that opens files itself)."""
        return self._fs(path)

    def data_files(self, path: str) -> list[tuple[str, int]]:
        """(path, size in bytes) of the data files at any depth under folder `path`, as
        Spark's listing finds them: a name starting with `_` or `.` below `path` (a
        writer's own bookkeeping, `_SUCCESS`, checksums) hides the file or folder. Paths
        are the file system's own (`file_system(path)` opens them); none when `path`
        does not exist."""
        folder = path.rstrip("/").rsplit("/", 1)[-1]
        files = []
        for name, info in sorted(self._fs(path).find(path, detail=True).items()):
            below = name.split(f"/{folder}/", 1)[-1]
            if info["type"] == "file" and not any(part.startswith(("_", ".")) for part in below.split("/")):
                files.append((name, int(info["size"])))
        return files

    def list_folders(self, path: str) -> list[FolderStatus]:
        """Sub-folders of `path` (none when `path` does not exist), named in the URI form
        of `path` so that they can be passed back to `delete`."""
        fs = self._fs(path)
        if not fs.exists(path):
            return []
        base = path.rstrip("/")
        folders = []
        for entry in fs.ls(path, detail=True):
            if entry["type"] != "directory":
                continue
            name = entry["name"].rstrip("/").rsplit("/", 1)[-1]
            folders.append(FolderStatus(f"{base}/{name}", name, _modified_at(fs, entry)))
        return folders


def _modified_at(fs: fsspec.AbstractFileSystem, entry: dict[str, Any]) -> float:
    """Epoch seconds of a folder's last change. Local and HDFS listings carry `mtime`;
    object stores have no folder objects, so the newest file inside stands for it."""
    if entry.get("mtime") is not None:
        return float(entry["mtime"])
    times = [fs.modified(name).timestamp() for name in fs.find(entry["name"])]
    return max(times, default=0.0)
