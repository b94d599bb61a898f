"""Committing a run's work: outputs, meta and offsets in one control-plane transaction.

Here: the commit plan of a run's commit (`plan_commit`, from the run's `RunState`), the
commit itself (`commit_batches`: meta delta, outputs, plan), and the end of a run's hot
deltas that never commit (`rollback_quietly`, `discard_dead_hot_deltas`).

The deltas' commit transaction (`commit_transaction`) is opened here and the plan's
rows are written into it by this module itself, so nothing calls back into the engine.
What goes into the transaction besides the deltas:
- the lease check (a run whose lease was taken over commits nothing);
- a backfill's (or a rescan's) offset reset and, in batch mode, a backfill's reprocess
  request, in its first commit;
- offsets: per input the last delta the run read, in batch mode never past the oldest
  change still waiting in a later batch (inclusive boundary, so that change is read again);
- the meta delta that recorded failed keys, listed so that later runs find them cheaply;
- in the final commit of a complete run: the reprocess request it fulfilled, the
  failure listings it retried and the offset resets it reported are removed, and its
  snapshot is recorded as settled.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from sqlalchemy import Connection

from offset_assets.control_plane.database import ControlPlane
from offset_assets.control_plane.failures import FailedDeltas
from offset_assets.control_plane.leases import assert_lease_held
from offset_assets.control_plane.offset_resets import OffsetResets
from offset_assets.control_plane.offsets import OffsetRepository
from offset_assets.control_plane.reprocess import ReprocessRequests
from offset_assets.control_plane.settled import SettledSnapshots
from offset_assets.engine.meta import MetaPending, held_meta_rows, meta_frame, meta_frame_typed
from offset_assets.engine.state import RunState
from offset_assets.engine.vocabulary import CommitMode
from offset_assets.versioned.commit import commit_transaction
from offset_assets.versioned.hot_delta import HotDelta
from offset_assets.versioned.table import VersionedTable
from offset_assets.versioned.table_schema import column_types

log = logging.getLogger(__name__)


def offsets_after(snapshot_commit_ts: Mapping[str, float], offsets_before: Mapping[str, float],
                  waiting: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """Offsets to commit: per input the commit_ts of the last delta the run read, capped
    by the oldest change still waiting (`waiting`: per later batch, input -> oldest
    change); only values that move an offset forward."""
    offsets = {}
    for name, value in snapshot_commit_ts.items():
        held = [ts[name] for ts in waiting if name in ts]
        if held:
            value = min(value, min(held))
        previous = offsets_before.get(name)
        if previous is None or value > previous:
            offsets[name] = value
    return offsets


@dataclass
class CommitPlan:
    """The control-plane writes of one commit, besides the deltas themselves."""

    transformation_id: str
    lease_holder: str
    offsets: dict[str, float] = field(default_factory=dict)
    reset_offsets: bool = False
    reprocess_request_ts: float | None = None  # record this request (a batch-mode backfill)
    failed_meta_keys: int = 0  # failed keys in this commit's meta delta
    final: bool = False
    complete_request_ts: float | None = None
    drop_failed_deltas: Sequence[int] = ()
    settled: Mapping[str, int] | None = None

    def writes(self) -> bool:
        return bool(self.offsets or self.reset_offsets or self.reprocess_request_ts is not None or self.final)


def plan_commit(state: RunState, lease_holder: str, commit_mode: CommitMode,
                batch_min_ts: Mapping[int, Mapping[str, float]], batch: int | None,
                first: bool, final: bool) -> CommitPlan:
    """The plan of one commit of a run: of `batch` (batch mode), or of the run's end
    (`batch` None; `final`: the run is complete); `first`: nothing committed before."""
    plan = CommitPlan(state.transformation_id, lease_holder, offsets=run_offsets(state, batch_min_ts, batch))
    if state.resets_offsets and first:
        plan.reset_offsets = True
        if state.reprocesses and commit_mode == CommitMode.batch:
            plan.reprocess_request_ts = state.request_ts
    if final and state.full:
        plan.final = True
        plan.complete_request_ts = state.request_ts
        plan.drop_failed_deltas = state.listed_failures
        # v1 as well as v2: a complete run of either processed every change up to its snapshot.
        plan.settled = dict(state.snapshot.deltas)
    return plan


def run_offsets(state: RunState, batch_min_ts: Mapping[int, Mapping[str, float]],
                batch: int | None) -> dict[str, float]:
    """The offsets a commit of `batch` (None: the run's end) moves: never in a changelist
    run, and in batch mode not past a change a later batch still waits for."""
    if not state.full:
        return {}  # run_changelist never moves offsets
    waiting = [] if batch is None else [ts for later, ts in batch_min_ts.items() if later > batch]
    return offsets_after(state.snapshot_commit_ts, state.offsets_before, waiting)


def commit_batches(plane: ControlPlane, plan: CommitPlan, hots: Sequence[HotDelta], meta: VersionedTable,
                   pending: MetaPending, process_ts: float, holder: str, run_id: str,
                   held: bool = False) -> list[HotDelta]:
    """Write the meta of the `pending` batches into a meta delta and commit it with the
    output deltas `hots` that hold rows, and `plan`, in one transaction (`hots` that hold
    none are rolled back). Returns the committed deltas. On any error every delta is
    rolled back and the error raised: nothing is committed. `held`: meta rows of keys the
    driver holds are written by the driver (`meta.held_meta_rows`), without a Spark job."""
    meta_hot = None
    try:
        rows_held = held_meta_rows(meta, pending, process_ts) if held and pending else None
        if rows_held is not None:
            table, rows, failed = rows_held
            if rows:
                meta_hot = meta.open_delta(holder=holder, run_id=run_id)
                meta_hot.append_held(table)
                plan.failed_meta_keys = failed
        elif pending:
            frame, rows, failed = meta_frame(meta, pending, process_ts)
            if rows:
                meta_hot = meta.open_delta(holder=holder, run_id=run_id)
                typed = column_types(meta.schema) if meta_frame_typed(pending) else None
                meta_hot.write_new_versions(frame, rows, column_types=typed)
                plan.failed_meta_keys = failed
        written = [hot for hot in hots if hot.rows_upserted or hot.rows_deleted or hot.rows_unchanged]
        for hot in hots:
            if hot not in written:
                hot.rollback()
        commit_run_work(plane, written, meta_hot, plan)
    except BaseException:
        for hot in [*hots, *([meta_hot] if meta_hot else [])]:
            rollback_quietly(hot)
        raise
    return [*written, *([meta_hot] if meta_hot else [])]


def rollback_quietly(hot: HotDelta) -> None:
    """Roll `hot` back if it is open, logging (not raising) a failure: the error that
    made the caller roll back matters more."""
    if not hot.is_open:
        return
    try:
        hot.rollback()
    except Exception:  # noqa: BLE001 - the original error matters more
        log.exception("rollback of hot delta %s of %s failed", hot.delta_num, hot.table.name)


def discard_dead_hot_deltas(tables: Sequence[VersionedTable], transformation_id: str) -> None:
    """Discard the hot deltas of `tables` that an earlier run of the transformation left.
    The caller holds the lease, so such a delta belongs to a run that died before
    committing: its files are garbage."""
    prefix = f"{transformation_id}:"
    for table in tables:
        hot = table.hot()
        if hot is not None and (hot.holder or "").startswith(prefix):
            table.discard_dead_hot(hot)


def commit_run_work(plane, hots: Sequence[HotDelta], meta_hot: HotDelta | None, plan: CommitPlan,  # noqa: ANN001
                    ) -> float | None:
    """Commit `hots` (outputs and meta) and `plan` in one transaction; None when there was
    nothing to commit. On any error nothing is committed and the deltas stay hot."""
    all_hots = [*hots, *([meta_hot] if meta_hot is not None else [])]
    if all_hots:
        with commit_transaction(all_hots) as commit:
            _write_plan(plane, commit.conn, plan, meta_hot)
        return commit.commit_ts
    if plan.writes():
        with plane.begin() as conn:
            _write_plan(plane, conn, plan, None)
    return None


def _write_plan(plane, conn: Connection, plan: CommitPlan, meta_hot: HotDelta | None) -> None:  # noqa: ANN001
    """The plan's control-plane rows, written in the commit transaction `conn`."""
    tid = plan.transformation_id
    assert_lease_held(conn, tid, plan.lease_holder)
    offsets = OffsetRepository(plane)
    if plan.reset_offsets:
        offsets.reset_offset(tid, conn=conn)
    if plan.reprocess_request_ts is not None:
        ReprocessRequests(plane).record(tid, plan.reprocess_request_ts, conn)
    if plan.offsets:
        offsets.update_offsets_bulk({(tid, name): value for name, value in plan.offsets.items()}, conn=conn)
    failures = FailedDeltas(plane)
    if plan.final:
        failures.drop(tid, plan.drop_failed_deltas, conn)
        OffsetResets(plane).clear(tid, conn)
        if plan.complete_request_ts is not None:
            ReprocessRequests(plane).complete(tid, plan.complete_request_ts, conn)
        settled = SettledSnapshots(plane)
        if plan.settled is not None:
            settled.record(tid, plan.settled, conn)
        else:
            settled.forget(tid, conn)
    if meta_hot is not None and plan.failed_meta_keys:
        failures.add(tid, meta_hot.delta_num, plan.failed_meta_keys, conn)
