"""step_log: the steps of each attempt of a range (what each read and wrote, or why it
failed), recorded per attempt so a retry never overwrites the attempt it retries."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import Connection, func, insert, select

from offset_assets.control_plane.database import ControlPlane
from offset_assets.control_plane.job_log.records import StepRecord
from offset_assets.control_plane.schema import step_log


class StepLog:
    """Writes and reads of `step_log` rows (part of `JobLog`)."""

    plane: ControlPlane

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
