"""Ranges that follow another job's: one per successful upstream range not yet consumed."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from offset_assets.ranges.errors import PlanningError
from offset_assets.ranges.planners.contract import HistoryOf
from offset_assets.ranges.planners.data_range import CONSUMED, SUCCESS, DataRange, LoggedRange, PlanInputs, RangeKind


@dataclass(frozen=True)
class UpstreamPlanner:
    """One range per successful range of `upstream_job` not yet consumed.

    Consumed means: this job has a SUCCESS row (or a REVERTED one: loaded again only when
    asked) for the same start that began after the upstream row last finished. So when the
    upstream re-ingests (refreshes) a range, this job follows and re-runs it, as a layered
    warehouse chains its layers (ODS -> DWD).
    """

    upstream_job: str
    kind: RangeKind = field(default=RangeKind.UPSTREAM, init=False)

    @property
    def period_minutes(self) -> None:
        return None

    @property
    def keyed_range_max_size(self) -> None:
        return None  # an upstream range's bounds are its own

    def gather(self, source: object, history_of: HistoryOf, now: datetime | None) -> PlanInputs:
        return PlanInputs(upstream_history=history_of(self.upstream_job))

    def plan(self, history: Sequence[LoggedRange], inputs: PlanInputs) -> list[DataRange]:
        if inputs.upstream_history is None:
            raise PlanningError(f"upstream planning needs the job log of {self.upstream_job!r}")
        mine = {r.data_range_start: r for r in history}
        pending = []
        for upstream in inputs.upstream_history:
            if upstream.status != SUCCESS:
                continue
            row = mine.get(upstream.data_range_start)
            if row is not None and row.status in CONSUMED and _started_after(row, upstream):
                continue
            status = row.status if row is not None else None
            pending.append(DataRange(self.kind, upstream.data_range_start, upstream.data_range_end,
                                     status, refresh=status in CONSUMED))
        return pending


def _started_after(row: LoggedRange, upstream: LoggedRange) -> bool:
    return (row.job_start_time or 0.0) >= (upstream.job_end_time or 0.0)
