"""The changed index of a small incremental run, computed by the driver: no Spark job.

When the catalog bounds every version the index reads within the engine's
`held_rows_limit` (the input deltas since the offsets, what a reverse join or a replaced
version's key looks up, the listed failures, the meta deltas since the offsets), the
driver reads them with pyarrow from the files the catalog names (`versioned/held_files.py`)
and applies the rules of the Spark index (`index.py`, `candidates.py`) in Python:

- every version of a primary input's deltas marks its transform key, stamped with its
  update_ts (the commit_ts of its delta); when the transform keys are not the input's
  primary key, a version that replaced a live one marks that one's key too, found inside
  the deltas or, for a record's first version there, in the actual state before them;
- a changed reference version marks the primary records whose join columns hold its join
  values (NULL marks nothing), among the primary's actual rows as of the run snapshot;
- keys whose last processing failed are read from the meta deltas listing failures;
- the meta check keeps a candidate whose key has no newer meta since the offsets, a
  failed one, or one processed before the candidate's update_ts (`update_ts > process_ts`);
  a NULL key finds its own meta.

The result is the rows `held_keys.collect_index` collects (keys..., update_ts, input
name, as Arrow), so batches and marks come from one place (`held_keys.local_from_rows`).
A run this does not cover is indexed by Spark: v1, a pending reprocess request, a table
of other than atomic column types, transform keys other than strings and integers (the
values a Spark collect returns), a join between columns of different types, or reads
beyond the limit. The engine's property test runs both (one shard in five with the limit
0, the Spark index).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.types import ByteType, IntegerType, LongType, ShortType, StringType, StructType

from offset_assets.control_plane.delta_catalog.records import DeltaInfo
from offset_assets.engine.changed_keys.candidates import INPUT_COL, TS_COL
from offset_assets.engine.changed_keys.held_keys import key_order
from offset_assets.engine.changed_keys.request import IndexRequest, listed_failure_deltas, meta_deltas_since
from offset_assets.engine.transformation import Transformation, TransformInput
from offset_assets.versioned.held_files import arrow_schema, held_schema, newest_per_key, read_versions
from offset_assets.versioned.layout import OP_UPSERT, SYS_FROM, SYS_OP
from offset_assets.versioned.reads import actual_bound, versions_bound
from offset_assets.versioned.table import VersionedTable

__all__ = ["held_index"]

_EXACT_KEYS = (StringType, ByteType, ShortType, IntegerType, LongType)

Row = tuple
# One candidate: (key values..., update_ts or None, input name or None).
Candidate = tuple


class _Budget:
    """The versions the driver may still read for one index; a read beyond it gives up."""

    def __init__(self, limit: int) -> None:
        self.left = limit

    def take(self, bound: int | None) -> bool:
        if bound is None or bound > self.left:
            return False
        self.left -= bound
        return True


class _Beyond(Exception):
    """The index reads more than the driver holds: Spark computes it."""


def held_index(t: Transformation, meta: VersionedTable, request: IndexRequest,
               by_input: Mapping[str, Sequence[DeltaInfo]], limit: int) -> pa.Table | None:
    """The changed index rows (keys..., update_ts, input name) of `request`, computed by
    the driver; None when the run is not one it covers (see the module docstring)."""
    if limit <= 0 or not request.use_offsets or request.reprocess_ts is not None:
        return None
    keys = list(t.transform_keys)
    tables = [inp.table for inp in t.inputs] + [meta]
    if not all(held_schema(table.schema, table.primary_key) for table in tables):
        return None
    if not all(isinstance(meta.schema[k].dataType, _EXACT_KEYS) for k in keys):
        return None
    try:
        rows = _Index(t, meta, request, _Budget(limit)).rows(by_input)
    except _Beyond:
        return None
    if len(rows) > limit:  # a reverse join can mark more keys than the versions it read
        return None
    return _as_table(meta, keys, rows)


class _Index:
    def __init__(self, t: Transformation, meta: VersionedTable, request: IndexRequest, budget: _Budget) -> None:
        self.t, self.meta, self.request, self.budget = t, meta, request, budget
        self.keys = list(t.transform_keys)

    def rows(self, by_input: Mapping[str, Sequence[DeltaInfo]]) -> list[Candidate]:
        candidates: list[Candidate] = []
        for inp in self.t.inputs:
            deltas = by_input.get(inp.name)
            if not deltas:
                continue
            marked = self._reverse_join(inp, deltas) if inp.is_reference else self._marks(inp, deltas, self.keys)
            candidates += [(*key, ts, inp.name) for key, ts in marked]
        failures = listed_failure_deltas(self.meta, self.request)
        if failures:
            versions = self._versions(self.meta, failures)
            failed = pc.invert(versions["is_success"].fill_null(True))
            candidates += [(*key, None, None) for key in _tuples(versions.filter(failed), self.keys)]
        meta_deltas = meta_deltas_since(self.meta, self.request, by_input)
        if not candidates or not meta_deltas:
            return candidates
        known = self._known(meta_deltas)
        width = len(self.keys)
        return [row for row in candidates if _unprocessed(known.get(row[:width]), row[width])]

    def _known(self, meta_deltas: Sequence[DeltaInfo]) -> dict[Row, tuple[float | None, bool | None]]:
        """The newest meta version (process_ts, is_success) of each key in `meta_deltas`."""
        newest = newest_per_key(self._versions(self.meta, meta_deltas), self.meta.primary_key)
        return dict(zip(_tuples(newest, self.keys),
                        zip(newest["process_ts"].to_pylist(), newest["is_success"].to_pylist(), strict=True),
                        strict=True))

    def _versions(self, table: VersionedTable, deltas: Sequence[DeltaInfo]) -> pa.Table:
        """The versions `deltas` wrote, with their update_ts (the commit_ts of their delta)."""
        readable = [d for d in deltas if not d.is_empty]
        if not self.budget.take(versions_bound(readable)):
            raise _Beyond
        versions = read_versions(table.files, table.schema, [d.data_path for d in readable])
        commit_ts = {d.delta_num: d.commit_ts for d in deltas}
        stamps = [commit_ts.get(num) for num in versions[SYS_FROM].to_pylist()]
        return versions.append_column(TS_COL, pa.array(stamps, pa.float64()))

    def _actual(self, table: VersionedTable, as_of_delta: int) -> pa.Table:
        """`table`'s live rows as of `as_of_delta`."""
        snapshot, after, _ = table.actual_sources(as_of_delta)
        if not self.budget.take(actual_bound(snapshot, after)):
            raise _Beyond
        folders = ([snapshot.data_path] if snapshot is not None else []) + [d.data_path for d in after]
        versions = newest_per_key(read_versions(table.files, table.schema, folders), table.primary_key)
        return versions.filter(pc.equal(versions[SYS_OP], OP_UPSERT))

    def _marks(self, inp: TransformInput, deltas: Sequence[DeltaInfo], columns: list[str],
               join_values: bool = False) -> list[tuple[Row, float]]:
        """(values of `columns`, update_ts) each version of `deltas` marks, by the rule of
        `candidates._versions_in`; with `join_values`, a NULL among them marks nothing."""
        table = inp.table
        pk = list(table.primary_key)
        versions = self._versions(table, deltas)
        stamps = versions[TS_COL].to_pylist()
        values = _tuples(versions, columns)
        marked = list(zip(values, stamps, strict=True))
        if not set(columns) <= set(pk):
            records = _tuples(versions, pk)
            ops, nums = versions[SYS_OP].to_pylist(), versions[SYS_FROM].to_pylist()
            order = sorted(range(versions.num_rows), key=lambda i: (key_order(records[i]), nums[i]))
            earliest: dict[Row, float] = {}
            previous: int | None = None
            for i in order:
                if previous is not None and records[previous] == records[i]:
                    if ops[previous] == OP_UPSERT:  # it replaced a live version within the deltas
                        marked.append((values[previous], stamps[i]))
                else:
                    earliest[records[i]] = stamps[i]
                previous = i
            first = deltas[0].delta_num
            if first > 1 and earliest:
                before = self._actual(table, first - 1)
                for record, value in zip(_tuples(before, pk), _tuples(before, columns), strict=True):
                    if record in earliest:
                        marked.append((value, earliest[record]))
        if join_values:
            marked = [(value, ts) for value, ts in marked if None not in value]
        return marked

    def _reverse_join(self, ref: TransformInput, deltas: Sequence[DeltaInfo]) -> list[tuple[Row, float]]:
        """(transform key, update_ts) of the primary records a changed reference row points
        at: their join columns hold its join values, as of the run snapshot."""
        join_keys = dict(ref.join_keys)
        changed: dict[Row, list[float]] = {}
        for value, ts in self._marks(ref, deltas, list(join_keys.values()), join_values=True):
            changed.setdefault(value, []).append(ts)
        marked: list[tuple[Row, float]] = []
        primary_cols = list(join_keys)
        for primary in self.t.primary_inputs:
            if not set(primary_cols) <= set(primary.table.data_columns):
                continue
            if any(primary.table.schema[p].dataType != ref.table.schema[r].dataType for p, r in join_keys.items()):
                raise _Beyond  # Spark's join casts one side; leave that to it
            if not changed:
                continue
            rows = self._actual(primary.table, self.request.snapshot.deltas.get(primary.name, 0))
            for key, value in zip(_tuples(rows, self.keys), _tuples(rows, primary_cols), strict=True):
                marked += [(key, ts) for ts in changed.get(value, ())]
        return marked


def _unprocessed(known: tuple[float | None, bool | None] | None, ts: float | None) -> bool:
    """Whether a candidate stays: no meta since the offsets, a failure, or processed before
    its change (a failed key's candidate has no update_ts: it stays only while failed)."""
    if known is None or known[0] is None:
        return True
    process_ts, success = known
    return success is False or (ts is not None and ts > process_ts)


def _tuples(table: pa.Table, columns: Sequence[str]) -> list[Row]:
    return list(zip(*(table[c].to_pylist() for c in columns), strict=True))


def _as_table(meta: VersionedTable, keys: Sequence[str], rows: Sequence[Candidate]) -> pa.Table:
    """`rows` as the Arrow table `held_keys.collect_index` gives: key columns of the meta's
    types, then update_ts and the input name."""
    key_fields = list(arrow_schema(StructType([meta.schema[k] for k in keys]), with_system=False))
    schema = pa.schema([*key_fields, pa.field(TS_COL, pa.float64()), pa.field(INPUT_COL, pa.string())])
    columns = list(zip(*rows, strict=True)) if rows else [()] * len(schema)
    return pa.table([pa.array(list(values), f.type) for values, f in zip(columns, schema, strict=True)], schema=schema)
