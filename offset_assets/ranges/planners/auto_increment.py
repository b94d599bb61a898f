"""Auto-increment id ranges, (start, end]: everything the source holds beyond the last range, in
ranges of at most `max_range_size` ids."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from offset_assets.ranges.errors import PlanningError
from offset_assets.ranges.planners.contract import HistoryOf, MaxIdSource
from offset_assets.ranges.planners.data_range import (
    CONSUMED,
    DEFAULT_MAX_RANGE_SIZE,
    DEFAULT_MAX_RANGES_PER_PLAN,
    Backlog,
    DataRange,
    LoggedRange,
    PlanInputs,
    RangeKind,
    check_positive,
    committed_pointer,
    pending_ranges,
    recorded_end,
)


@dataclass(frozen=True)
class AutoIncrementIdPlanner:
    """Everything the source holds beyond the last range, (pointer, max id], as ranges of
    at most `max_range_size` ids: (p, p+S], (p+S, p+2S], ..., (.., max id], in order.

    `max_range_size` (default 1,000,000; None: one range to the max id) bounds what one
    range reads, writes and commits, so the first load of a large table is many ranges
    and a crash loses only the range it was in. `max_ranges_per_plan` (default 1,000;
    None: all) bounds how many of them one plan lists. A range ingested ahead of the
    pointer (a refresh) is skipped whole; the backlog continues at its end. Ranges of an
    older size (or unbounded ones) in job_log plan on as they are: the pointer is their
    end, and a failed (or abandoned) one is retried with the end it recorded; one that
    recorded none (it failed before its end was decided) from its start with the current
    bound.
    """

    default_start: int = 0
    max_range_size: int | None = DEFAULT_MAX_RANGE_SIZE
    max_ranges_per_plan: int | None = DEFAULT_MAX_RANGES_PER_PLAN
    kind: RangeKind = field(default=RangeKind.AUTO_INC_ID, init=False)

    def __post_init__(self) -> None:
        check_positive(self, "max_range_size", self.max_range_size)
        check_positive(self, "max_ranges_per_plan", self.max_ranges_per_plan)

    @property
    def period_minutes(self) -> None:
        return None

    @property
    def keyed_range_max_size(self) -> None:
        return None  # a key names both ends of its id range

    def gather(self, source: object, history_of: HistoryOf, now: datetime | None) -> PlanInputs:
        if not isinstance(source, MaxIdSource):
            raise PlanningError(f"id ranges need a source with max_id(), got {type(source).__name__}")
        return PlanInputs(source_max_id=source.max_id())

    def pointer(self, history: Iterable[LoggedRange]) -> str:
        return committed_pointer(history, str(self.default_start), int)

    def plan(self, history: Sequence[LoggedRange], inputs: PlanInputs) -> list[DataRange]:
        max_id = inputs.source_max_id
        pointer = int(self.pointer(history))
        if max_id is None or max_id <= pointer:
            return []
        return pending_ranges(self._ranges(pointer, max_id, history), history, self.max_ranges_per_plan)

    def _ranges(self, start: int, max_id: int, history: Sequence[LoggedRange]) -> Iterable[DataRange]:
        run = {int(r.data_range_start): r for r in history
               if recorded_end(r) is not None and int(r.data_range_end) > int(r.data_range_start)}
        while start < max_id:
            row = run.get(start)
            if row is not None and row.status in CONSUMED:  # ingested ahead of the pointer
                start = int(row.data_range_end)
                continue
            end = max_id if self.max_range_size is None else min(start + self.max_range_size, max_id)
            if row is not None:  # a range that has run keeps its bounds
                end = int(row.data_range_end)
            yield DataRange(self.kind, str(start), str(end),
                            backlog=Backlog(str(max_id), self._ranges_between(start, max_id)))
            start = end

    def _ranges_between(self, start: int, end: int) -> int:
        return 1 if self.max_range_size is None else -(-(end - start) // self.max_range_size)
