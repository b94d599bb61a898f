"""A write of rows the driver holds, classified and stored by the driver: no Spark job.

The rules are `writes.py`'s, applied to an Arrow table of a few rows instead of a Spark
plan: each row reduced to its state (data columns and sys_op, the non-key columns of a
delete ignored); per key, a row the caller refuses, a NULL in a key column declared not
nullable, a bad sys_op, a NULL in a non-nullable column of an upsert, two different
states in the write or a state different from an earlier write's into the same hot
delta refuse the whole write (`write_refusals.refuse`: the same errors), the same state
again collapses, an upsert equal to the actual version or a delete of an absent key makes
no version, anything else a version (a tombstone carries the data of the version it
deletes). A replacing write (`HeldReplacement`) deletes each replaced key's actual row
that it holds no row for. States compare as Spark's `<=>` does (NULL equals NULL, NaN
equals NaN, 0.0 equals -0.0).

The versions it is classified against are read with pyarrow from the folders the catalog
names (`write_candidates.committed_before`), the earlier writes' from the hot delta's own
folders, and the versions and unchanged rows are written as Parquet files of the types
Spark gives them (`held_files.py`). The caller keeps such writes small: every row is a
Python value here.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import pyarrow as pa
import pyarrow.compute as pc

from offset_assets.versioned import writes
from offset_assets.versioned.delta_files import DeltaFiles
from offset_assets.versioned.held_files import (
    arrow_schema,
    key_filter,
    key_range_filter,
    newest_per_key,
    read_versions,
    write_versions,
)
from offset_assets.versioned.hot_table import HotTable
from offset_assets.versioned.layout import OP_DELETE, OP_UPSERT, SYS_FROM, SYS_OP
from offset_assets.versioned.write_candidates import check_key_range, committed_before
from offset_assets.versioned.write_refusals import MAX_EXAMPLES, refuse
from offset_assets.versioned.writes import Refusal, StateOrder, WriteStats

__all__ = ["HeldReplacement", "HeldTarget", "append_held", "same", "write_held"]


class HeldTarget(Protocol):
    """What a write the driver holds writes into (`HotDelta` is one): its table, its
    delta's number and the files its earlier writes left."""

    table: HotTable
    delta_num: int
    files: DeltaFiles


@dataclass(frozen=True)
class HeldReplacement:
    """The keys whose actual rows a write replaces (`writes.Replacement` for rows the
    driver holds): tuples of `columns` values, columns of the table's primary key."""

    columns: tuple[str, ...]
    keys: frozenset[tuple]


@dataclass
class _Key:
    """One key's rows in a write, what it had before, and what it becomes. `states`: every
    row's; `last`: those at the key's highest order in an ordered write (`StateOrder`),
    the rows its state comes from (None: every row)."""

    states: list[tuple]
    last: list[tuple] | None = None
    refused: bool = False
    prior: tuple | None = None
    actual: dict[str, Any] | None = None
    kind: str = writes.UPSERT


def write_held(
    hot: HeldTarget, rows: pa.Table, refusal: Refusal | None, keep_unchanged: bool, replacing: HeldReplacement | None,
    key_range: tuple[Any, Any] | None = None, order: StateOrder | None = None,
) -> WriteStats:
    """Classify `rows` (the table's data columns, optional sys_op, and the refusal's flag
    column) against the committed versions and the hot delta's earlier writes, then
    write their versions (and, `keep_unchanged`, their unchanged rows) into `hot`. A
    refused write raises before any file is written. `key_range`: the caller's bounds of
    the first key column (an id range's), which bound the committed versions read (their
    row groups skipped by statistics); a row outside them refuses the write. `order`: a
    key's state is its last row's by `order.order_by`, a column of `rows` (a NULL lower
    than any value; no `within`; the caller makes sure that a `unique` order holds no
    tie, which Spark's write would break by the state's own order)."""
    table = hot.table
    pk, columns = list(table.primary_key), table.data_columns
    if key_range is not None and rows.num_rows:
        extent = pc.min_max(rows[pk[0]])
        check_key_range(table, key_range, extent["min"].as_py(), extent["max"].as_py())
    if order is not None and order.within is not None:
        raise ValueError("the driver's write orders a key's rows by one column, not within another")
    incoming = _states(rows, columns, pk, refusal, order)
    keys = _group(incoming, order)
    for key, actual in _candidates(hot, pk, replacing, keys, key_range).items():
        if key in keys:
            keys[key].actual = actual
        elif replacing is not None and actual[SYS_OP] == OP_UPSERT:
            keys[key] = _Key(states=[_delete_state(key, pk, columns)], actual=actual)
    for key, state in _prior_states(hot, pk, columns).items():
        if key in keys:
            keys[key].prior = state
    counts = _classify(keys, table.schema, pk, columns)
    refuse(table, hot.delta_num, counts, _rows_of(keys, pk, incoming, refusal), refusal,
           None if order is None else (order, None))
    return _store(hot, keys, counts, pk, columns, keep_unchanged)


def append_held(hot: HeldTarget, rows: pa.Table) -> WriteStats:
    """Append `rows` (the table's data columns) as new versions of distinct keys not
    written earlier into `hot`, without classification (`HotDelta.write_new_versions`)."""
    table = hot.table
    versions = rows.select(table.data_columns).append_column(SYS_OP, pa.array([OP_UPSERT] * rows.num_rows, pa.int32()))
    versions = versions.append_column(SYS_FROM, pa.array([hot.delta_num] * rows.num_rows, pa.int64()))
    versions_at, _ = hot.files.next_paths()
    write_versions(table.files, versions_at, versions, table.schema, table.primary_key)
    hot.files.kept(versions_at, None)
    return WriteStats(rows.num_rows, 0, 0)


# -- classification -------------------------------------------------------------------


def _states(rows: pa.Table, columns: Sequence[str], pk: Sequence[str], refusal: Refusal | None,
            order: StateOrder | None = None) -> list[dict]:
    """Each row as a dict: its state (`state`, a tuple of the data columns and sys_op, the
    non-key columns of a delete None), its key (`key`), its values (`row`) and, ordered,
    its order value (`order`)."""
    names = rows.column_names
    ops = rows[SYS_OP].to_pylist() if SYS_OP in names else [OP_UPSERT] * rows.num_rows
    flags = rows[refusal.column].to_pylist() if refusal is not None else [False] * rows.num_rows
    orders = rows[order.order_by].to_pylist() if order is not None else [None] * rows.num_rows
    values = rows.select(list(columns)).to_pylist()
    found = []
    for row, op, flag, at in zip(values, ops, flags, orders, strict=True):
        state = tuple(row[c] if c in pk or op != OP_DELETE else None for c in columns) + (op,)
        found.append({"key": tuple(row[c] for c in pk), "state": state, "row": row, "refused": bool(flag),
                      "order": at})
    return found


def _group(incoming: list[dict], order: StateOrder | None = None) -> dict[tuple, _Key]:
    keys: dict[tuple, _Key] = {}
    for item in incoming:
        entry = keys.setdefault(item["key"], _Key(states=[]))
        entry.states.append(item["state"])
        entry.refused = entry.refused or item["refused"]
    if order is None:
        return keys
    orders: dict[tuple, list] = {}
    for item in incoming:
        orders.setdefault(item["key"], []).append(item["order"])
    for key, entry in keys.items():
        present = [at for at in orders[key] if at is not None]
        highest = max(present) if present else None  # a NULL is lower than any value
        entry.last = [state for state, at in zip(entry.states, orders[key], strict=True) if at == highest]
    return keys


def _delete_state(key: tuple, pk: Sequence[str], columns: Sequence[str]) -> tuple:
    values = dict(zip(pk, key, strict=True))
    return tuple(values.get(c) for c in columns) + (OP_DELETE,)


def _prior_states(hot: HeldTarget, pk: Sequence[str], columns: Sequence[str]) -> dict[tuple, tuple]:
    """The states the earlier writes into `hot` gave their keys (versions and unchanged rows)."""
    folders = hot.files.written_folders()
    if not folders:
        return {}
    prior = {}
    for row in read_versions(hot.table.files, hot.table.schema, folders).to_pylist():
        op = row[SYS_OP]
        prior[tuple(row[c] for c in pk)] = tuple(row[c] if c in pk or op != OP_DELETE else None for c in columns) + (
            op,
        )
    return prior


def _candidates(
    hot: HeldTarget, pk: Sequence[str], replacing: HeldReplacement | None, keys: Mapping[tuple, _Key],
    key_range: tuple[Any, Any] | None = None,
) -> dict[tuple, dict[str, Any]]:
    """The newest committed version of each key the write concerns (the replaced keys'
    with `replacing`, else the written keys'; within `key_range` when given)."""
    committed = committed_before(hot.table, hot.delta_num)
    if committed is None:
        return {}
    where = None if key_range is None else key_range_filter(hot.table.schema, pk[0], *key_range)
    versions = read_versions(hot.table.files, hot.table.schema, committed[0], where)
    if replacing is not None:
        versions = key_filter(versions, replacing.columns, replacing.keys)
    else:
        versions = key_filter(versions, pk, keys)
    return {tuple(row[c] for c in pk): row for row in newest_per_key(versions, pk).to_pylist()}


def _classify(keys: Mapping[tuple, _Key], schema: Any, pk: Sequence[str], columns: Sequence[str]) -> dict[str, int]:
    """Each key's kind (`writes.classify`'s branches, in its order) and the counts by kind."""
    required_keys = [i for i, c in enumerate(columns) if c in pk and not schema[c].nullable]
    required = [i for i, c in enumerate(columns) if c not in pk and not schema[c].nullable]
    values = [i for i, c in enumerate(columns) if c not in pk]
    counts = dict.fromkeys([*writes.KINDS, writes.INSERTED, writes.SUPERSEDED], 0)
    for entry in keys.values():
        last = entry.states if entry.last is None else entry.last
        state = last[0]
        op = state[-1]
        has_actual = entry.actual is not None and entry.actual[SYS_OP] == OP_UPSERT
        if entry.refused:
            entry.kind = writes.REFUSED
        elif any(state[i] is None for i in required_keys):
            entry.kind = writes.BAD_KEY
        elif any(s[-1] not in (OP_UPSERT, OP_DELETE) for s in entry.states):
            entry.kind = writes.BAD_OP
        elif any(s[-1] == OP_UPSERT and any(s[i] is None for i in required) for s in entry.states):
            entry.kind = writes.BAD_NULL
        elif any(not same(s, state) for s in last[1:]):
            entry.kind = writes.CONFLICT_IN_WRITE
        elif entry.prior is not None:
            entry.kind = writes.CONFLICT_IN_DELTA if not same(entry.prior, state) else writes.SEEN
        elif op == OP_UPSERT and has_actual and all(same(state[i], entry.actual[columns[i]]) for i in values):
            entry.kind = writes.UNCHANGED
        elif op == OP_DELETE:
            entry.kind = writes.DELETE if has_actual else writes.UNCHANGED
        else:
            entry.kind = writes.UPSERT
            counts[writes.INSERTED] += 0 if has_actual else 1
        counts[entry.kind] += 1
        counts[writes.SUPERSEDED] += len(entry.states) - 1
    return counts


def same(a: Any, b: Any) -> bool:
    """Spark's `<=>` on values of atomic types, and element-wise on tuples of them: NULL
    equals NULL, NaN equals NaN."""
    if isinstance(a, tuple) and isinstance(b, tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b if a is not None and b is not None else a is None and b is None


def _rows_of(keys: Mapping[tuple, _Key], pk: Sequence[str], incoming: list[dict], refusal: Refusal | None):  # noqa: ANN202
    """`write_refusals.RowsOf` over this classification: a refused row's example columns
    are its own values; every other kind names its keys."""

    def rows_of(kind: str, *names: str) -> list[dict]:
        if kind == writes.REFUSED and refusal is not None:
            return [{c: item["row"][c] for c in names} for item in incoming if item["refused"]][:MAX_EXAMPLES]
        found = [
            {**dict(zip(pk, key, strict=True)), writes.BAD_OP_VALUE: _bad_op(entry)}
            for key, entry in keys.items()
            if entry.kind == kind
        ]
        return [{c: row[c] for c in names} for row in found][:MAX_EXAMPLES]

    return rows_of


def _bad_op(entry: _Key) -> str | None:
    """A key's sys_op that is neither 0 nor 1, as `writes.classify` spells it."""
    bad = [state[-1] for state in entry.states if state[-1] not in (OP_UPSERT, OP_DELETE)]
    return None if not bad else "null" if bad[0] is None else str(bad[0])


# -- storing ---------------------------------------------------------------------------


def _store(
    hot: HeldTarget,
    keys: Mapping[tuple, _Key],
    counts: Mapping[str, int],
    pk: Sequence[str],
    columns: Sequence[str],
    keep_unchanged: bool,
) -> WriteStats:
    """Write the versions (upserts as given, tombstones with the deleted version's data)
    and, `keep_unchanged`, the unchanged rows, each as one file; the stats of the write."""
    table = hot.table
    versions, unchanged = [], []
    for entry in keys.values():
        state = dict(zip([*columns, SYS_OP], (entry.states if entry.last is None else entry.last)[0], strict=True))
        if entry.kind == writes.UPSERT:
            versions.append({**state, SYS_FROM: hot.delta_num})
        elif entry.kind == writes.DELETE:
            versions.append({**{c: entry.actual[c] for c in columns}, SYS_OP: OP_DELETE, SYS_FROM: hot.delta_num})
        elif entry.kind == writes.UNCHANGED and keep_unchanged:
            unchanged.append({**state, SYS_FROM: None})
    versions_at, unchanged_at = hot.files.next_paths()
    schema = arrow_schema(table.schema)
    try:
        if versions:
            write_versions(table.files, versions_at, pa.Table.from_pylist(versions, schema), table.schema, pk)
        if unchanged:
            write_versions(table.files, unchanged_at, pa.Table.from_pylist(unchanged, schema), table.schema, pk)
    except BaseException:
        hot.files.discard(versions_at, unchanged_at)
        raise
    hot.files.kept(versions_at if versions else None, unchanged_at if unchanged else None)
    return WriteStats(
        counts[writes.UPSERT],
        counts[writes.DELETE],
        counts[writes.UNCHANGED],
        counts[writes.INSERTED],
        counts[writes.SUPERSEDED],
    )
