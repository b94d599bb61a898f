"""Which data ranges an ingestion job runs next: pure functions of its job_log history.

The four log-driven range types, with one pointer rule shared by all of them:
the pointer is where the contiguous chain of successful ranges, walked from
`default_start`, ends. A successful range beyond a gap (an explicit refresh of a later
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

import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any, Protocol

from offset_assets.ranges.errors import PlanningError, RangeOrderError

TIME_FORMAT = "%Y%m%d%H%M%S"
SUCCESS = "SUCCESS"
# A first load of 100M rows becomes 100 ranges: each fits one driver and one commit.
DEFAULT_MAX_RANGE_SIZE = 1_000_000
# A 3-year catch-up of hourly windows is 26,000 ranges: planned 1,000 at a time, so a
# plan (done again before every range runs) and a sensor tick stay small.
DEFAULT_MAX_RANGES_PER_PLAN = 1_000


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
class Backlog:
    """What was due when a range was planned: where the backlog ends (the source's max id,
    the end of the last closed window) and how many ranges of the planner's size lie from
    this range's start to that end, this one included. Recorded with the range's claim,
    so `offset-assets jobs` can show a backlog's progress from job_log alone."""

    end: str
    ranges: int


@dataclass(frozen=True)
class DataRange:
    """One range to ingest. `end` None: decided when the range runs (max id, Kafka) and
    recorded in job_log before a row is read; a range that has run keeps that end.

    `max_size` caps a range whose end is decided when it runs: at most that many offsets
    of each Kafka partition (None: up to the high watermark). `backlog` is information
    for progress reports, not part of the range's identity.
    """

    kind: RangeKind
    start: str
    end: str | None
    previous_status: str | None = None  # status of the job_log row this range would re-run
    refresh: bool = False
    max_size: int | None = None
    backlog: Backlog | None = field(default=None, compare=False)


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


def recorded_end(row: LoggedRange | None) -> str | None:
    """The end a range that has run keeps: the one its job_log row records, unless it
    records none (a range that failed before its end was decided) or end = start (a range
    that holds nothing: an empty id range, a window ingested while still open), which is
    run again as the open head is."""
    if row is None or row.data_range_end is None or row.data_range_end == row.data_range_start:
        return None
    return row.data_range_end


def _pending(
    candidates: Iterable[DataRange], history: Iterable[LoggedRange], limit: int | None = None
) -> list[DataRange]:
    """Candidates not yet successful, each marked with the status of its existing row
    and, where the candidate's end is left to the run (Kafka), given the end its row
    recorded; the first `limit` of them (candidates may be generated lazily, a long
    catch-up)."""
    by_start = {r.data_range_start: r for r in history}
    pending: list[DataRange] = []
    for candidate in candidates:
        if limit is not None and len(pending) >= limit:
            break
        row = by_start.get(candidate.start)
        if row is not None and row.status == SUCCESS:
            if row.data_range_end != row.data_range_start:
                continue  # refreshed ahead of the pointer: already ingested
            # end = start holds nothing (an empty id range, a window ingested while still
            # open): run it again.
            candidate = replace(candidate, refresh=True)
        if candidate.end is None:
            candidate = replace(candidate, end=recorded_end(row))
        pending.append(replace(candidate, previous_status=row.status if row is not None else None))
    return pending


def check_order(requested: DataRange, pending: Sequence[DataRange], job_name: str) -> None:
    """Refuse a non-refresh range that is not the next one to run.

    A range later in `pending` waits for the first; a range not in `pending` at all is
    done, not aligned with the planner, or beyond what one plan lists (a long backlog):
    it waits, or is run as a refresh.
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
        f"(next is {first.start!r}) among the {len(pending)} planned; ranges run in order, "
        "and one already ingested is re-run: run it as a refresh to re-ingest it"
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


def _check_positive(planner: object, option: str, value: int | None) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise PlanningError(
            f"{type(planner).__name__}: {option} must be a positive integer or None, got {value!r}"
        )


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
        _check_positive(self, "max_windows_per_plan", self.max_windows_per_plan)

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
        backlog_end = format_time(start + count * self.period)
        windows = (
            DataRange(self.kind, format_time(start + i * self.period),
                      format_time(start + (i + 1) * self.period),
                      backlog=Backlog(backlog_end, count - i))
            for i in range(count)
        )
        return _pending(windows, history, self.max_windows_per_plan)


# -- auto-increment id ---------------------------------------------------------------


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
        _check_positive(self, "max_range_size", self.max_range_size)
        _check_positive(self, "max_ranges_per_plan", self.max_ranges_per_plan)

    def pointer(self, history: Iterable[LoggedRange]) -> str:
        return committed_pointer(history, str(self.default_start), int)

    def plan(self, history: Sequence[LoggedRange], inputs: PlanInputs) -> list[DataRange]:
        max_id = inputs.source_max_id
        pointer = int(self.pointer(history))
        if max_id is None or max_id <= pointer:
            return []
        return _pending(self._ranges(pointer, max_id, history), history, self.max_ranges_per_plan)

    def _ranges(self, start: int, max_id: int, history: Sequence[LoggedRange]) -> Iterable[DataRange]:
        run = {int(r.data_range_start): r for r in history
               if recorded_end(r) is not None and int(r.data_range_end) > int(r.data_range_start)}
        while start < max_id:
            row = run.get(start)
            if row is not None and row.status == SUCCESS:  # ingested ahead of the pointer
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
    """One range from the committed offsets (else earliest) to whatever the run consumes.

    The end is decided when the range runs (each partition's last stable offset, past
    transaction markers, capped per partition), so the next range can only
    be planned once this one is done. `max_offsets_per_partition` (None: up to the high
    watermark) caps what the run reads of each partition, carried as the range's
    `max_size`: a backlog of a topic becomes several ranges, one after the other.
    """

    default_start: str = EARLIEST
    max_offsets_per_partition: int | None = None
    kind: RangeKind = field(default=RangeKind.KAFKA_OFFSET, init=False)

    def __post_init__(self) -> None:
        _check_positive(self, "max_offsets_per_partition", self.max_offsets_per_partition)

    def pointer(self, history: Iterable[LoggedRange]) -> str:
        default = kafka_offsets_json(parse_kafka_offsets(self.default_start))
        return committed_pointer(history, default)

    def plan(self, history: Sequence[LoggedRange], inputs: PlanInputs) -> list[DataRange]:
        start = self.pointer(history)
        if inputs.latest_offsets is not None and not kafka_has_new_messages(
            parse_kafka_offsets(start), inputs.latest_offsets
        ):
            return []
        return _pending([DataRange(self.kind, start, None, max_size=self.max_offsets_per_partition)],
                        history)


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
