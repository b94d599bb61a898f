"""A data range and what every planner shares: the range as job_log records it
(`DataRange`, `RangeKind`), the one pointer rule (`committed_pointer`), which planned
ranges are still due (`pending_ranges`) and the order they run in (`check_order`).
The planners by kind: `time_window.py`, `auto_increment.py`, `kafka_offsets.py`,
`upstream.py`; the rules they follow: the package's docstring (`__init__.py`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Protocol

from offset_assets.ranges.errors import PlanningError, RangeOrderError

TIME_FORMAT = "%Y%m%d%H%M%S"
SUCCESS = "SUCCESS"
# A range a revert of its table undid: its slice was consumed all the same, so no plan
# runs it again on its own (its source may still send what was reverted); a run of that
# range, asked for by hand once the source is fixed, loads it again.
REVERTED = "REVERTED"
CONSUMED = frozenset({SUCCESS, REVERTED})
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
    """End of the contiguous chain of consumed ranges (SUCCESS, or REVERTED: undone by a
    revert, loaded again only when asked) that starts at `default_start`.

    With `order` (time, id), a success covering the pointer (start <= pointer < end)
    advances it, so a `default_start` raised into the history is honoured. Without it
    (Kafka JSON), ranges chain by exact equality of end and next start.
    """
    successes = [r for r in history if r.status in CONSUMED and r.data_range_end is not None]
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


def pending_ranges(
    candidates: Iterable[DataRange], history: Iterable[LoggedRange], limit: int | None = None
) -> list[DataRange]:
    """Candidates not yet consumed (successful or reverted), each marked with the status of its existing row
    and, where the candidate's end is left to the run (Kafka), given the end its row
    recorded; the first `limit` of them (candidates may be generated lazily, a long
    catch-up)."""
    by_start = {r.data_range_start: r for r in history}
    pending: list[DataRange] = []
    for candidate in candidates:
        if limit is not None and len(pending) >= limit:
            break
        row = by_start.get(candidate.start)
        if row is not None and row.status in CONSUMED:
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


# -- job_log's time bounds ----------------------------------------------------------


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


# -- planner options ---------------------------------------------------------------


def check_positive(planner: object, option: str, value: int | None) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise PlanningError(
            f"{type(planner).__name__}: {option} must be a positive integer or None, got {value!r}"
        )
