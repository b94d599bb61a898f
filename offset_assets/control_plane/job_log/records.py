"""What job_log and step_log record: a range's row, a step of one attempt, a claim held
by a run, and the names job_log's columns can hold."""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from offset_assets.control_plane.job_log.errors import JobNameError


class JobStatus(StrEnum):
    RUNNING = "RUNNING"
    SUCCESS = "SUCCESS"
    FAILURE = "FAILURE"
    # Ingested, then undone by a revert of its table: consumed as a SUCCESS is (the
    # pointer passes it, no plan runs it again), and loaded again by any run of it.
    REVERTED = "REVERTED"


# The String(n) sizes of job_log's name columns (PostgreSQL enforces them, SQLite does not).
NAME_LIMITS = {"job_name": 255, "workflow_name": 255, "load_type": 32}


def check_job_names(**names: str | None) -> None:
    """Refuse, on every backend alike, a name that job_log could not store, or that
    holds a control character (`check_job_names(job_name=..., workflow_name=...)`; None means not given)."""
    for column, value in names.items():
        if value is None:
            continue
        limit = NAME_LIMITS[column]
        if not isinstance(value, str) or not value.strip():
            raise JobNameError(f"{column} must be a non-empty string, got {value!r}")
        if len(value) > limit:
            raise JobNameError(f"{column} is {len(value)} characters long, the limit is {limit}: {value!r}")
        if not value.isprintable():
            # A newline (or any control character) would split the row of every listing.
            raise JobNameError(f"{column} must hold no control characters: {value!r}")


@dataclass(frozen=True)
class JobRecord:
    """One row of job_log."""

    job_id: int
    workflow_name: str
    job_name: str
    period: int | None
    data_range_start: str
    data_range_end: str | None
    job_start_time: float | None
    job_end_time: float | None
    status: str
    load_type: str | None
    log_driven_type: str | None
    run_id: str | None
    runtime_args: str | None
    error: str | None
    create_time: float
    last_update_time: float
    heartbeat_at: float | None
    attempt: int
    # The table and delta its last success committed its rows in (None: it changed nothing,
    # or it has not succeeded), and the revert's delta that undid them (status REVERTED).
    target_table: str | None = None
    target_delta_num: int | None = None
    reverted_by_delta: int | None = None

    @property
    def runtime_args_dict(self) -> dict[str, Any]:
        return json.loads(self.runtime_args) if self.runtime_args else {}


@dataclass(frozen=True)
class StepRecord:
    """One step of one attempt of a job: what it read and wrote, or why it failed."""

    step_id: str
    status: str
    start_time: float
    end_time: float | None = None
    output: str = ""
    source_count: int | None = None
    target_count: int | None = None
    success_count: int | None = None
    failure_count: int | None = None
    error: str | None = None
    source_type: str | None = None
    target_type: str | None = None
    job_id: int | None = None
    attempt: int | None = None

    @property
    def duration(self) -> float:
        return 0.0 if self.end_time is None else max(0.0, self.end_time - self.start_time)


@dataclass(frozen=True)
class Claim:
    """A range this run holds: pass `job_id` and `run_id` back when finishing it."""

    job_id: int
    job_name: str
    data_range_start: str
    data_range_end: str | None
    run_id: str
    attempt: int
    previous_status: str | None  # None for a new range
    previous_run_id: str | None

    @property
    def took_over(self) -> bool:
        return self.previous_status == JobStatus.RUNNING
