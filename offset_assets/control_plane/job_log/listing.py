"""Reads of job_log: one range by id or by start, a job's history, the listing the CLI
shows, the job names."""

from __future__ import annotations

from sqlalchemy import select

from offset_assets.control_plane.database import ControlPlane
from offset_assets.control_plane.job_log.records import JobRecord
from offset_assets.control_plane.schema import job_log


class JobListing:
    """Reads of `job_log` rows (part of `JobLog`)."""

    plane: ControlPlane

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
