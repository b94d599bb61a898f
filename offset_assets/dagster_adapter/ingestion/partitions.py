"""Log-driven ranges as Dagster partitions.

- Time-window ingestion: a `TimeWindowPartitionsDefinition` whose windows are exactly the
  planner's ranges (starting at `default_start`, one per `period`), so a partition key
  and a job_log range are the same thing, and a backfill of partitions re-ingests
  those ranges.
- Auto-increment id, Kafka and upstream ranges: their bounds are only known once the
  source has data, so they are `DynamicPartitionsDefinition`s whose keys a sensor adds
  as it plans ranges from job_log (see `ingestion_sensor.py`).

Dynamic keys spell out the range: `id:1000-2000` ((1000, 2000]), `upstream:<start>-<end>`,
`kafka:orders/0@120,orders/1@98` (start offsets; `kafka:earliest` for the first range).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import dagster as dg

from offset_assets.ranges.errors import PlanningError
from offset_assets.ranges.planners import (
    DataRange,
    RangeKind,
    TimeWindowPlanner,
    format_time,
    parse_time,
)
from offset_assets.ranges.sources.kafka import describe_offsets, offsets_from_description

KEY_PREFIXES = {
    RangeKind.AUTO_INC_ID: "id",
    RangeKind.KAFKA_OFFSET: "kafka",
    RangeKind.UPSTREAM: "upstream",
    RangeKind.TIME_WINDOW: "time",
}
_KINDS_BY_PREFIX = {prefix: kind for kind, prefix in KEY_PREFIXES.items()}
_DAY = timedelta(days=1)


def period_cron(start: datetime, period: timedelta) -> str:
    """A cron schedule whose ticks are start + k * period (for every k >= 0).

    Only periods cron can express from that start: minutes dividing an hour, hours
    dividing a day, one day, one week.
    """
    minutes = period.total_seconds() / 60
    if start.second or start.microsecond or minutes != int(minutes):
        raise PlanningError(
            f"time-window partitions need whole minutes: default_start {start}, period {period}"
        )
    minutes = int(minutes)
    if minutes < 60 and 60 % minutes == 0:
        return f"{start.minute % minutes}-59/{minutes} * * * *"
    if minutes % 60 == 0 and minutes < 1440 and 1440 % minutes == 0:
        hours = minutes // 60
        return f"{start.minute} {start.hour % hours}-23/{hours} * * *"
    if period == _DAY:
        return f"{start.minute} {start.hour} * * *"
    if period == 7 * _DAY:
        return f"{start.minute} {start.hour} * * {(start.weekday() + 1) % 7}"
    raise PlanningError(
        f"a period of {minutes} minutes is not a cron schedule (use minutes dividing an hour, "
        "hours dividing a day, a day or a week)"
    )


def time_window_partitions(
    planner: TimeWindowPlanner, end_offset: int = 0
) -> dg.TimeWindowPartitionsDefinition:
    """Partitions whose windows are the planner's ranges, in UTC."""
    start = planner.default_start
    start = start.astimezone(UTC).replace(tzinfo=None) if start.tzinfo else start
    whole_days = planner.period % _DAY == timedelta(0) and not (start.hour or start.minute)
    return dg.TimeWindowPartitionsDefinition(
        start=start,
        fmt="%Y-%m-%d" if whole_days else "%Y-%m-%d-%H:%M",
        cron_schedule=period_cron(start, planner.period),
        timezone="UTC",
        end_offset=end_offset,
    )


def range_for_time_partition(
    partitions_def: dg.TimeWindowPartitionsDefinition, partition_key: str
) -> DataRange:
    window = partitions_def.time_window_for_partition_key(partition_key)
    return DataRange(RangeKind.TIME_WINDOW, format_time(window.start), format_time(window.end))


def time_partition_key(partitions_def: dg.TimeWindowPartitionsDefinition, data_range: DataRange) -> str:
    """The partition key of a time-window range (its window's start)."""
    start = parse_time(data_range.start).replace(tzinfo=UTC)
    return partitions_def.get_partition_key_for_timestamp(start.timestamp())


def range_partition_key(data_range: DataRange) -> str:
    """The dynamic partition key of a range (parsed back by `range_from_partition_key`)."""
    prefix = KEY_PREFIXES[data_range.kind]
    if data_range.kind == RangeKind.KAFKA_OFFSET:
        return f"{prefix}:{describe_offsets(data_range.start)}"
    return f"{prefix}:{data_range.start}-{data_range.end or ''}"


def range_from_partition_key(partition_key: str) -> DataRange:
    prefix, sep, body = partition_key.partition(":")
    kind = _KINDS_BY_PREFIX.get(prefix)
    if not sep or kind is None:
        raise PlanningError(
            f"partition key {partition_key!r} is not a range key "
            f"({', '.join(p + ':...' for p in _KINDS_BY_PREFIX)})"
        )
    if kind == RangeKind.KAFKA_OFFSET:
        return DataRange(kind, offsets_from_description(body), None)
    start, dash, end = body.partition("-")
    if not dash or not start:
        raise PlanningError(f"partition key {partition_key!r}: expected {prefix}:<start>-<end>")
    return DataRange(kind, start, end or None)


def range_for_partition(partitions_def: dg.PartitionsDefinition, partition_key: str) -> DataRange:
    """The data range a partition of an ingestion asset stands for."""
    if isinstance(partitions_def, dg.TimeWindowPartitionsDefinition):
        return range_for_time_partition(partitions_def, partition_key)
    return range_from_partition_key(partition_key)
