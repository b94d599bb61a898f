"""Reads without a JVM: a table's actual state as Arrow (or pandas), from the delta
catalog and the Parquet files, in a Python process with no Spark.

For the consumers that are not Spark (a pandas or DuckDB job, a notebook, a service):
the same rows and types as `VersionedTable.read_actual` (sys_from, sys_to, sys_op and
update_ts included), by the same rules. The catalog is read at one commit state
(`state.py`); only committed deltas are read, exactly the folders the catalog names
(files whose names start with `_` or `.` hidden, as Spark hides them); the actual state
at delta n is the newest version of each key among the latest snapshot at or below n
and the deltas after it, deletes removing the key (a NULL key is a key like any other).

Memory: every version of the snapshot and the deltas after it is held at once (Arrow
holds them uncompressed: for Parquet's compressed and dictionary-encoded columns many
times their size on disk), plus the key columns and 8 bytes per version for the sort
(of the deltas' versions only when the snapshot's rows are looked up by hash:
`_newest_upserts`), plus the result. `max_bytes` (default 256 MiB of files) refuses a
larger table with `TableTooLargeError` before anything is read; such a table is read with Spark
(`VersionedTables`), which spills to disk and runs distributed. docs/reading.md has the
measured peak against the size on disk. Files are opened through the warehouse's fsspec layer
(`WarehouseFiles`): local paths and every URI fsspec speaks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.fs as pafs
from fsspec.implementations.local import LocalFileSystem

from offset_assets.control_plane.database import ControlPlane, connect
from offset_assets.control_plane.delta_catalog import DeltaCatalog
from offset_assets.control_plane.delta_catalog.records import DeltaInfo, SnapshotInfo
from offset_assets.reading.arrow_types import arrow_schema
from offset_assets.reading.errors import FilesRemovedError, TableTooLargeError
from offset_assets.reading.state import CatalogState, Instant, epoch_seconds, parse_timestamp, table_spec
from offset_assets.versioned.errors import VersionedTableError
from offset_assets.versioned.layout import OP_UPSERT, SYS_FROM, SYS_OP, SYS_TO, UPDATE_TS, WarehouseFiles

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["DEFAULT_MAX_BYTES", "ArrowHistory", "ArrowRead", "read_arrow", "read_pandas"]

DEFAULT_MAX_BYTES = 256 << 20


@dataclass(frozen=True)
class ArrowRead:
    """A planned read of a table's actual state: the files of its snapshot and deltas at
    one committed catalog state. `read()` reads them; a file removed in between is
    `FilesRemovedError`, and a new plan (`plan`) reads the catalog as it is now."""

    table: str
    primary_key: list[str]
    schema: pa.Schema  # the data columns
    delta: int  # the state is as of this committed delta
    snapshot_files: list[tuple[str, int]]  # (path, bytes): rows of the snapshot, one per key
    delta_files: list[tuple[str, int]]  # versions of the deltas after the snapshot
    snapshot_stores_update_ts: bool
    commit_times: dict[int, float]  # delta -> commit_ts, for update_ts
    file_system: pafs.FileSystem

    @property
    def bytes_on_disk(self) -> int:
        return sum(size for _, size in self.snapshot_files + self.delta_files)

    @classmethod
    def plan(cls, plane: ControlPlane | str, name: str, as_of_delta: int | None = None,
             as_of: str | Instant | None = None, max_bytes: int | None = DEFAULT_MAX_BYTES) -> ArrowRead:
        """The read of table `name`'s actual state as of committed delta `as_of_delta`, or
        as a reader saw it at `as_of` (a datetime, epoch seconds, or ISO 8601 text: UTC
        unless it names an offset, as the project's Spark sessions read a TIMESTAMP),
        else as of the last committed delta. `TableTooLargeError` when its files hold
        more than `max_bytes` (None: no limit)."""
        if as_of_delta is not None and as_of is not None:
            raise VersionedTableError(name, "give as_of_delta or as_of, not both")
        plane = connect(plane, create=False) if isinstance(plane, str) else plane
        catalog = DeltaCatalog(plane)
        table_spec(catalog, name)
        state = CatalogState.pin(catalog, [name])
        if as_of is None:
            delta = state.as_of_delta(name, as_of_delta)
        else:
            delta = state.as_of_time(catalog, name, _instant(name, as_of))
        return cls.at(catalog, name, delta, max_bytes)

    @classmethod
    def at(cls, catalog: DeltaCatalog, name: str, delta: int, max_bytes: int | None = DEFAULT_MAX_BYTES) -> ArrowRead:
        """The read of table `name`'s actual state as of committed delta `delta` (a state
        the caller pinned: `CatalogState`)."""
        spec = table_spec(catalog, name)
        snapshot = catalog.snapshot_at(name, delta) if delta else None
        stored = snapshot is not None and snapshot.stores_update_ts
        base = snapshot.delta_num if snapshot is not None else 0
        listed = catalog.committed(name, up_to_delta=delta, after_delta=base if stored else None) if delta else []
        after = [d for d in listed if d.delta_num > base and not d.is_empty]
        files = WarehouseFiles()
        snapshot_files = _files(files, name, snapshot.data_path) if snapshot is not None else []
        delta_files = [f for d in after for f in _files(files, name, d.data_path)]
        planned = cls(name, spec.primary_key, arrow_schema(spec.schema_json), delta, snapshot_files, delta_files,
                      stored, {d.delta_num: d.commit_ts for d in listed}, _arrow_file_system(files, snapshot, after))
        _check_size(name, planned.bytes_on_disk, max_bytes)
        return planned

    def read(self) -> pa.Table:
        """The actual state: the table's columns, then sys_from, sys_to, sys_op, update_ts,
        typed as Spark's `toArrow()` of the same read types them."""
        columns = self.schema.names
        stored = _file_arrow_schema(self.schema, with_update_ts=True)
        snapshot = self._scan(self.snapshot_files, stored if self.snapshot_stores_update_ts else stored.remove(
            stored.get_field_index(UPDATE_TS)))
        versions = self._scan(self.delta_files, stored.remove(stored.get_field_index(UPDATE_TS)))
        if UPDATE_TS not in snapshot.column_names:
            snapshot = snapshot.append_column(UPDATE_TS, pa.nulls(snapshot.num_rows, pa.float64()))
        versions = versions.append_column(UPDATE_TS, pa.nulls(versions.num_rows, pa.float64()))
        state = _newest_upserts(snapshot, versions, self.primary_key)
        update_ts = pc.coalesce(state[UPDATE_TS], self._commit_ts(state[SYS_FROM]))
        result = state.select(columns + [SYS_FROM]).append_column(SYS_TO, pa.nulls(state.num_rows, pa.int64()))
        return result.append_column(SYS_OP, state[SYS_OP]).append_column(UPDATE_TS, update_ts)

    def _scan(self, files: list[tuple[str, int]], schema: pa.Schema) -> pa.Table:
        return _scan(self.table, self.delta, self.file_system, files, schema)

    def _commit_ts(self, sys_from: pa.ChunkedArray) -> pa.Array:
        return _commit_ts(self.commit_times, sys_from)


@dataclass(frozen=True)
class ArrowHistory:
    """A planned read of the versions some committed deltas wrote (`STARTED IN`,
    `FINISHED IN`): their files, with `sys_to` as history stood at the last of them."""

    table: str
    primary_key: list[str]
    schema: pa.Schema  # the data columns
    deltas: list[DeltaInfo]
    files: list[tuple[str, int]]
    file_system: pafs.FileSystem

    @classmethod
    def at(cls, catalog: DeltaCatalog, name: str, deltas: Sequence[DeltaInfo],
           max_bytes: int | None = DEFAULT_MAX_BYTES) -> ArrowHistory:
        spec = table_spec(catalog, name)
        readable = [d for d in deltas if not d.is_empty]
        files = WarehouseFiles()
        planned = cls(name, spec.primary_key, arrow_schema(spec.schema_json), list(deltas),
                      [f for d in readable for f in _files(files, name, d.data_path)],
                      _arrow_file_system(files, None, readable))
        _check_size(name, sum(size for _, size in planned.files), max_bytes)
        return planned

    def read(self, sys_op: int | None = None) -> pa.Table:
        """The versions (only those of `sys_op`, when given): the table's columns, then
        sys_from, sys_to (the key's next version's sys_from - 1 among them), sys_op and
        update_ts, as `TableReader.history` reads them."""
        last = self.deltas[-1].delta_num if self.deltas else 0
        stored = _file_arrow_schema(self.schema, with_update_ts=False)
        versions = _scan(self.table, last, self.file_system, self.files, stored)
        order = pc.sort_indices(versions, sort_keys=[(k, "ascending") for k in self.primary_key]
                                + [(SYS_FROM, "ascending")], null_placement="at_end")
        versions = versions.take(order)
        sys_to = _next_version_minus_one(versions, self.primary_key)
        update_ts = _commit_ts({d.delta_num: d.commit_ts for d in self.deltas}, versions[SYS_FROM])
        result = versions.select(self.schema.names + [SYS_FROM]).append_column(SYS_TO, sys_to)
        result = result.append_column(SYS_OP, versions[SYS_OP]).append_column(UPDATE_TS, update_ts)
        return result if sys_op is None else result.filter(pc.equal(result[SYS_OP], sys_op))


def read_arrow(plane: ControlPlane | str, name: str, as_of_delta: int | None = None,
               as_of: str | Instant | None = None, max_bytes: int | None = DEFAULT_MAX_BYTES) -> pa.Table:
    """Table `name`'s actual state (as of committed delta `as_of_delta`, or as a reader
    saw it at `as_of`) as an Arrow table, without a JVM: the rows and types
    `VersionedTable.read_actual(...).toArrow()` gives. `plane` is a `ControlPlane` or its
    URL. Refused with `TableTooLargeError` when its files exceed `max_bytes` (None: no
    limit): read a large table with Spark."""
    return ArrowRead.plan(plane, name, as_of_delta, as_of, max_bytes).read()


def read_pandas(plane: ControlPlane | str, name: str, as_of_delta: int | None = None,
                as_of: str | Instant | None = None, max_bytes: int | None = DEFAULT_MAX_BYTES) -> pd.DataFrame:
    """`read_arrow(...)` as a pandas DataFrame (Arrow's `to_pandas`; needs pandas)."""
    return read_arrow(plane, name, as_of_delta, as_of, max_bytes).to_pandas()


def _instant(table: str, at: str | Instant) -> float:
    if not isinstance(at, str):
        return epoch_seconds(table, at)
    ts = parse_timestamp(at, "UTC")
    if ts is None:
        raise VersionedTableError(table, f"as_of {at!r} is not an ISO 8601 timestamp")
    return ts


def _files(files: WarehouseFiles, table: str, folder: str) -> list[tuple[str, int]]:
    found = files.data_files(folder)
    if not found:
        raise FilesRemovedError(f"table {table!r}: {folder}, which the delta catalog names, holds no files "
                                "(removed by a cleanup after the catalog was read?): read it again")
    return found


def _arrow_file_system(files: WarehouseFiles, snapshot: SnapshotInfo | None,
                       deltas: Sequence[DeltaInfo]) -> pafs.FileSystem:
    """Arrow's own local file system for local paths (fsspec's through Arrow's Python
    handler costs a call per read), else the fsspec file system of the table's files."""
    some = snapshot.data_path if snapshot is not None else deltas[0].data_path if deltas else None
    fs = files.file_system(some) if some is not None else LocalFileSystem()
    return pafs.LocalFileSystem() if isinstance(fs, LocalFileSystem) else pafs.PyFileSystem(pafs.FSSpecHandler(fs))


def _file_arrow_schema(schema: pa.Schema, with_update_ts: bool) -> pa.Schema:
    """The Arrow types of the files' columns as Spark reads them (data columns, sys_op,
    sys_from: `table_schema.file_schema`; and update_ts, which snapshots store), every
    column nullable."""
    fields = [*schema, pa.field(SYS_OP, pa.int32()), pa.field(SYS_FROM, pa.int64())]
    if with_update_ts:
        fields.append(pa.field(UPDATE_TS, pa.float64()))
    return pa.schema([f.with_nullable(True) for f in fields])


def _check_size(table: str, bytes_on_disk: int, max_bytes: int | None) -> None:
    if max_bytes is not None and bytes_on_disk > max_bytes:
        raise TableTooLargeError(
            f"table {table!r}: its actual state is read from {bytes_on_disk:,} bytes of files, "
            f"above max_bytes={max_bytes:,} for a read without a JVM: read it with Spark "
            "(VersionedTables, offset-assets sql), or raise max_bytes")


def _scan(table: str, delta: int, file_system: pafs.FileSystem, files: list[tuple[str, int]],
          schema: pa.Schema) -> pa.Table:
    if not files:
        return schema.empty_table()
    parquet = ds.ParquetFileFormat(read_options=ds.ParquetReadOptions(coerce_int96_timestamp_unit="us"))
    try:
        return ds.dataset([path for path, _ in files], schema=schema, format=parquet,
                          filesystem=file_system).to_table()
    except FileNotFoundError as exc:
        raise FilesRemovedError(
            f"table {table!r}: a file of its state as of delta {delta} was removed while this "
            f"read ran ({str(exc).splitlines()[0][:300]}; cleanup removes a snapshot once a newer one has "
            "superseded it for longer than its retention): read it again") from None


def _commit_ts(commit_times: dict[int, float], sys_from: pa.ChunkedArray) -> pa.Array:
    """The commit_ts of each version's delta, looked up by number."""
    if not commit_times:
        return pa.nulls(len(sys_from), pa.float64())
    base = min(commit_times)
    times = pa.array([commit_times.get(n) for n in range(base, max(commit_times) + 1)], pa.float64())
    positions = pc.subtract(sys_from, base)
    inside = pc.and_(pc.greater_equal(positions, 0), pc.less(positions, len(times)))
    return pc.take(times, pc.if_else(inside, positions, pa.scalar(None, pa.int64())))


def _next_version_minus_one(versions: pa.Table, primary_key: list[str]) -> pa.Array:
    """For versions sorted by key and sys_from: the next version's sys_from - 1 where the
    next row is the same key (NULL equals NULL), else null."""
    if versions.num_rows == 0:
        return pa.array([], pa.int64())
    first = None
    for column in versions.select(primary_key).columns:
        changed = _differs_from_previous(column.combine_chunks())
        first = changed if first is None else pc.or_(first, changed)
    next_is_same_key = pc.invert(pa.concat_arrays([first.slice(1), pa.array([True])]))
    following = pa.concat_arrays([versions[SYS_FROM].combine_chunks().slice(1), pa.array([None], pa.int64())])
    return pc.if_else(next_is_same_key, pc.subtract(following, 1), pa.scalar(None, pa.int64()))


# Key types whose equal values hash alike, as Spark compares them (not floating point:
# Arrow's hash tells -0.0 from 0.0; not nested types, which `is_in` does not take).
_HASHED_KEY_TYPES = (pa.types.is_integer, pa.types.is_string, pa.types.is_large_string, pa.types.is_binary,
                     pa.types.is_date, pa.types.is_timestamp, pa.types.is_decimal, pa.types.is_boolean)


def _newest_upserts(snapshot: pa.Table, versions: pa.Table, primary_key: list[str]) -> pa.Table:
    """The actual state from `snapshot` (one upsert per key) and the deltas' `versions`
    after it: the newest version of each key, unless it is a delete.

    With one key column that hashes as Spark compares it (`_HASHED_KEY_TYPES`), the
    snapshot rows are kept by a hash lookup of the keys the deltas wrote, and only the
    deltas' versions are sorted: a maintained table's deltas are a small part of it, and
    the read costs little more than its files' scan. Otherwise the snapshot and the
    versions are sorted together."""
    if versions.num_rows == 0:
        return snapshot
    key_type = versions.schema.field(primary_key[0]).type
    if len(primary_key) == 1 and snapshot.num_rows and any(kind(key_type) for kind in _HASHED_KEY_TYPES):
        newest = versions.take(_newest_per_key(versions, primary_key))
        live = newest.filter(pc.equal(newest[SYS_OP], OP_UPSERT))
        # skip_nulls=False: a NULL key in the deltas replaces the snapshot's NULL key row.
        replaced = pc.is_in(snapshot[primary_key[0]], value_set=newest[primary_key[0]].combine_chunks(),
                            skip_nulls=False)
        return pa.concat_tables([snapshot.filter(pc.invert(replaced)), live])
    every = pa.concat_tables([snapshot, versions])
    newest = _newest_per_key(every, primary_key)
    return every.take(pc.filter(newest, pc.equal(pc.take(every[SYS_OP], newest), OP_UPSERT)))


def _newest_per_key(versions: pa.Table, primary_key: list[str]) -> pa.Array:
    """The positions in `versions` of the newest version (highest sys_from) of each key,
    in key order; NULL is a key value and equals itself, as in Spark's grouping."""
    order = pc.sort_indices(versions, sort_keys=[(k, "ascending") for k in primary_key] + [(SYS_FROM, "descending")],
                            null_placement="at_end")
    keys = versions.select(primary_key).take(order)
    first = None
    for column in keys.columns:
        changed = _differs_from_previous(column.combine_chunks())
        first = changed if first is None else pc.or_(first, changed)
    return pc.filter(order, first)


def _differs_from_previous(values: pa.Array) -> pa.Array:
    """True where a value differs from the one before it (the first row always): NULL
    equals NULL, NaN equals NaN, as Spark groups them."""
    if len(values) == 0:
        return pa.array([], pa.bool_())
    current, previous = values.slice(1), values.slice(0, len(values) - 1)
    same = pc.fill_null(pc.equal(current, previous), False)
    same = pc.or_(same, pc.and_(pc.is_null(current), pc.is_null(previous)))
    if pa.types.is_floating(values.type):
        same = pc.or_(same, pc.fill_null(pc.and_(pc.is_nan(current), pc.is_nan(previous)), False))
    return pa.concat_arrays([pa.array([True]), pc.invert(same)])
