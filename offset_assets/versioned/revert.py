"""Revert a versioned table to its state as of an earlier delta: one new delta, history kept.

A bad load (a partner's export in the wrong unit, a replayed snapshot) is undone by a
change like any other. `revert_table(table, n)` writes one delta that gives every key
changed after delta `n` its state as of `n` again: its row then, or a tombstone for a key
that did not exist then. The keys nothing changed after `n` are not written. Every
earlier delta stays: an as-of read before the revert answers as it did, and the revert's
own delta (`read_started_in` / `read_finished_in` it) shows exactly what it changed.

How, in the table's own write path:
- the keys changed after `n` are those of the versions in the deltas after it (their
  files only, never the whole table);
- their state as of `n` (`read_actual(as_of_delta=n)`, bounded by those keys) is one
  replacing write (`writes.Replacement`) into the table's hot delta: a key whose actual
  row equals it creates no version, one without it is deleted;
- the delta commits in one control-plane transaction with its record (`reverts_to`) and
  the REVERTED marks of the ingestion ranges whose deltas it undid (`JobLog.mark_reverted`),
  so that they can be loaded again once their source is fixed.
The hot delta is the table's write lock: a revert waits for no writer, it is refused
while another holds it (`HotDeltaHeldError`), and a crash anywhere leaves the table as it
was (a hot delta a dead revert left is discarded by the next revert).

Downstream, the revert's delta is an ordinary change: a transformation reading the table
processes the keys it touched (deletions and reverse joins included) in its next
incremental run, with no reset and no reprocess request.

Refused with one line, nothing changed: a delta that does not exist; a transformation's
output or meta table (its offsets and meta would then say keys are processed that no
longer hold what was processed: revert the inputs, and the transformation follows); a
delta whose files are gone (cleanup never removes a committed delta's files, so something
outside the catalog did).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from offset_assets.control_plane.delta_catalog import HotDeltaHeldError
from offset_assets.control_plane.delta_catalog.records import DeltaInfo
from offset_assets.control_plane.job_log import JobLog, RevertedRanges
from offset_assets.control_plane.leases import holder_is_dead, make_holder
from offset_assets.control_plane.names import META_TABLE_PREFIX
from offset_assets.versioned.commit import commit_transaction
from offset_assets.versioned.errors import VersionedTableError
from offset_assets.versioned.hot_delta import HotDelta
from offset_assets.versioned.key_joins import join_on_keys
from offset_assets.versioned.local_joins import matching_in_place
from offset_assets.versioned.reads import versions_bound
from offset_assets.versioned.sql_text import quoted
from offset_assets.versioned.table import VersionedTable
from offset_assets.versioned.table_schema import column_types
from offset_assets.versioned.writes import Replacement

__all__ = ["RevertChanges", "RevertError", "RevertPlan", "RevertResult", "plan_revert", "revert_table"]

# The holder of a revert's hot delta: `revert:host:pid:run`, so that a revert finds the
# one a dead revert left (`leases.holder_is_dead`) and discards it.
HOLDER_PREFIX = "revert:"
SAMPLE_KEYS = 5
# What a revert does to a key changed after the delta it goes back to.
UPSERTED_BACK, DELETED, RESTORED, UNCHANGED = "upserted_back", "deleted", "restored", "unchanged"
_KIND, _TARGET, _CURRENT = "__revert", "__state_then", "__state_now"
_STATE, _THEN = "__state", "__then"


class RevertError(VersionedTableError):
    """A revert refused before anything was written; the message names the table, the
    delta and why."""


@dataclass(frozen=True)
class RevertChanges:
    """What a revert does to the keys changed after the delta it goes back to."""

    upserted_back: int  # keys that had a row then and another now: their row then again
    deleted: int  # keys without a row then: deleted
    restored: int  # keys deleted since: their row then, back
    unchanged: int = 0  # keys whose row now is their row then (changed and changed back): no version


@dataclass(frozen=True)
class RevertPlan:
    """What `revert_table(table, to_delta)` would do now (`plan_revert`): nothing is written.
    `samples`: per kind of change, the first keys in key order (`SAMPLE_KEYS` of each)."""

    table: str
    to_delta: int
    last_delta: int
    changes: RevertChanges
    samples: Mapping[str, list[dict[str, Any]]]
    ranges: RevertedRanges  # the ingestion ranges it would mark REVERTED, and SUCCESS again


@dataclass(frozen=True)
class RevertResult:
    """What a revert did: the delta it committed (None: nothing was after `to_delta`), the
    deltas it undid (`to_delta` + 1 .. `last_delta`), its changes and the ranges it marked."""

    table: str
    to_delta: int
    last_delta: int
    delta: DeltaInfo | None
    changes: RevertChanges
    ranges: RevertedRanges


def plan_revert(table: VersionedTable, to_delta: int, sample: int = SAMPLE_KEYS) -> RevertPlan:
    """What reverting `table` to delta `to_delta` would change, counted and sampled, with
    the ranges it would mark: Spark reads, no write, no lock (the table may change before
    a revert runs)."""
    _check_request(table, to_delta)
    last = table.last_committed()
    last_num = last.delta_num if last is not None else 0
    undone = _undone_deltas(table, to_delta, last_num)
    ranges = JobLog(table.plane).ranges_reverted_by(table.name, to_delta)
    if not any(not d.is_empty for d in undone):
        return RevertPlan(table.name, to_delta, last_num, RevertChanges(0, 0, 0), {}, ranges)
    compared = _compared(table, to_delta, _changed_keys(table, undone))
    counts = compared.agg(
        *[
            F.sum(F.when(F.col(_KIND) == kind, 1).otherwise(0)).alias(kind)
            for kind in (UPSERTED_BACK, DELETED, RESTORED, UNCHANGED)
        ]
    ).first()
    changes = RevertChanges(*(int(counts[kind] or 0) for kind in (UPSERTED_BACK, DELETED, RESTORED, UNCHANGED)))
    return RevertPlan(table.name, to_delta, last_num, changes, _samples(table, compared, sample), ranges)


def revert_table(table: VersionedTable, to_delta: int, run_id: str | None = None) -> RevertResult:
    """Set `table`'s actual state back to its state as of committed delta `to_delta` (0:
    empty, before its first delta) in one new committed delta, marking REVERTED the
    ingestion ranges whose deltas it undid (see the module docstring). Nothing is written
    when nothing was committed after `to_delta`."""
    _check_request(table, to_delta)
    run_id = run_id or f"revert-{uuid.uuid4().hex[:12]}"
    hot = _open_delta(table, run_id)
    try:
        last_num = hot.delta_num - 1  # no writer can commit while this delta is hot
        undone = _undone_deltas(table, to_delta, last_num)
        if not undone:
            hot.rollback()
            return RevertResult(table.name, to_delta, last_num, None, RevertChanges(0, 0, 0), RevertedRanges([], []))
        written = _write_states_then(table, hot, to_delta, undone)
        with commit_transaction([hot]) as commit:
            table.catalog.record_revert(commit.conn, table.name, hot.delta_num, to_delta)
            ranges = JobLog(table.plane).mark_reverted(commit.conn, table.name, to_delta, hot.delta_num)
    except BaseException:
        if hot.is_open:
            hot.rollback()
        raise
    return RevertResult(table.name, to_delta, last_num, replace(hot.info, reverts_to=to_delta), written, ranges)


# -- guards ------------------------------------------------------------------------------


def _check_request(table: VersionedTable, to_delta: int) -> None:
    """Refusals that need no catalog read: the number itself, a transformation's meta."""
    if isinstance(to_delta, bool) or not isinstance(to_delta, int) or to_delta < 0:
        raise RevertError(
            table.name,
            f"cannot revert to delta {to_delta!r}: a delta number is an integer "
            ">= 0 (0: the empty table before its first delta)",
        )
    if table.name.startswith(META_TABLE_PREFIX):
        transformation = table.name.removeprefix(META_TABLE_PREFIX)
        raise RevertError(
            table.name,
            f"is the meta table of transformation {transformation!r} (which keys it "
            "processed, and when): a revert would make it lie; reset or reprocess "
            "the transformation instead",
        )


def _undone_deltas(table: VersionedTable, to_delta: int, last_num: int) -> list[DeltaInfo]:
    """The committed deltas after `to_delta` (up to `last_num`), once the revert is known
    possible: `to_delta` exists, the table is no transformation's output, and every file
    the revert reads is there."""
    name = table.name
    if to_delta > last_num:
        raise RevertError(
            name,
            f"cannot revert to delta {to_delta}: it does not exist (last committed: "
            f"{last_num if last_num else 'none'})",
        )
    written_by = table.catalog.transformation_commit_after(name, 0)
    if written_by is not None:
        delta_num, meta = written_by
        transformation = meta.removeprefix(META_TABLE_PREFIX)
        raise RevertError(
            name,
            f"is an output of transformation {transformation!r} (delta {delta_num} was "
            f"committed with its meta table {meta!r}): a revert would leave its offsets "
            "and meta saying keys are processed that no longer hold what it wrote; revert "
            "its inputs, and its next run follows",
        )
    if to_delta == last_num:
        return []
    undone = table.catalog.committed(name, after_delta=to_delta, up_to_delta=last_num)
    # The state then, and the state now that the revert's write is classified against.
    read: dict[str, str] = {}
    for snapshot, deltas, _ in (table.actual_sources(to_delta), table.actual_sources(last_num)):
        if snapshot is not None:
            read[snapshot.data_path] = f"the snapshot at delta {snapshot.delta_num}"
        read.update({d.data_path: f"delta {d.delta_num}" for d in [*deltas, *undone] if not d.is_empty})
    for path, what in read.items():
        if not table.files.exists(path):
            raise RevertError(
                name,
                f"cannot revert to delta {to_delta}: the files of {what} are gone ({path}); "
                "cleanup never removes a committed delta's files, so they were removed "
                "outside the catalog",
            )
    return undone


def _open_delta(table: VersionedTable, run_id: str) -> HotDelta:
    """The table's hot delta for this revert; one a dead revert left is discarded first."""
    holder = f"{HOLDER_PREFIX}{make_holder(run_id)}"
    try:
        return table.open_delta(holder=holder, run_id=run_id)
    except HotDeltaHeldError as held:
        left = held.hot.holder or ""
        if not (left.startswith(HOLDER_PREFIX) and holder_is_dead(left.removeprefix(HOLDER_PREFIX))):
            raise
        table.discard_dead_hot(held.hot)
    return table.open_delta(holder=holder, run_id=run_id)


# -- the write ---------------------------------------------------------------------------


def _changed_keys(table: VersionedTable, undone: list[DeltaInfo]) -> DataFrame:
    """The primary keys of every version the `undone` deltas wrote (their files only), once each."""
    paths = [d.data_path for d in undone if not d.is_empty]
    return table.reader.scan(paths).select(*[quoted(c) for c in table.primary_key]).distinct()


def _write_states_then(table: VersionedTable, hot: HotDelta, to_delta: int, undone: list[DeltaInfo]) -> RevertChanges:
    """Write the state as of `to_delta` of the keys the `undone` deltas changed into `hot`,
    as one replacing write: their rows then, a tombstone where there was none."""
    bound = versions_bound([d for d in undone if not d.is_empty])
    if not bound:
        return RevertChanges(0, 0, 0)
    keys = _changed_keys(table, undone)
    then = table.read_actual(as_of_delta=to_delta, keys=keys).select(*[quoted(c) for c in table.data_columns])
    pk, nullable = table.primary_key, table.reader.nullable

    def select(versions: DataFrame, in_one_partition: bool) -> DataFrame:
        if in_one_partition:
            return matching_in_place(versions, keys, pk, nullable)
        return join_on_keys(versions, keys, pk, "left_semi", nullable)

    # The undone deltas' versions bound the keys (a plan hint, no count): one pass.
    stats = hot.write(
        then, last=True, rows=bound, replacing=Replacement(select), column_types=column_types(table.schema)
    )
    inserted = stats.rows_inserted or 0
    return RevertChanges(stats.rows_upserted - inserted, stats.rows_deleted, inserted, stats.rows_unchanged)


# -- the plan ----------------------------------------------------------------------------


def _compared(table: VersionedTable, to_delta: int, keys: DataFrame) -> DataFrame:
    """Per key changed after `to_delta`: its primary key and what a revert does to it
    (`_KIND`), from its state then and now grouped by key (a NULL key is one group)."""
    pk = [quoted(c) for c in table.primary_key]
    state = f"struct({', '.join(quoted(c) for c in table.data_columns)}) AS {_STATE}"
    then = table.read_actual(as_of_delta=to_delta, keys=keys).selectExpr(*pk, state, f"true AS {_THEN}")
    now = table.read_actual(keys=keys).selectExpr(*pk, state, f"false AS {_THEN}")
    grouped = (
        then.unionByName(now)
        .groupBy(*pk)
        .agg(
            F.max(F.when(F.col(_THEN), F.col(_STATE))).alias(_TARGET),
            F.max(F.when(~F.col(_THEN), F.col(_STATE))).alias(_CURRENT),
        )
    )
    kind = (
        f"CASE WHEN {_TARGET} IS NULL THEN '{DELETED}' WHEN {_CURRENT} IS NULL THEN '{RESTORED}' "
        f"WHEN {_TARGET} <=> {_CURRENT} THEN '{UNCHANGED}' ELSE '{UPSERTED_BACK}' END"
    )
    return grouped.selectExpr(*pk, f"{kind} AS {_KIND}")


def _samples(table: VersionedTable, compared: DataFrame, sample: int) -> dict[str, list[dict[str, Any]]]:
    """The first `sample` keys of each kind of change, in key order (NULL first)."""
    if sample <= 0:
        return {}
    order = ", ".join(f"{quoted(c)} ASC NULLS FIRST" for c in table.primary_key)
    ranked = compared.where(f"{_KIND} <> '{UNCHANGED}'").withColumn(
        "__rank", F.expr(f"row_number() OVER (PARTITION BY {_KIND} ORDER BY {order})")
    )
    found: dict[str, list[dict[str, Any]]] = {}
    for row in ranked.where(f"__rank <= {int(sample)}").orderBy(_KIND, "__rank").collect():
        found.setdefault(row[_KIND], []).append({c: row[c] for c in table.primary_key})
    return found
