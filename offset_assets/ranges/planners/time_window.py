"""Time windows of a fixed period, [start, end), caught up from the pointer to now."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from offset_assets.ranges.errors import PlanningError
from offset_assets.ranges.planners.contract import HistoryOf
from offset_assets.ranges.planners.data_range import (
    DEFAULT_MAX_RANGES_PER_PLAN,
    Backlog,
    DataRange,
    LoggedRange,
    PlanInputs,
    RangeKind,
    check_positive,
    committed_pointer,
    format_time,
    parse_time,
    pending_ranges,
)


def _naive_utc(moment: datetime) -> datetime:
    return moment.astimezone(UTC).replace(tzinfo=None) if moment.tzinfo else moment



@dataclass(frozen=True)
class TimeWindowPlanner:
    """Catch-up of floor((now - start) / period) windows of `period` from the pointer.

    A window is bounded by its period already; `max_windows_per_plan` (default 1,000;
    None: every closed window) bounds a catch-up instead: a plan lists the first windows
    due, and the next ones are planned as those are done.
    """

    default_start: datetime
    period: timedelta
    max_windows_per_plan: int | None = DEFAULT_MAX_RANGES_PER_PLAN
    kind: RangeKind = field(default=RangeKind.TIME_WINDOW, init=False)

    def __post_init__(self) -> None:
        if self.period <= timedelta(0):
            raise PlanningError(f"time-window period must be positive, got {self.period}")
        check_positive(self, "max_windows_per_plan", self.max_windows_per_plan)

    @property
    def period_minutes(self) -> int:
        return int(self.period.total_seconds() // 60)

    @property
    def keyed_range_max_size(self) -> None:
        return None  # a window is its own bound

    def gather(self, source: object, history_of: HistoryOf, now: datetime | None) -> PlanInputs:
        return PlanInputs(now=now or datetime.now(UTC))

    def pointer(self, history: Iterable[LoggedRange]) -> str:
        return committed_pointer(history, format_time(self.default_start), parse_time)

    def plan(self, history: Sequence[LoggedRange], inputs: PlanInputs) -> list[DataRange]:
        if inputs.now is None:
            raise PlanningError("time-window planning needs the current time")
        start = parse_time(self.pointer(history))
        count = max(0, math.floor((_naive_utc(inputs.now) - start) / self.period))
        backlog_end = format_time(start + count * self.period)
        windows = (
            DataRange(self.kind, format_time(start + i * self.period),
                      format_time(start + (i + 1) * self.period),
                      backlog=Backlog(backlog_end, count - i))
            for i in range(count)
        )
        return pending_ranges(windows, history, self.max_windows_per_plan)
