"""The planner contract (`ranges/planners/contract.py`): a planner written against the
`Planner` type plans an ingestion job's ranges with the facts it gathers itself, and a
planner that needs more of a source than the source has is refused naming the job."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import pytest

from offset_assets.control_plane import connect
from offset_assets.control_plane.job_log import JobLog
from offset_assets.ranges.errors import PlanningError
from offset_assets.ranges.ingestion import IngestionJob, TargetTable
from offset_assets.ranges.ingestion.job import plan_ranges
from offset_assets.ranges.planners import (
    AutoIncrementIdPlanner,
    DataRange,
    HistoryOf,
    KafkaOffsetPlanner,
    LoggedRange,
    PlanInputs,
    Planner,
    RangeKind,
    TimeWindowPlanner,
    UpstreamPlanner,
)
from offset_assets.ranges.sources import FolderSource
from tests.customers_source import CUSTOMERS


@dataclass(frozen=True)
class DeclaredWindows:
    """A planner of its own: the windows a list declares, each once, from the time it
    gathers."""

    starts: tuple[datetime, ...]
    kind: RangeKind = field(default=RangeKind.TIME_WINDOW, init=False)

    @property
    def period_minutes(self) -> int:
        return 60

    @property
    def keyed_range_max_size(self) -> None:
        return None

    def gather(self, source: object, history_of: HistoryOf, now: datetime | None) -> PlanInputs:
        return PlanInputs(now=now)

    def plan(self, history: Sequence[LoggedRange], inputs: PlanInputs) -> list[DataRange]:
        done = {row.data_range_start for row in history}
        fmt = "%Y%m%d%H%M%S"
        return [DataRange(self.kind, s.strftime(fmt), (s + timedelta(hours=1)).strftime(fmt))
                for s in self.starts if s + timedelta(hours=1) <= inputs.now and s.strftime(fmt) not in done]


def job(planner: Planner, tmp_path) -> IngestionJob:
    return IngestionJob("landed", FolderSource(str(tmp_path / "landing")), planner,
                        TargetTable("landed", ["id"], CUSTOMERS))


def test_a_planner_written_against_the_type_plans_a_jobs_ranges(sqlite_url, tmp_path):
    planner: Planner = DeclaredWindows((datetime(2022, 1, 1, 3), datetime(2022, 1, 1, 5)))

    planned = plan_ranges(job(planner, tmp_path), JobLog(connect(sqlite_url)), now=datetime(2022, 1, 1, 5, 30))

    assert [(r.start, r.end) for r in planned] == [("20220101030000", "20220101040000")]


def test_an_id_planner_over_a_source_without_max_id_is_refused_naming_the_job(sqlite_url, tmp_path):
    with pytest.raises(PlanningError) as refused:
        plan_ranges(job(AutoIncrementIdPlanner(), tmp_path), JobLog(connect(sqlite_url)))

    assert str(refused.value) == "job 'landed': id ranges need a source with max_id(), got FolderSource"


@pytest.mark.parametrize("planner", [
    TimeWindowPlanner(datetime(2022, 1, 1), timedelta(days=1)), AutoIncrementIdPlanner(),
    KafkaOffsetPlanner(max_offsets_per_partition=500), UpstreamPlanner("raw")], ids=lambda p: type(p).__name__)
def test_every_shipped_planner_says_its_period_and_the_cap_of_a_range_run_from_its_key(planner):
    expected = {TimeWindowPlanner: (1440, None), AutoIncrementIdPlanner: (None, None),
                KafkaOffsetPlanner: (None, 500), UpstreamPlanner: (None, None)}[type(planner)]
    assert (planner.period_minutes, planner.keyed_range_max_size) == expected
