"""Committing a run's work: outputs, meta and offsets in one control-plane transaction.

The deltas' commit transaction (`commit_transaction`) is opened here and the plan's
rows are written into it by this module itself, so nothing calls back into the engine.
What goes into the transaction besides the deltas:
- the lease check (a run whose lease was taken over commits nothing);
- a backfill's offset reset and, in batch mode, its reprocess request, in its first commit;
- offsets: per input the last delta the run read, in batch mode never past the oldest
  change still waiting in a later batch (inclusive boundary, so that change is read again);
- the meta delta that recorded failed keys, listed so that later runs find them cheaply;
- in the final commit of a complete run: the reprocess request it fulfilled and the
  failure listings it retried are removed, and its snapshot is recorded as settled.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from sqlalchemy import Connection

from offset_assets.control_plane.failures import FailedDeltas
from offset_assets.control_plane.leases import assert_lease_held
from offset_assets.control_plane.offsets import OffsetRepository
from offset_assets.control_plane.reprocess import ReprocessRequests
from offset_assets.control_plane.settled import SettledSnapshots
from offset_assets.versioned.commit import commit_transaction
from offset_assets.versioned.hot_delta import HotDelta


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
        if plan.complete_request_ts is not None:
            ReprocessRequests(plane).complete(tid, plan.complete_request_ts, conn)
        settled = SettledSnapshots(plane)
        if plan.settled is not None:
            settled.record(tid, plan.settled, conn)
        else:
            settled.forget(tid, conn)
    if meta_hot is not None and plan.failed_meta_keys:
        failures.add(tid, meta_hot.delta_num, plan.failed_meta_keys, conn)
