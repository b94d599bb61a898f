"""Claiming, holding and finishing a data range in job_log.

Claiming a range is atomic on both backends:
- a new range is claimed by inserting its row; the unique constraint lets exactly one
  of two concurrent schedulers succeed;
- an existing row (failed, refreshed, or RUNNING under a dead holder) is claimed by a
  compare-and-set UPDATE on (status, attempt): of two concurrent claimers only the one
  whose UPDATE still sees the row as it read it gets rowcount 1.

`mark_success` accepts the caller's connection so SUCCESS is written in the transaction
that commits the range's data.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from sqlalchemy import Connection, insert, update
from sqlalchemy.exc import IntegrityError

from offset_assets.control_plane.job_log.errors import ClaimLostError, RangeDoneError, RangeHeldError
from offset_assets.control_plane.job_log.listing import JobListing
from offset_assets.control_plane.job_log.records import Claim, JobRecord, JobStatus, check_job_names
from offset_assets.control_plane.schema import job_log

# A holder heartbeats well within this; a RUNNING row silent for longer is taken over.
DEFAULT_STALE_AFTER_S = 600.0


class RangeClaims(JobListing):
    """A range's life in job_log, claim to SUCCESS or FAILURE (part of `JobLog`); it
    reads the range's row before it takes an existing one over."""

    _clock: Callable[[], float]

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
        than `stale_after_s` or `is_run_dead(run_id)` says its holder died; a SUCCESS or
        REVERTED row is re-run only with `refresh=True`.
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
        if row.status in (JobStatus.SUCCESS, JobStatus.REVERTED):
            if refresh:
                return
            done = ("was ingested, then reverted by delta "
                    f"{row.reverted_by_delta} of {row.target_table!r}" if row.status == JobStatus.REVERTED
                    else "was already ingested")
            raise RangeDoneError(f"{where} {done} (job_id {row.job_id}); refresh to re-run it")
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

    def record_end(self, job_id: int, data_range_end: str, *, run_id: str) -> None:
        """Record the end of a range whose end was decided after its claim, while `run_id`
        holds it (`ClaimLostError` otherwise): from then on the range is that slice."""
        with self.plane.begin() as conn:
            result = conn.execute(
                update(job_log).where(*_still_running(job_id, run_id)).values(
                    data_range_end=data_range_end, last_update_time=self._clock())
            )
        if result.rowcount != 1:
            raise ClaimLostError(
                f"job_id {job_id} is no longer RUNNING under run {run_id!r}: another run took the "
                "range over; nothing of this run is committed"
            )

    def mark_success(
        self,
        job_id: int,
        data_range_end: str | None,
        conn: Connection | None = None,
        *,
        run_id: str | None = None,
        target: tuple[str, int | None] | None = None,
    ) -> None:
        """RUNNING -> SUCCESS with the range end actually reached; `target`: the versioned
        table the range wrote and the delta it committed in the same transaction (None:
        it changed nothing), which a revert of that table finds the range by.

        With `run_id`, only while that run still holds the range; otherwise
        `ClaimLostError` is raised, which rolls back the caller's transaction (and the data
        committed in it) so a taken-over holder cannot ingest the range a second time.
        """
        now = self._clock()
        conditions = _still_running(job_id, run_id)
        written = {} if target is None else {"target_table": target[0], "target_delta_num": target[1]}
        with self.plane.within(conn) as tx:
            result = tx.execute(
                update(job_log).where(*conditions).values(
                    status=JobStatus.SUCCESS.value, data_range_end=data_range_end,
                    job_end_time=now, last_update_time=now, heartbeat_at=now, error=None,
                    reverted_by_delta=None, **written,
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
        conditions = _still_running(job_id, run_id)
        with self.plane.within(conn) as tx:
            result = tx.execute(
                update(job_log).where(*conditions).values(
                    status=JobStatus.FAILURE.value, error=error,
                    job_end_time=now, last_update_time=now,
                )
            )
        return result.rowcount == 1


def _still_running(job_id: int, run_id: str | None) -> list:
    """The range `job_id` is RUNNING (under `run_id`, when given): what an end state
    written by its holder requires, so that a taken-over holder writes nothing."""
    conditions = [job_log.c.job_id == job_id, job_log.c.status == JobStatus.RUNNING.value]
    if run_id is not None:
        conditions.append(job_log.c.run_id == run_id)
    return conditions
