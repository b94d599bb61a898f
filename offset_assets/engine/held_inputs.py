"""A small batch's input rows read by the driver: no Spark job, no Parquet scan planned.

When the driver holds a batch's keys (collected from Spark, so typed) and the catalog
bounds every version the batch's reads scan within the engine's `held_rows_limit`, the
rows are read with pyarrow from the files the catalog names (`versioned/held_files.py`),
by the rules of the Spark reads in `loading.py`: a primary input's keys that its own
changes marked from the deltas the changed index read (their newest version is there),
its other keys from its actual state as of the run snapshot, a reference only for the
join values its primary rows hold (NULL excepted: it joins nothing). Counting them and
finding those join values is then Python, not a Spark job each, and the function gets
them as local relations (`createDataFrame` of the Arrow table: the rows travel in the
plan, to a Spark Connect server too).

A batch whose reads the catalog cannot bound, or that reads a table of other than
atomic column types (`held_files.held_schema`), is read by Spark (`InputLoader`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame

from offset_assets.control_plane.delta_catalog.records import DeltaInfo
from offset_assets.engine.loading import KeyValues
from offset_assets.engine.result import RunResult
from offset_assets.engine.transformation import Transformation, TransformInput
from offset_assets.versioned.held_files import arrow_schema, held_schema, key_filter, newest_per_key, read_versions
from offset_assets.versioned.layout import OP_UPSERT, SYS_OP
from offset_assets.versioned.reads import actual_bound, versions_bound
from offset_assets.versioned.table import VersionedTable


@dataclass(frozen=True)
class _Read:
    """Where one input's rows for a batch come from: the folders of the versions read and
    the catalog's bound on them, and the key filter applied to the newest versions."""

    folders: list[str]
    bound: int | None
    columns: tuple[str, ...]
    keys: frozenset[tuple]


@dataclass(frozen=True)
class HeldInputs:
    """The input frames of batches read by the driver (see the module docstring):
    `snapshot_deltas`, `deltas_read` and `marked_by` as `loading.InputLoader` has them;
    `limit`: the most versions the driver reads for one batch."""

    t: Transformation
    snapshot_deltas: Mapping[str, int]
    deltas_read: Mapping[str, Sequence[DeltaInfo]]
    marked_by: Mapping[str, frozenset[tuple]]
    limit: int

    def frames(self, keys: KeyValues, result: RunResult) -> dict[str, DataFrame] | None:
        """Actual rows of every input for the batch's `keys`, as local relations, counted
        into `result`; None when the batch is not read by the driver."""
        t = self.t
        if not keys.typed or not all(held_schema(inp.table.schema, inp.table.primary_key) for inp in t.inputs):
            return None
        plans = {inp.name: self._primary_reads(inp, keys) for inp in t.primary_inputs}
        if not self._within_limit([read for reads in plans.values() for read in reads]):
            return None
        rows = {name: self._read(_table(t, name), reads) for name, reads in plans.items()}
        for ref in t.reference_inputs:
            values = _join_values(ref, [rows[inp.name] for inp in t.primary_inputs])
            read = self._actual(ref.table, tuple(ref.join_keys.values()), values)
            if not self._within_limit([read]):
                return None
            rows[ref.name] = self._read(ref.table, [read])
        for name, table in rows.items():
            result.add_rows_read(name, table.num_rows)
        return {name: _local_relation(_table(t, name), table) for name, table in rows.items()}

    def _within_limit(self, reads: Sequence[_Read]) -> bool:
        bounds = [read.bound for read in reads]
        return None not in bounds and sum(bounds) <= self.limit

    def _primary_reads(self, inp: TransformInput, keys: KeyValues) -> list[_Read]:
        """A primary input's reads: the keys its own changes marked from the deltas the
        changed index read, when its primary key is the transform key; the others from its
        actual state."""
        table, columns = inp.table, tuple(keys.columns)
        deltas = [d for d in self.deltas_read.get(inp.name, ()) if not d.is_empty]
        if not self.deltas_read.get(inp.name) or set(table.primary_key) != set(self.t.transform_keys):
            return [self._actual(table, columns, keys.rows)]
        marked = self.marked_by.get(inp.name, frozenset())
        via_changes = frozenset(k for k in keys.rows if k in marked)
        others = frozenset(keys.rows) - via_changes
        reads = (
            [_Read([d.data_path for d in deltas], versions_bound(deltas), columns, via_changes)] if via_changes else []
        )
        return reads + ([self._actual(table, columns, others)] if others else [])

    def _actual(self, table: VersionedTable, columns: tuple[str, ...], keys: Sequence[tuple] | frozenset) -> _Read:
        """The read of `table`'s actual rows, as of the run snapshot, whose `columns` hold `keys`."""
        snapshot, after, _ = table.actual_sources(self.snapshot_deltas.get(table.name, 0))
        folders = ([snapshot.data_path] if snapshot is not None else []) + [d.data_path for d in after]
        return _Read(folders, actual_bound(snapshot, after), columns, frozenset(keys))

    def _read(self, table: VersionedTable, reads: Sequence[_Read]) -> pa.Table:
        """The rows of `reads`: per read, the newest version of each key among its
        folders, live ones only, then the key filter (after the newest version is chosen:
        a filter on a non-key column must not find an archived version)."""
        parts = []
        for read in reads:
            if not read.keys:
                continue
            versions = newest_per_key(read_versions(table.files, table.schema, read.folders), table.primary_key)
            live = versions.filter(pc.equal(versions[SYS_OP], OP_UPSERT))
            parts.append(key_filter(live, read.columns, read.keys).select(table.data_columns))
        return pa.concat_tables(parts) if parts else arrow_schema(table.schema, with_system=False).empty_table()


def _table(t: Transformation, name: str) -> VersionedTable:
    return next(inp.table for inp in t.inputs if inp.name == name)


def _join_values(ref: TransformInput, primary_rows: Sequence[pa.Table]) -> frozenset[tuple]:
    """The values of `ref`'s join columns in the primary rows, NULL excepted (SQL's join
    matches no row to a NULL)."""
    found: set[tuple] = set()
    for rows in primary_rows:
        if not set(ref.join_keys) <= set(rows.column_names):
            continue
        found.update(zip(*(rows[c].to_pylist() for c in ref.join_keys), strict=True))
    return frozenset(value for value in found if None not in value)


def _local_relation(table: VersionedTable, rows: pa.Table) -> DataFrame:
    """`rows` as a local relation of `table`'s data columns and types."""
    return table.spark.createDataFrame(rows.cast(arrow_schema(table.schema, with_system=False)), table.schema)
