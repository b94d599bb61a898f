"""What a planner is, and what it may ask of a job's source: the contract the ingestion
plans and runs ranges against (`ranges/ingestion/job.py`, `run.py`). A new planner
implements `Planner`; a new source implements the capabilities its planners ask for.

Pure declarations: no Spark, no database."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Protocol, runtime_checkable

from offset_assets.ranges.planners.data_range import DataRange, LoggedRange, PlanInputs, RangeKind

# A job's job_log history by job name (`JobLog.history`): what an upstream planner follows.
HistoryOf = Callable[[str], Sequence[LoggedRange]]


class Planner(Protocol):
    """Which ranges a job runs next, from its job_log history and the outside facts it
    gathers itself. `kind`: the ranges' kind; `period_minutes`: a window's length, written
    to job_log (None for ranges that are not windows); `keyed_range_max_size`: the
    `max_size` a range run from its partition key alone takes (a Kafka range's cap per
    partition; None where a key's bounds are the whole range)."""

    @property
    def kind(self) -> RangeKind: ...

    @property
    def period_minutes(self) -> int | None: ...

    @property
    def keyed_range_max_size(self) -> int | None: ...

    def gather(self, source: object, history_of: HistoryOf, now: datetime | None) -> PlanInputs:
        """The facts from outside the job's own history this planner plans with, read now
        (the source's max id, a topic's latest offsets, an upstream job's history, the
        time); no Spark, so sensors gather too. Raises PlanningError naming what the
        source lacks."""
        ...

    def plan(self, history: Sequence[LoggedRange], inputs: PlanInputs) -> list[DataRange]:
        """The due ranges, in the order they must run."""
        ...


@runtime_checkable
class MaxIdSource(Protocol):
    """A source of auto-increment ids: the largest id it holds now (None: empty)."""

    def max_id(self) -> int | None: ...


@runtime_checkable
class LatestOffsetsSource(Protocol):
    """A source of offsets per partition: each partition's next offset now, by topic."""

    def latest_offsets(self) -> Mapping[str, Mapping[str, int]]: ...
