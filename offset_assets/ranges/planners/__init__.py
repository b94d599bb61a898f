"""Which data ranges an ingestion job runs next: pure functions of its job_log history.

The four log-driven range types, with one pointer rule shared by all of them:
the pointer is where the contiguous chain of consumed ranges (successful, or reverted: a
revert of the target undid them, and only a run asked for by hand loads them again),
walked from `default_start`, ends. A successful range beyond a gap (an explicit refresh of a later
range) does not move the pointer; when the gap is filled the chain walks through it.

Bounded ranges: a backlog (the first load of a large table, a long catch-up) becomes
several ranges in order, each its own job_log row, Dagster partition and commit, so a
crash in the middle resumes at the first unfinished range instead of starting over.
Id ranges hold at most `max_range_size` ids; a plan lists at most `max_ranges_per_plan`
ranges (`max_windows_per_plan` for windows), the rest being planned once they are done;
a Kafka range reads at most `max_offsets_per_partition` offsets of each partition.

Ordering: ranges are returned in the order they must run. A range whose last attempt
failed (or whose holder may have died) comes first, marked by `previous_status`; ranges
after it are listed but run only after it succeeds (the runner stops at the first
failure and `check_order` refuses a later range).

Bounds by type (stored as strings in job_log):
- time window: [start, end), `YYYYMMDDHHMMSS` in UTC;
- auto-increment id: (start, end], the last id ingested and the max id read;
- Kafka: start and end are Spark-style JSON offsets {"topic": {"partition": offset}};
  the end is, per partition, the next offset to read: the last stable offset when the
  range first runs (past transaction markers), capped by `max_offsets_per_partition`; it
  is the next range's start;
- upstream: the upstream range's own bounds.

A range is a fixed slice once it has run: an end decided when the range runs (a Kafka
range's, an id range's max id) is recorded in job_log as the range is claimed, before a
row is read, and every later run of that range (a retry, a refresh, a takeover) reads
exactly to it (`recorded_end`). Only the range at the head, never run, is planned to the
present.
"""

from __future__ import annotations

from offset_assets.ranges.planners.auto_increment import AutoIncrementIdPlanner
from offset_assets.ranges.planners.contract import HistoryOf, LatestOffsetsSource, MaxIdSource, Planner
from offset_assets.ranges.planners.data_range import (
    CONSUMED,
    DEFAULT_MAX_RANGE_SIZE,
    DEFAULT_MAX_RANGES_PER_PLAN,
    REVERTED,
    SUCCESS,
    TIME_FORMAT,
    Backlog,
    DataRange,
    LoggedRange,
    PlanInputs,
    RangeKind,
    check_order,
    committed_pointer,
    format_time,
    parse_time,
    pending_ranges,
    recorded_end,
)
from offset_assets.ranges.planners.kafka_offsets import (
    EARLIEST,
    KafkaOffsetPlanner,
    kafka_has_new_messages,
    kafka_offsets_json,
    parse_kafka_offsets,
)
from offset_assets.ranges.planners.time_window import TimeWindowPlanner
from offset_assets.ranges.planners.upstream import UpstreamPlanner

__all__ = [
    "CONSUMED", "DEFAULT_MAX_RANGES_PER_PLAN", "DEFAULT_MAX_RANGE_SIZE", "EARLIEST", "REVERTED", "SUCCESS",
    "TIME_FORMAT",
    "AutoIncrementIdPlanner", "Backlog", "DataRange", "HistoryOf", "KafkaOffsetPlanner", "LatestOffsetsSource",
    "LoggedRange", "MaxIdSource", "PlanInputs", "Planner",
    "RangeKind", "TimeWindowPlanner", "UpstreamPlanner", "check_order", "committed_pointer", "format_time",
    "kafka_has_new_messages", "kafka_offsets_json", "parse_kafka_offsets", "parse_time", "pending_ranges",
    "recorded_end",
]
