"""Which data ranges an ingestion job runs next: pure functions of its job_log history.

The four log-driven range types, with one pointer rule shared by all of them:
the pointer is where the contiguous chain of successful ranges, walked from
`default_start`, ends. A successful range beyond a gap (an explicit refresh of a later
range) does not move the pointer; when the gap is filled the chain walks through it.

Ordering: ranges are returned in the order they must run. A range whose last attempt
failed (or whose holder may have died) comes first, marked by `previous_status`; ranges
after it are listed but run only after it succeeds (the runner stops at the first
failure and `check_order` refuses a later range).

Bounds by type (stored as strings in job_log):
- time window: [start, end), `YYYYMMDDHHMMSS` in UTC;
- auto-increment id: (start, end], the last id ingested and the max id read;
- Kafka: start and end are Spark-style JSON offsets {"topic": {"partition": offset}};
  the end is the next offset to read (last consumed + 1), so it is the next start;
- upstream: the upstream range's own bounds.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any, Protocol

from offset_assets.ranges.errors import PlanningError, RangeOrderError

TIME_FORMAT = "%Y%m%d%H%M%S"
SUCCESS, FAILURE, RUNNING = "SUCCESS", "FAILURE", "RUNNING"


class RangeKind(StrEnum):
    """job_log.log_driven_type."""

    TIME_WINDOW = "timewindow"
    AUTO_INC_ID = "auto_inc_id"
    KAFKA_OFFSET = "kafka_offset"
    UPSTREAM = "upstream"


class LoggedRange(Protocol):
    """What planners read of a job_log row (`JobRecord` satisfies it)."""

    data_range_start: str
    data_range_end: str | None
    status: str
    job_start_time: float | None
    job_end_time: float | None


@dataclass(frozen=True)
class DataRange:
    """One range to ingest. `end` None: decided when the range runs (max id, Kafka)."""

    kind: RangeKind
    start: str
    end: str | None
    previous_status: str | None = None  # status of the job_log row this range would re-run
    refresh: bool = False

    @property
    def is_retry(self) -> bool:
        return self.previous_status in (FAILURE, RUNNING)


@dataclass(frozen=True)
class PlanInputs:
    """Facts from outside the job log that some planners need, read by the caller."""

    now: datetime | None = None
    source_max_id: int | None = None
    latest_offsets: Mapping[str, Mapping[str, int]] | None = None
    upstream_history: Sequence[LoggedRange] | None = None


# -- pointer -------------------------------------------------------------------------


def committed_pointer(
    history: Iterable[LoggedRange], default_start: str, order: Callable[[str], Any] | None = None
) -> str:
    """End of the contiguous chain of SUCCESS ranges that starts at `default_start`.

    With `order` (time, id), a success covering the pointer (start <= pointer < end)
    advances it, so a `default_start` raised into the history is honoured. Without it
    (Kafka JSON), ranges chain by exact equality of end and next start.
    """
    successes = [r for r in history if r.status == SUCCESS and r.data_range_end is not None]
    pointer = default_start
    if order is None:
        by_start = {r.data_range_start: r.data_range_end for r in successes}
        seen = {pointer}
        while pointer in by_start and by_start[pointer] not in seen:
            pointer = by_start[pointer]
            seen.add(pointer)
        return pointer
    for row in sorted(successes, key=lambda r: order(r.data_range_start)):
        start, end = order(row.data_range_start), order(row.data_range_end)
        if start > order(pointer):
            break  # a gap: later successes wait until it is filled
        if end > order(pointer):
            pointer = row.data_range_end
    return pointer


def _pending(candidates: Iterable[DataRange], history: Iterable[LoggedRange]) -> list[DataRange]:
    """Candidates not yet successful, each marked with the status of its existing row."""
    by_start = {r.data_range_start: r for r in history}
    pending = []
    for candidate in candidates:
        row = by_start.get(candidate.start)
        if row is not None and row.status == SUCCESS:
            if row.data_range_end != row.data_range_start:
                continue  # refreshed ahead of the pointer: already ingested
            # end = start holds nothing (an empty id range, a window ingested while still
            # open): run it again.
            candidate = replace(candidate, refresh=True)
        pending.append(replace(candidate, previous_status=row.status if row is not None else None))
    return pending


def check_order(requested: DataRange, pending: Sequence[DataRange], job_name: str) -> None:
    """Refuse a non-refresh range that is not the next one to run.

    A range later in `pending` waits for the first; a range not in `pending` at all is
    either done or not aligned with the planner, and must be run as a refresh.
    """
    if requested.refresh:
        return
    if pending and pending[0].start == requested.start:
        return
    if not pending:
        raise RangeOrderError(
            f"job {job_name!r}: range {requested.start!r} is not due (nothing is pending); "
            "run it as a refresh to re-ingest it"
        )
    first = pending[0]
    if any(r.start == requested.start for r in pending):
        state = first.previous_status or "not run yet"
        raise RangeOrderError(
            f"job {job_name!r}: range {requested.start!r} waits for earlier range "
            f"{first.start!r} ({state}); ranges run in order"
        )
    raise RangeOrderError(
        f"job {job_name!r}: range {requested.start!r} is not the next range "
        f"(next is {first.start!r}); run it as a refresh to re-ingest it"
    )


# -- time window ---------------------------------------------------------------------


def format_time(moment: datetime) -> str:
    """A UTC instant as job_log stores it, `YYYYMMDDHHMMSS` (naive datetimes are taken as UTC)."""
    if moment.tzinfo is not None:
        moment = moment.astimezone(UTC).replace(tzinfo=None)
    return moment.strftime(TIME_FORMAT)


def parse_time(text: str) -> datetime:
    try:
        return datetime.strptime(text, TIME_FORMAT)
    except ValueError:
        raise PlanningError(f"time-window bound {text!r} is not {TIME_FORMAT}") from None


def _naive_utc(moment: datetime) -> datetime:
    return moment.astimezone(UTC).replace(tzinfo=None) if moment.tzinfo else moment


@dataclass(frozen=True)
class TimeWindowPlanner:
    """Catch-up of floor((now - start) / period) windows of `period` from the pointer."""

    default_start: datetime
    period: timedelta
    kind: RangeKind = field(default=RangeKind.TIME_WINDOW, init=False)

    def __post_init__(self) -> None:
        if self.period <= timedelta(0):
            raise PlanningError(f"time-window period must be positive, got {self.period}")

    @property
    def period_minutes(self) -> int:
        return int(self.period.total_seconds() // 60)

    def pointer(self, history: Iterable[LoggedRange]) -> str:
        return committed_pointer(history, format_time(self.default_start), parse_time)

    def plan(self, history: Sequence[LoggedRange], inputs: PlanInputs) -> list[DataRange]:
        if inputs.now is None:
            raise PlanningError("time-window planning needs the current time")
        start = parse_time(self.pointer(history))
        count = max(0, math.floor((_naive_utc(inputs.now) - start) / self.period))
        windows = (
            DataRange(self.kind, format_time(start + i * self.period),
                      format_time(start + (i + 1) * self.period))
            for i in range(count)
        )
        return _pending(windows, history)


# -- auto-increment id ---------------------------------------------------------------


@dataclass(frozen=True)
class AutoIncrementIdPlanner:
    """One range (pointer, max id]: everything the source holds beyond the last range."""

    default_start: int = 0
    kind: RangeKind = field(default=RangeKind.AUTO_INC_ID, init=False)

    def pointer(self, history: Iterable[LoggedRange]) -> str:
        return committed_pointer(history, str(self.default_start), int)

    def plan(self, history: Sequence[LoggedRange], inputs: PlanInputs) -> list[DataRange]:
        start = self.pointer(history)
        if inputs.source_max_id is None or inputs.source_max_id <= int(start):
            return []
        return _pending([DataRange(self.kind, start, str(inputs.source_max_id))], history)


# -- Kafka offsets -------------------------------------------------------------------

EARLIEST = "{}"  # no partition listed: every partition starts at its earliest offset


def kafka_offsets_json(offsets: Mapping[str, Mapping[str | int, int]]) -> str:
    """Canonical JSON of offsets per topic-partition (sorted, compact): equal offsets,
    equal strings, which the unique (job_name, data_range_start) claim relies on."""
    canonical = {
        topic: {str(p): int(o) for p, o in sorted(parts.items(), key=lambda kv: int(kv[0]))}
        for topic, parts in sorted(offsets.items())
    }
    return json.dumps(canonical, separators=(",", ":"))


def parse_kafka_offsets(text: str) -> dict[str, dict[str, int]]:
    try:
        data = json.loads(text)
        return {topic: {str(p): int(o) for p, o in parts.items()} for topic, parts in data.items()}
    except (ValueError, AttributeError, TypeError):
        raise PlanningError(
            f"Kafka offsets {text!r} are not JSON {{topic: {{partition: offset}}}}"
        ) from None


def kafka_range_end(
    start: Mapping[str, Mapping[str, int]], consumed: Mapping[str, Mapping[str, int]]
) -> str:
    """End offsets of a Kafka range: last consumed offset + 1 per partition read;
    partitions with no new message keep their start offset (they are never dropped,
    or the next range would restart them from the earliest offset)."""
    end: dict[str, dict[str, int]] = {t: dict(parts) for t, parts in start.items()}
    for topic, parts in consumed.items():
        for partition, last_offset in parts.items():
            previous = end.setdefault(topic, {}).get(str(partition))
            next_offset = int(last_offset) + 1
            end[topic][str(partition)] = max(next_offset, previous or 0)
    return kafka_offsets_json(end)


def kafka_has_new_messages(
    start: Mapping[str, Mapping[str, int]], latest: Mapping[str, Mapping[str, int]],
    earliest: Mapping[str, Mapping[str, int]] | None = None,
) -> bool:
    """Whether any partition's high watermark is beyond the range start (a partition
    missing from the start begins at its earliest offset, 0 when unknown)."""
    for topic, parts in latest.items():
        for partition, high in parts.items():
            default = (earliest or {}).get(topic, {}).get(str(partition), 0)
            if int(high) > start.get(topic, {}).get(str(partition), default):
                return True
    return False


@dataclass(frozen=True)
class KafkaOffsetPlanner:
    """One range from the committed offsets (else earliest) to whatever the run consumes."""

    default_start: str = EARLIEST
    kind: RangeKind = field(default=RangeKind.KAFKA_OFFSET, init=False)

    def pointer(self, history: Iterable[LoggedRange]) -> str:
        default = kafka_offsets_json(parse_kafka_offsets(self.default_start))
        return committed_pointer(history, default)

    def plan(self, history: Sequence[LoggedRange], inputs: PlanInputs) -> list[DataRange]:
        start = self.pointer(history)
        if inputs.latest_offsets is not None and not kafka_has_new_messages(
            parse_kafka_offsets(start), inputs.latest_offsets
        ):
            return []
        return _pending([DataRange(self.kind, start, None)], history)


# -- upstream ------------------------------------------------------------------------


@dataclass(frozen=True)
class UpstreamPlanner:
    """One range per successful range of `upstream_job` not yet consumed.

    Consumed means: this job has a SUCCESS row for the same start that began after the
    upstream row last finished. So when the upstream re-ingests (refreshes) a range,
    this job follows and re-runs it, as a layered warehouse chains its layers (ODS -> DWD).
    """

    upstream_job: str
    kind: RangeKind = field(default=RangeKind.UPSTREAM, init=False)

    def plan(self, history: Sequence[LoggedRange], inputs: PlanInputs) -> list[DataRange]:
        if inputs.upstream_history is None:
            raise PlanningError(f"upstream planning needs the job log of {self.upstream_job!r}")
        mine = {r.data_range_start: r for r in history}
        pending = []
        for upstream in inputs.upstream_history:
            if upstream.status != SUCCESS:
                continue
            row = mine.get(upstream.data_range_start)
            if row is not None and row.status == SUCCESS and _started_after(row, upstream):
                continue
            status = row.status if row is not None else None
            pending.append(DataRange(self.kind, upstream.data_range_start, upstream.data_range_end,
                                     status, refresh=status == SUCCESS))
        return pending


def _started_after(row: LoggedRange, upstream: LoggedRange) -> bool:
    return (row.job_start_time or 0.0) >= (upstream.job_end_time or 0.0)


Planner = TimeWindowPlanner | AutoIncrementIdPlanner | KafkaOffsetPlanner | UpstreamPlanner
