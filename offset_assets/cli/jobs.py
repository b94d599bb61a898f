"""`offset-assets jobs [NAME]`: the job log of log-driven ingestion, newest range first,
and for one job how far it is through its backlog."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import asdict
from typing import Any

import click

from offset_assets.cli.base import clear_errors, main, open_control_plane
from offset_assets.cli.offsets import human_age, iso_utc
from offset_assets.control_plane.job_log import JobLog
from offset_assets.control_plane.job_log.records import JobRecord, JobStatus
from offset_assets.errors import OffsetAssetsError
from offset_assets.ranges.planners import RangeKind, committed_pointer, parse_time

HEADER = ["job_id", "job", "type", "range start", "range end", "status", "attempt",
          "started (UTC)", "took", "steps", "run", "error"]
MAX_ERROR = 60


class UnknownJobError(OffsetAssetsError):
    """No job_log rows for the job name asked for."""


def _steps(counts: dict[str, int]) -> str:
    if not counts:
        return "-"
    return ", ".join(f"{n} {status.lower()}" for status, n in sorted(counts.items()))


def _took(row: JobRecord) -> str:
    if row.job_start_time is None or row.job_end_time is None:
        return "-"
    return human_age(row.job_end_time - row.job_start_time)


def _error(row: JobRecord) -> str:
    if not row.error:
        return "-"
    return row.error if len(row.error) <= MAX_ERROR else row.error[: MAX_ERROR - 3] + "..."


def range_bound(log_driven_type: str | None, bound: str | None) -> str:
    """Time-window bounds (stored as job_log stores them, YYYYMMDDHHMMSS) as ISO 8601 UTC; ids and
    Kafka offsets as stored."""
    if bound is None:
        return "-"
    if log_driven_type == str(RangeKind.TIME_WINDOW):
        return parse_time(bound).isoformat() + "Z"
    return bound


def _end(row: JobRecord) -> str:
    """A range's end; `open` for a time window ingested before it closed, which job_log
    records with end = start so that the window stays due (it is not an empty range)."""
    if row.runtime_args_dict.get("open_window") and row.data_range_end == row.data_range_start:
        return "open"
    return range_bound(row.log_driven_type, row.data_range_end)


def _row(row: JobRecord, counts: dict[str, int]) -> list[str]:
    return [
        str(row.job_id),
        row.job_name,
        row.log_driven_type or "-",
        range_bound(row.log_driven_type, row.data_range_start),
        _end(row),
        row.status,
        str(row.attempt),
        iso_utc(row.job_start_time) if row.job_start_time is not None else "-",
        _took(row),
        _steps(counts),
        row.run_id or "-",
        _error(row),
    ]


_ORDERED_KINDS: dict[str, tuple[str, Callable[[str], Any]]] = {
    str(RangeKind.AUTO_INC_ID): ("ids", int),
    str(RangeKind.TIME_WINDOW): ("windows", parse_time),
}


def _ranges(count: int, state: str) -> str:
    return f"{count} range{'' if count == 1 else 's'} {state}"


def backlog_progress(history: Sequence[JobRecord]) -> str:
    """How far a job is through its backlog, from its job_log rows alone: ranges done,
    failed, running (and reverted, when a revert undid some); for ids and windows where
    the ingested chain ends (from the first range) and where the backlog ended when a
    range was last planned, with the ranges then still due (recorded in the range's
    runtime_args by the run that claimed it)."""
    statuses = [row.status for row in history]
    parts = [_ranges(statuses.count(JobStatus.SUCCESS), "done"),
             f"{statuses.count(JobStatus.FAILURE)} failed",
             f"{statuses.count(JobStatus.RUNNING)} running"]
    if JobStatus.REVERTED in statuses:  # undone by a revert of the target: to be loaded again
        parts.append(f"{statuses.count(JobStatus.REVERTED)} reverted")
    kind = history[-1].log_driven_type if history else None
    if kind not in _ORDERED_KINDS:
        return ", ".join(parts)
    unit, order = _ORDERED_KINDS[kind]
    first = min((row.data_range_start for row in history), key=order)
    line = (f"{', '.join(parts)}; {unit} ingested up to "
            f"{range_bound(kind, committed_pointer(history, first, order))}")
    planned = [row for row in history
               if "backlog_end" in row.runtime_args_dict and row.job_start_time is not None]
    if not planned:
        return line
    last = max(planned, key=lambda row: row.job_start_time or 0.0)
    args = last.runtime_args_dict
    due = int(args["backlog_ranges"]) - (1 if last.status == JobStatus.SUCCESS else 0)
    return (f"{line} of {range_bound(kind, str(args['backlog_end']))}; {_ranges(due, 'due')} "
            f"(planned at {iso_utc(last.job_start_time or 0.0)})")


def _render(rows: list[list[str]]) -> str:
    widths = [max(len(line[i]) for line in [HEADER, *rows]) for i in range(len(HEADER))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
        for line in [HEADER, *rows]
    )


@main.command("jobs")
@click.argument("name", required=False)
@click.option("--status", type=click.Choice([s.value for s in JobStatus], case_sensitive=False),
              default=None, help="Only ranges with this status.")
@click.option("--limit", "-n", type=click.IntRange(min=1), default=None,
              help="Newest N ranges only.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per range.")
@click.pass_obj
@clear_errors
def jobs_command(obj: dict[str, Any], name: str | None, status: str | None, limit: int | None,
                 as_json: bool) -> None:
    """Ranges in job_log (all jobs, or job NAME), newest first: bounds, status, attempts,
    timing, steps per status, the run that holds or ran the range, and the last error.
    For job NAME, a last line shows its backlog's progress: ranges done, failed and
    running, how far ids or windows are ingested, and the ranges due when it was last
    planned (not with --json)."""
    log = JobLog(open_control_plane(obj))
    rows = log.jobs(name, status=status.upper() if status else None, limit=limit)
    if name is not None and not rows and name not in log.job_names():
        known = ", ".join(log.job_names()) or "none"
        raise UnknownJobError(f"no job_log rows for job {name!r} (jobs: {known})")
    counts = log.step_counts([r.job_id for r in rows])
    if as_json:
        for row in rows:
            click.echo(json.dumps({**asdict(row), "steps": counts.get(row.job_id, {})},
                                  sort_keys=True))
        return
    if not rows:
        click.echo("no job_log rows" + (f" with status {status.upper()}" if status else ""))
        return
    click.echo(_render([_row(row, counts.get(row.job_id, {})) for row in rows]))
    if name is not None:
        click.echo(f"\n{name}: {backlog_progress(log.history(name))}")
