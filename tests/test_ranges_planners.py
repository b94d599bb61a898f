from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest

from offset_assets.ranges.errors import PlanningError, RangeOrderError
from offset_assets.ranges.planners import (
    AutoIncrementIdPlanner,
    DataRange,
    KafkaOffsetPlanner,
    PlanInputs,
    RangeKind,
    TimeWindowPlanner,
    UpstreamPlanner,
    check_order,
    committed_pointer,
    kafka_offsets_json,
)

DAY = timedelta(minutes=1440)


@dataclass
class Row:
    data_range_start: str
    data_range_end: str | None
    status: str = "SUCCESS"
    job_start_time: float | None = 0.0
    job_end_time: float | None = 0.0


def spans(ranges):
    return [(r.start, r.end) for r in ranges]


def daily(default_start=datetime(2022, 1, 1)):
    return TimeWindowPlanner(default_start=default_start, period=DAY)


def test_seed_example_a_new_daily_job_catches_up_four_whole_days():
    ranges = daily().plan([], PlanInputs(now=datetime(2022, 1, 5, 14, 0)))
    assert spans(ranges) == [
        ("20220101000000", "20220102000000"),
        ("20220102000000", "20220103000000"),
        ("20220103000000", "20220104000000"),
        ("20220104000000", "20220105000000"),
    ]
    assert all(r.kind == RangeKind.TIME_WINDOW and r.previous_status is None for r in ranges)


def test_seed_example_a_job_that_ran_until_the_7th_schedules_one_day():
    history = [Row(f"202201{d:02d}000000", f"202201{d + 1:02d}000000") for d in range(1, 7)]
    ranges = daily().plan(history, PlanInputs(now=datetime(2022, 1, 8, 14, 0)))
    assert spans(ranges) == [("20220107000000", "20220108000000")]


def test_time_window_accepts_an_aware_now_and_needs_a_whole_period():
    now = datetime(2022, 1, 1, 23, 59, tzinfo=UTC)
    assert daily().plan([], PlanInputs(now=now)) == []
    with pytest.raises(PlanningError, match="current time"):
        daily().plan([], PlanInputs())
    with pytest.raises(PlanningError, match="positive"):
        TimeWindowPlanner(default_start=datetime(2022, 1, 1), period=timedelta(0))


def test_a_failed_window_is_retried_first_and_later_windows_follow_it():
    history = [
        Row("20220101000000", "20220102000000"),
        Row("20220102000000", "20220103000000", status="FAILURE"),
    ]
    ranges = daily().plan(history, PlanInputs(now=datetime(2022, 1, 4, 1, 0)))
    assert spans(ranges) == [
        ("20220102000000", "20220103000000"),
        ("20220103000000", "20220104000000"),
    ]
    assert [r.previous_status for r in ranges] == ["FAILURE", None]
    waits = "waits for earlier range '20220102000000' \\(FAILURE\\)"
    with pytest.raises(RangeOrderError, match=waits):
        check_order(ranges[1], ranges, "orders")
    check_order(ranges[0], ranges, "orders")


def test_refreshing_a_later_range_does_not_move_the_pointer_past_the_gap():
    history = [
        Row("20220101000000", "20220102000000"),
        Row("20220104000000", "20220105000000"),  # explicit refresh, ahead of the pointer
    ]
    planner = daily()
    assert planner.pointer(history) == "20220102000000"
    ranges = planner.plan(history, PlanInputs(now=datetime(2022, 1, 6)))
    assert spans(ranges) == [
        ("20220102000000", "20220103000000"),
        ("20220103000000", "20220104000000"),
        ("20220105000000", "20220106000000"),
    ]
    # Once the gap is filled the chain walks through the refreshed range.
    filled = history + [
        Row("20220102000000", "20220103000000"),
        Row("20220103000000", "20220104000000"),
    ]
    assert planner.pointer(filled) == "20220105000000"


def test_refresh_runs_any_range_but_a_plain_run_must_be_the_next_one():
    pending = daily().plan([], PlanInputs(now=datetime(2022, 1, 3)))
    old = DataRange(RangeKind.TIME_WINDOW, "20211201000000", "20211202000000")
    with pytest.raises(RangeOrderError, match="run it as a refresh"):
        check_order(old, pending, "orders")
    check_order(DataRange(old.kind, old.start, old.end, refresh=True), pending, "orders")
    with pytest.raises(RangeOrderError, match="nothing is pending"):
        check_order(old, [], "orders")


def test_a_raised_default_start_skips_history_before_it():
    history = [Row("20220101000000", "20220102000000")]
    planner = daily(default_start=datetime(2022, 3, 1))
    assert planner.pointer(history) == "20220301000000"


def test_auto_increment_id_reads_from_the_last_end_to_the_source_max_id():
    planner = AutoIncrementIdPlanner()
    assert spans(planner.plan([], PlanInputs(source_max_id=120))) == [("0", "120")]
    history = [Row("0", "120"), Row("120", "1000")]
    assert spans(planner.plan(history, PlanInputs(source_max_id=1500))) == [("1000", "1500")]
    assert planner.plan(history, PlanInputs(source_max_id=1000)) == []
    assert planner.plan(history, PlanInputs(source_max_id=None)) == []
    # Ids order numerically, not as strings ("1000" < "120" as text).
    assert planner.pointer(history) == "1000"


def test_a_failed_id_range_is_retried_with_its_recorded_bounds_and_the_new_ids_follow():
    history = [Row("0", "100"), Row("100", "180", status="FAILURE")]
    retry, new = AutoIncrementIdPlanner().plan(history, PlanInputs(source_max_id=250))
    assert (retry.start, retry.end, retry.previous_status) == ("100", "180", "FAILURE")
    assert (new.start, new.end, new.previous_status) == ("180", "250", None)
    # A range that failed before its end was decided recorded none: it takes the max id now.
    (unbounded,) = AutoIncrementIdPlanner().plan([Row("0", "100"), Row("100", None, status="FAILURE")],
                                                 PlanInputs(source_max_id=250))
    assert (unbounded.start, unbounded.end) == ("100", "250")


def test_auto_increment_id_honours_its_default_start():
    planner = AutoIncrementIdPlanner(default_start=500)
    assert spans(planner.plan([], PlanInputs(source_max_id=800))) == [("500", "800")]


def test_kafka_starts_at_earliest_then_at_the_committed_end():
    planner = KafkaOffsetPlanner()
    (first,) = planner.plan([], PlanInputs())
    assert (first.start, first.end) == ("{}", None)
    end = kafka_offsets_json({"orders": {"0": 120, "1": 98}})
    (second,) = planner.plan([Row("{}", end)], PlanInputs())
    assert second.start == '{"orders":{"0":120,"1":98}}'


def test_a_kafka_range_that_has_run_keeps_its_recorded_end_and_only_the_head_is_left_to_the_run():
    first = kafka_offsets_json({"orders": {"0": 120, "1": 98}})
    latest = {"orders": {"0": 400, "1": 300}}
    for status in ("FAILURE", "RUNNING"):
        (retry,) = KafkaOffsetPlanner().plan([Row("{}", first, status=status)],
                                             PlanInputs(latest_offsets=latest))
        assert (retry.start, retry.end, retry.previous_status) == ("{}", first, status)
    # Failed before its end was decided (none recorded), or holding nothing: the open head.
    for row in (Row("{}", None, status="FAILURE"), Row("{}", "{}")):
        (head,) = KafkaOffsetPlanner().plan([row], PlanInputs(latest_offsets=latest))
        assert (head.start, head.end) == ("{}", None)


def test_kafka_with_no_new_message_plans_nothing():
    end = kafka_offsets_json({"orders": {"0": 120}})
    latest = {"orders": {"0": 120}}
    assert KafkaOffsetPlanner().plan([Row("{}", end)], PlanInputs(latest_offsets=latest)) == []
    latest = {"orders": {"0": 120, "1": 3}}  # a partition never read starts at earliest
    assert len(KafkaOffsetPlanner().plan([Row("{}", end)], PlanInputs(latest_offsets=latest))) == 1


def test_kafka_offsets_json_is_canonical_so_equal_offsets_claim_the_same_range():
    a = kafka_offsets_json({"b": {10: 1, 2: 5}, "a": {"0": 3}})
    b = kafka_offsets_json({"a": {0: 3}, "b": {"2": 5, "10": 1}})
    assert a == b == '{"a":{"0":3},"b":{"2":5,"10":1}}'
    with pytest.raises(PlanningError, match="not JSON"):
        KafkaOffsetPlanner(default_start="latest").pointer([])


def test_upstream_plans_one_range_per_successful_upstream_range_not_consumed():
    upstream = [
        Row("20220101000000", "20220102000000", job_end_time=10.0),
        Row("20220102000000", "20220103000000", job_end_time=20.0),
        Row("20220103000000", "20220104000000", status="RUNNING", job_end_time=None),
    ]
    mine = [Row("20220101000000", "20220102000000", job_start_time=11.0)]
    ranges = UpstreamPlanner("ods_orders").plan(mine, PlanInputs(upstream_history=upstream))
    assert spans(ranges) == [("20220102000000", "20220103000000")]
    assert ranges[0].kind == RangeKind.UPSTREAM and not ranges[0].refresh


def test_upstream_refresh_is_followed_downstream():
    upstream = [Row("20220101000000", "20220102000000", job_end_time=50.0)]  # re-ingested at 50
    mine = [Row("20220101000000", "20220102000000", job_start_time=11.0)]
    (again,) = UpstreamPlanner("ods").plan(mine, PlanInputs(upstream_history=upstream))
    assert again.refresh and again.previous_status == "SUCCESS"
    with pytest.raises(PlanningError, match="'ods'"):
        UpstreamPlanner("ods").plan(mine, PlanInputs())


def test_pointer_chain_by_equality_ignores_cycles_and_empty_ranges():
    history = [Row("{}", "{}"), Row("a", "b"), Row("b", "a")]
    assert committed_pointer(history, "{}") == "{}"
    assert committed_pointer(history, "a") == "b"


def test_an_empty_successful_range_is_planned_again_once_data_arrives():
    history = [Row("0", "100"), Row("100", "100")]  # the second run found nothing new
    (again,) = AutoIncrementIdPlanner().plan(history, PlanInputs(source_max_id=130))
    assert (again.start, again.end, again.refresh) == ("100", "130", True)
    kafka_end = kafka_offsets_json({"t": {"0": 4}})
    (kafka,) = KafkaOffsetPlanner().plan([Row("{}", kafka_end), Row(kafka_end, kafka_end)],
                                         PlanInputs(latest_offsets={"t": {"0": 9}}))
    assert kafka.start == kafka_end and kafka.refresh


# -- bounded ranges: a backlog becomes ranges in order -------------------------------


def test_an_id_backlog_becomes_ranges_of_at_most_max_range_size_in_order():
    planner = AutoIncrementIdPlanner(max_range_size=1000)
    ranges = planner.plan([], PlanInputs(source_max_id=3500))
    assert spans(ranges) == [("0", "1000"), ("1000", "2000"), ("2000", "3000"), ("3000", "3500")]
    assert [(r.backlog.end, r.backlog.ranges) for r in ranges] == [
        ("3500", 4), ("3500", 3), ("3500", 2), ("3500", 1)]
    assert all(r.previous_status is None and not r.refresh for r in ranges)
    with pytest.raises(RangeOrderError, match="waits for earlier range '0'"):
        check_order(ranges[1], ranges, "orders")


def test_the_default_id_range_holds_a_million_ids_and_none_keeps_one_unbounded_range():
    (first, *_, last) = AutoIncrementIdPlanner().plan([], PlanInputs(source_max_id=2_500_000))
    assert (first.start, first.end, last.start, last.end) == ("0", "1000000", "2000000", "2500000")
    unbounded = AutoIncrementIdPlanner(max_range_size=None)
    assert spans(unbounded.plan([], PlanInputs(source_max_id=2_500_000))) == [("0", "2500000")]


def test_a_failed_range_in_the_middle_of_a_backlog_is_retried_first_and_later_ranges_wait():
    history = [Row("0", "1000"), Row("1000", "2000"), Row("2000", "3000", status="FAILURE")]
    ranges = AutoIncrementIdPlanner(max_range_size=1000).plan(history,
                                                              PlanInputs(source_max_id=4200))
    assert spans(ranges) == [("2000", "3000"), ("3000", "4000"), ("4000", "4200")]
    assert [r.previous_status for r in ranges] == ["FAILURE", None, None]
    with pytest.raises(RangeOrderError, match="waits for earlier range '2000' \\(FAILURE\\)"):
        check_order(ranges[2], ranges, "orders")


def test_job_log_rows_of_the_old_unbounded_planner_plan_on_in_bounded_ranges():
    planner = AutoIncrementIdPlanner(max_range_size=1_000_000)
    done = [Row("0", "5000000")]  # one range of 5M ids, written before ranges were bounded
    assert spans(planner.plan(done, PlanInputs(source_max_id=7_500_000))) == [
        ("5000000", "6000000"), ("6000000", "7000000"), ("7000000", "7500000")]
    # A failed unbounded range is retried from its start with the current bound.
    failed = [Row("0", None, status="FAILURE")]
    ranges = planner.plan(failed, PlanInputs(source_max_id=2_000_000))
    assert spans(ranges) == [("0", "1000000"), ("1000000", "2000000")]
    assert ranges[0].previous_status == "FAILURE"


def test_an_id_range_ingested_ahead_of_the_pointer_is_skipped_whole():
    history = [Row("0", "1000"), Row("2000", "2500")]  # (2000, 2500] refreshed ahead
    planner = AutoIncrementIdPlanner(max_range_size=1000)
    assert spans(planner.plan(history, PlanInputs(source_max_id=4000))) == [
        ("1000", "2000"), ("2500", "3500"), ("3500", "4000")]


def test_one_plan_lists_at_most_max_ranges_per_plan_and_the_next_plan_goes_on():
    planner = AutoIncrementIdPlanner(max_range_size=10, max_ranges_per_plan=3)
    ranges = planner.plan([], PlanInputs(source_max_id=1000))
    assert spans(ranges) == [("0", "10"), ("10", "20"), ("20", "30")]
    assert ranges[0].backlog.ranges == 100  # the whole backlog, not only this plan
    history = [Row(r.start, r.end) for r in ranges]
    assert spans(planner.plan(history, PlanInputs(source_max_id=1000))) == [
        ("30", "40"), ("40", "50"), ("50", "60")]


def test_a_three_year_catch_up_of_hourly_windows_is_planned_a_thousand_windows_at_a_time():
    hourly = TimeWindowPlanner(datetime(2022, 1, 1), timedelta(hours=1))
    now = PlanInputs(now=datetime(2025, 1, 1))
    ranges = hourly.plan([], now)
    assert len(ranges) == 1000
    assert (ranges[0].start, ranges[-1].end) == ("20220101000000", "20220211160000")
    assert (ranges[0].backlog.end, ranges[0].backlog.ranges) == ("20250101000000", 26304)
    history = [Row(r.start, r.end) for r in ranges]
    assert hourly.plan(history, now)[0].start == "20220211160000"
    unbounded = TimeWindowPlanner(datetime(2022, 1, 1), timedelta(hours=1),
                                  max_windows_per_plan=None)
    assert len(unbounded.plan([], now)) == 26304


def test_bounds_of_a_planner_must_be_positive_integers():
    with pytest.raises(PlanningError, match="AutoIncrementIdPlanner: max_range_size .* got 0"):
        AutoIncrementIdPlanner(max_range_size=0)
    with pytest.raises(PlanningError, match="max_ranges_per_plan .* got 2.5"):
        AutoIncrementIdPlanner(max_ranges_per_plan=2.5)
    with pytest.raises(PlanningError, match="TimeWindowPlanner: max_windows_per_plan .* got -1"):
        TimeWindowPlanner(datetime(2022, 1, 1), DAY, max_windows_per_plan=-1)
    with pytest.raises(PlanningError, match="KafkaOffsetPlanner: max_offsets_per_partition"):
        KafkaOffsetPlanner(max_offsets_per_partition=0)


def test_a_kafka_range_carries_the_planners_cap_per_partition_also_when_retried():
    planner = KafkaOffsetPlanner(max_offsets_per_partition=500)
    (first,) = planner.plan([], PlanInputs())
    assert (first.start, first.end, first.max_size) == ("{}", None, 500)
    (retry,) = planner.plan([Row("{}", None, status="FAILURE")], PlanInputs())
    assert (retry.max_size, retry.previous_status) == (500, "FAILURE")
    assert KafkaOffsetPlanner().plan([], PlanInputs())[0].max_size is None


def test_a_reverted_range_is_consumed_by_every_planner_and_never_planned_again_on_its_own():
    """A range a revert of its table undid (REVERTED) is loaded again only when asked: the
    pointer passes it, and ranges after it are planned as if it had succeeded."""
    windows = [Row("20220101000000", "20220102000000"), Row("20220102000000", "20220103000000", "REVERTED")]
    assert spans(daily().plan(windows, PlanInputs(now=datetime(2022, 1, 4)))) == [("20220103000000", "20220104000000")]
    ids = [Row("0", "10"), Row("10", "20", "REVERTED"), Row("30", "40", "REVERTED")]  # (30, 40]: ahead of a gap
    assert spans(AutoIncrementIdPlanner(max_range_size=10).plan(ids, PlanInputs(source_max_id=45))) == [
        ("20", "30"), ("40", "45")]
    start, reverted_end = kafka_offsets_json({"t": {"0": 0}}), kafka_offsets_json({"t": {"0": 5}})
    kafka = KafkaOffsetPlanner(default_start=start)
    assert kafka.pointer([Row(start, reverted_end, "REVERTED")]) == reverted_end
    follower = UpstreamPlanner("upstream").plan(
        [Row("a", "b", "REVERTED", job_start_time=2.0)], PlanInputs(upstream_history=[Row("a", "b", job_end_time=1.0)]))
    assert follower == []
    assert committed_pointer([Row("0", "10", "REVERTED"), Row("10", "20")], "0", int) == "20"
