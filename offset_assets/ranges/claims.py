"""Holding a data range while it runs: ordered claim, then a heartbeat until it ends.

The claim itself is the job log's atomic insert / compare-and-set; this module adds the
rules around it: a plain run must be the next pending range (`check_order`), and a
holder keeps its row alive with a heartbeat thread so that only a holder that really
died (silent for `stale_after_s`, or its run reported dead) is taken over.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from offset_assets.control_plane.heartbeat import HeartbeatThread
from offset_assets.control_plane.job_log import JobLog
from offset_assets.control_plane.job_log.claims import DEFAULT_STALE_AFTER_S
from offset_assets.control_plane.job_log.records import Claim
from offset_assets.ranges.planners import DataRange, check_order


@dataclass(frozen=True)
class ClaimPolicy:
    """When a RUNNING range counts as abandoned, and how often a holder proves it is alive.

    `is_run_dead(run_id)` lets the orchestrator say a run is gone (for Dagster: the run
    failed, was canceled or no longer exists) without waiting for the heartbeat timeout.
    """

    stale_after_s: float = DEFAULT_STALE_AFTER_S
    heartbeat_every_s: float | None = None  # default: a tenth of stale_after_s
    is_run_dead: Callable[[str], bool] | None = None

    @property
    def heartbeat_interval_s(self) -> float:
        return self.heartbeat_every_s or self.stale_after_s / 10


def claim_range(
    log: JobLog,
    job_name: str,
    data_range: DataRange,
    pending: Sequence[DataRange],
    *,
    run_id: str,
    policy: ClaimPolicy = ClaimPolicy(),
    workflow_name: str | None = None,
    period: int | None = None,
    load_type: str | None = None,
    runtime_args: dict[str, Any] | None = None,
) -> Claim:
    """Claim `data_range` for `run_id` if it is due (or a refresh); raises otherwise."""
    check_order(data_range, pending, job_name)
    return log.claim(
        job_name,
        data_range.start,
        data_range.end,
        run_id=run_id,
        workflow_name=workflow_name,
        period=period,
        load_type=load_type,
        log_driven_type=str(data_range.kind),
        runtime_args=runtime_args,
        refresh=data_range.refresh,
        stale_after_s=policy.stale_after_s,
        is_run_dead=policy.is_run_dead,
    )


class Heartbeat(HeartbeatThread):
    """Context manager: heartbeats the claimed row from a daemon thread until exit.

    `lost` turns true when a heartbeat finds the row taken over; the holder's final
    `mark_success(run_id=...)` fails in that case anyway, so nothing is committed twice.
    A failed beat (`error`) is retried at the next one.
    """

    def __init__(self, log: JobLog, claim: Claim, interval_s: float) -> None:
        super().__init__(lambda: log.heartbeat(claim.job_id, claim.run_id), interval_s,
                         f"heartbeat-{claim.job_name}-{claim.job_id}")
