"""`job_log` and `step_log`: every data range an ingestion runs, and its steps.

One row per (job_name, data_range_start). Claiming a range is atomic on both backends:
- a new range is claimed by inserting its row; the unique constraint lets exactly one
  of two concurrent schedulers succeed;
- an existing row (failed, refreshed, or RUNNING under a dead holder) is claimed by a
  compare-and-set UPDATE on (status, attempt): of two concurrent claimers only the one
  whose UPDATE still sees the row as it read it gets rowcount 1.

`attempt` counts claims of the row; steps are kept per attempt so a retry never
overwrites the steps of the attempt it retries. `mark_success` accepts the caller's
connection so SUCCESS is written in the transaction that commits the range's data.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from sqlalchemy import (
    BigInteger,
    Column,
    Connection,
    Double,
    Index,
    Integer,
    String,
    Table,
    Text,
    UniqueConstraint,
    func,
    insert,
    select,
    update,
)
from sqlalchemy.exc import IntegrityError

from offset_assets.control_plane.database import ControlPlane
from offset_assets.control_plane.schema import metadata
from offset_assets.errors import OffsetAssetsError

# A holder heartbeats well within this; a RUNNING row silent for longer is taken over.
DEFAULT_STALE_AFTER_S = 600.0

job_log = Table(
    "job_log",
    metadata,
    Column("job_id", BigInteger().with_variant(Integer(), "sqlite"), primary_key=True,
           autoincrement=True),
    Column("workflow_name", String(255), nullable=False),
    Column("job_name", String(255), nullable=False),
    Column("period", Integer, nullable=True),  # minutes, time-window ranges only
    Column("data_range_start", Text, nullable=False),
    Column("data_range_end", Text, nullable=True),
    Column("job_start_time", Double, nullable=True),
    Column("job_end_time", Double, nullable=True),
    Column("status", String(16), nullable=False),
    Column("load_type", String(32), nullable=True),
    Column("log_driven_type", String(32), nullable=True),
    Column("run_id", String(255), nullable=True),
    Column("runtime_args", Text, nullable=True),  # JSON object
    Column("error", Text, nullable=True),
    Column("create_time", Double, nullable=False),
    Column("last_update_time", Double, nullable=False),
    Column("heartbeat_at", Double, nullable=True),
    Column("attempt", Integer, nullable=False),
    UniqueConstraint("job_name", "data_range_start", name="uq_job_log_range"),
    Index("ix_job_log_job_status", "job_name", "status"),
)

step_log = Table(
    "step_log",
    metadata,
    Column("job_id", BigInteger, primary_key=True),
    Column("attempt", Integer, primary_key=True),
    Column("step_id", String(64), primary_key=True),
    Column("status", String(16), nullable=False),
    Column("start_time", Double, nullable=False),
    Column("end_time", Double, nullable=True),
    Column("duration", Double, nullable=False),  # seconds
    Column("output", Text, nullable=False),
    Column("source_count", BigInteger, nullable=True),
    Column("target_count", BigInteger, nullable=True),
    Column("success_count", BigInteger, nullable=True),
    Column("failure_count", BigInteger, nullable=True),
    Column("error", Text, nullable=True),
    Column("source_type", String(32), nullable=True),
    Column("target_type", String(32), nullable=True),
)


class JobStatus(StrEnum):
    RUNNING = "RUNNING"
    SUCCESS = "SUCCESS"
    FAILURE = "FAILURE"


class RangeClaimError(OffsetAssetsError):
    """A data range cannot be claimed; the message names the job, the range and why."""


class RangeHeldError(RangeClaimError):
    """Another live holder runs the range, or won a concurrent claim of it."""


class RangeDoneError(RangeClaimError):
    """The range was already ingested successfully and no refresh was asked for."""


class ClaimLostError(OffsetAssetsError):
    """The range was taken over (or never claimed) by this run: its result must not commit."""


class JobNameError(OffsetAssetsError, ValueError):
    """A job, workflow or load-type name that its job_log column cannot hold."""


# The String(n) sizes of job_log's name columns (PostgreSQL enforces them, SQLite does not).
NAME_LIMITS = {"job_name": 255, "workflow_name": 255, "load_type": 32}


def check_job_names(**names: str | None) -> None:
    """Refuse, on every backend alike, a name that job_log could not store
    (`check_job_names(job_name=..., workflow_name=...)`; None means not given)."""
    for column, value in names.items():
        if value is None:
            continue
        limit = NAME_LIMITS[column]
        if not isinstance(value, str) or not value.strip():
            raise JobNameError(f"{column} must be a non-empty string, got {value!r}")
        if len(value) > limit:
            raise JobNameError(f"{column} is {len(value)} characters long, the limit is {limit}: {value!r}")


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


class JobLog:
    """Repository of job_log/step_log on one control plane.

    `clock` returns epoch seconds; tests pass a fake one to age heartbeats.
    """

    def __init__(self, plane: ControlPlane, clock: Callable[[], float] = time.time) -> None:
        self.plane = plane
        self._clock = clock

    # -- claiming ---------------------------------------------------------------------

    def claim(
        self,
        job_name: str,
        data_range_start: str,
        data_range_end: str | None,
        *,
        run_id: str,
        workflow_name: str | None = None,
        period: int | None = None,
        load_type: str | None = None,
        log_driven_type: str | None = None,
        runtime_args: dict[str, Any] | None = None,
        refresh: bool = False,
        stale_after_s: float = DEFAULT_STALE_AFTER_S,
        is_run_dead: Callable[[str], bool] | None = None,
    ) -> Claim:
        """Claim one range for `run_id`, or raise `RangeHeldError` / `RangeDoneError`.

        A FAILURE row is retried; a RUNNING row is taken over when its heartbeat is older
        than `stale_after_s` or `is_run_dead(run_id)` says its holder died; a SUCCESS row
        is re-run only with `refresh=True`.
        """
        check_job_names(job_name=job_name, workflow_name=workflow_name, load_type=load_type)
        now = self._clock()
        fields = {
            "workflow_name": workflow_name or job_name,
            "period": period,
            "data_range_end": data_range_end,
            "job_start_time": now,
            "job_end_time": None,
            "status": JobStatus.RUNNING.value,
            "load_type": load_type,
            "log_driven_type": log_driven_type,
            "run_id": run_id,
            "runtime_args": json.dumps(runtime_args, sort_keys=True) if runtime_args else None,
            "error": None,
            "last_update_time": now,
            "heartbeat_at": now,
        }
        try:
            with self.plane.begin() as conn:
                result = conn.execute(
                    insert(job_log).values(
                        job_name=job_name, data_range_start=data_range_start,
                        create_time=now, attempt=1, **fields,
                    )
                )
                job_id = int(result.inserted_primary_key[0])
            return Claim(job_id, job_name, data_range_start, data_range_end, run_id, 1, None, None)
        except IntegrityError:
            pass  # the range has a row: claim it by compare-and-set below

        existing = self.get_range(job_name, data_range_start)
        if existing is None:  # only if someone deleted the row in between
            raise RangeHeldError(
                f"job {job_name!r} range {data_range_start!r}: row vanished during claim"
            )
        self._check_claimable(existing, refresh, stale_after_s, is_run_dead, now)
        with self.plane.begin() as conn:
            result = conn.execute(
                update(job_log)
                .where(
                    job_log.c.job_id == existing.job_id,
                    job_log.c.status == existing.status,
                    job_log.c.attempt == existing.attempt,
                )
                .values(attempt=existing.attempt + 1, **fields)
            )
        if result.rowcount != 1:
            raise RangeHeldError(
                f"job {job_name!r} range {data_range_start!r} "
                "was claimed concurrently by another run"
            )
        return Claim(
            existing.job_id, job_name, data_range_start, data_range_end, run_id,
            existing.attempt + 1, existing.status, existing.run_id,
        )

    def _check_claimable(
        self,
        row: JobRecord,
        refresh: bool,
        stale_after_s: float,
        is_run_dead: Callable[[str], bool] | None,
        now: float,
    ) -> None:
        where = f"job {row.job_name!r} range {row.data_range_start!r}"
        if row.status == JobStatus.FAILURE:
            return
        if row.status == JobStatus.SUCCESS:
            if refresh:
                return
            raise RangeDoneError(
                f"{where} was already ingested (job_id {row.job_id}); refresh to re-run it"
            )
        if self.is_stale(row, stale_after_s, is_run_dead, now):
            return
        raise RangeHeldError(
            f"{where} is RUNNING under run {row.run_id!r} (job_id {row.job_id}, "
            f"heartbeat {now - (row.heartbeat_at or row.last_update_time):.0f}s ago)"
        )

    def is_stale(
        self,
        row: JobRecord,
        stale_after_s: float = DEFAULT_STALE_AFTER_S,
        is_run_dead: Callable[[str], bool] | None = None,
        now: float | None = None,
    ) -> bool:
        """Whether a RUNNING row's holder is gone: silent too long, or its run is dead."""
        if row.status != JobStatus.RUNNING:
            return False
        now = self._clock() if now is None else now
        last_sign_of_life = row.heartbeat_at or row.last_update_time
        if now - last_sign_of_life > stale_after_s:
            return True
        return bool(is_run_dead and row.run_id and is_run_dead(row.run_id))

    def stale_running(
        self,
        job_name: str | None = None,
        stale_after_s: float = DEFAULT_STALE_AFTER_S,
        is_run_dead: Callable[[str], bool] | None = None,
    ) -> list[JobRecord]:
        """RUNNING rows whose holder died: candidates for takeover."""
        now = self._clock()
        running = self.jobs(job_name, status=JobStatus.RUNNING)
        return [row for row in running if self.is_stale(row, stale_after_s, is_run_dead, now)]

    def heartbeat(self, job_id: int, run_id: str) -> bool:
        """Refresh the holder's sign of life; False when the range is no longer held by `run_id`."""
        now = self._clock()
        with self.plane.begin() as conn:
            result = conn.execute(
                update(job_log)
                .where(job_log.c.job_id == job_id, job_log.c.run_id == run_id,
                       job_log.c.status == JobStatus.RUNNING.value)
                .values(heartbeat_at=now, last_update_time=now)
            )
        return result.rowcount == 1

    # -- finishing --------------------------------------------------------------------

    def mark_success(
        self,
        job_id: int,
        data_range_end: str | None,
        conn: Connection | None = None,
        *,
        run_id: str | None = None,
    ) -> None:
        """RUNNING -> SUCCESS with the range end actually reached.

        With `run_id`, only while that run still holds the range; otherwise
        `ClaimLostError` is raised, which rolls back the caller's transaction (and the data
        committed in it) so a taken-over holder cannot ingest the range a second time.
        """
        now = self._clock()
        conditions = [job_log.c.job_id == job_id, job_log.c.status == JobStatus.RUNNING.value]
        if run_id is not None:
            conditions.append(job_log.c.run_id == run_id)
        with self.plane.within(conn) as tx:
            result = tx.execute(
                update(job_log).where(*conditions).values(
                    status=JobStatus.SUCCESS.value, data_range_end=data_range_end,
                    job_end_time=now, last_update_time=now, heartbeat_at=now, error=None,
                )
            )
        if result.rowcount != 1:
            raise ClaimLostError(
                f"job_id {job_id} is no longer RUNNING"
                + (f" under run {run_id!r}" if run_id else "")
                + ": another run took the range over; nothing of this run is committed"
            )

    def mark_failure(
        self,
        job_id: int,
        error: str,
        conn: Connection | None = None,
        *,
        run_id: str | None = None,
    ) -> bool:
        """RUNNING -> FAILURE; False (and nothing written) when another run holds the range now."""
        now = self._clock()
        conditions = [job_log.c.job_id == job_id, job_log.c.status == JobStatus.RUNNING.value]
        if run_id is not None:
            conditions.append(job_log.c.run_id == run_id)
        with self.plane.within(conn) as tx:
            result = tx.execute(
                update(job_log).where(*conditions).values(
                    status=JobStatus.FAILURE.value, error=error,
                    job_end_time=now, last_update_time=now,
                )
            )
        return result.rowcount == 1

    def record_step(
        self, job_id: int, attempt: int, step: StepRecord, conn: Connection | None = None
    ) -> None:
        """Insert one step of an attempt (a step id is recorded once per attempt)."""
        with self.plane.within(conn) as tx:
            tx.execute(
                insert(step_log).values(
                    job_id=job_id, attempt=attempt, step_id=step.step_id, status=step.status,
                    start_time=step.start_time, end_time=step.end_time, duration=step.duration,
                    output=step.output, source_count=step.source_count,
                    target_count=step.target_count, success_count=step.success_count,
                    failure_count=step.failure_count, error=step.error,
                    source_type=step.source_type, target_type=step.target_type,
                )
            )

    # -- reading ----------------------------------------------------------------------

    def get(self, job_id: int) -> JobRecord | None:
        with self.plane.begin() as conn:
            row = conn.execute(select(job_log).where(job_log.c.job_id == job_id)).mappings().first()
        return JobRecord(**row) if row else None

    def get_range(self, job_name: str, data_range_start: str) -> JobRecord | None:
        with self.plane.begin() as conn:
            row = conn.execute(
                select(job_log).where(job_log.c.job_name == job_name,
                                      job_log.c.data_range_start == data_range_start)
            ).mappings().first()
        return JobRecord(**row) if row else None

    def history(self, job_name: str) -> list[JobRecord]:
        """Every range of a job, in the order they were first claimed."""
        return list(reversed(self.jobs(job_name)))

    def jobs(
        self,
        job_name: str | None = None,
        *,
        status: str | None = None,
        limit: int | None = None,
    ) -> list[JobRecord]:
        """job_log rows, newest first."""
        query = select(job_log).order_by(job_log.c.job_id.desc())
        if job_name is not None:
            query = query.where(job_log.c.job_name == job_name)
        if status is not None:
            query = query.where(job_log.c.status == str(status))
        if limit is not None:
            query = query.limit(limit)
        with self.plane.begin() as conn:
            rows = conn.execute(query).mappings().all()
        return [JobRecord(**row) for row in rows]

    def job_names(self) -> list[str]:
        with self.plane.begin() as conn:
            return list(conn.execute(select(job_log.c.job_name).distinct()
                                     .order_by(job_log.c.job_name)).scalars())

    def steps(self, job_id: int, attempt: int | None = None) -> list[StepRecord]:
        """Steps of a job (of one attempt when given), oldest first."""
        query = select(step_log).where(step_log.c.job_id == job_id)
        if attempt is not None:
            query = query.where(step_log.c.attempt == attempt)
        query = query.order_by(step_log.c.attempt, step_log.c.start_time, step_log.c.step_id)
        with self.plane.begin() as conn:
            rows = conn.execute(query).mappings().all()
        return [StepRecord(**{k: v for k, v in row.items() if k != "duration"}) for row in rows]

    def step_counts(self, job_ids: Sequence[int]) -> dict[int, dict[str, int]]:
        """Per job: number of steps by status, over all attempts (one query)."""
        if not job_ids:
            return {}
        query = (
            select(step_log.c.job_id, step_log.c.status, func.count())
            .where(step_log.c.job_id.in_(list(job_ids)))
            .group_by(step_log.c.job_id, step_log.c.status)
        )
        counts: dict[int, dict[str, int]] = {}
        with self.plane.begin() as conn:
            for job_id, status, count in conn.execute(query):
                counts.setdefault(int(job_id), {})[status] = int(count)
        return counts
