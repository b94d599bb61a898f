"""Ranges undone by a revert: a revert of a versioned table to delta K marks REVERTED every
successful range whose rows it committed after K, in the revert's own commit, so the
ranges can be loaded again once their source is fixed.

The marks follow the table's state as of K, so a revert of a revert is exact too: a range
a later revert had undone whose delta is at or before K is ingested again in that state
(SUCCESS), and a range whose delta is after K stays or becomes REVERTED.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy import Connection

from offset_assets.control_plane.database import ControlPlane
from offset_assets.control_plane.job_log.records import JobRecord, JobStatus
from offset_assets.control_plane.schema import job_log

_UNDONE = (JobStatus.SUCCESS.value, JobStatus.REVERTED.value)


@dataclass(frozen=True)
class RevertedRanges:
    """The ranges a revert of one table undoes (`reverted`) and brings back (`restored`),
    as job_log held them before it."""

    reverted: list[JobRecord]
    restored: list[JobRecord]


class RangeReverts:
    """The REVERTED marks of ranges (part of `JobLog`)."""

    plane: ControlPlane
    _clock: Callable[[], float]

    def ranges_reverted_by(self, table_name: str, to_delta: int, conn: Connection | None = None) -> RevertedRanges:
        """What a revert of `table_name` to delta `to_delta` would do to job_log (nothing
        is written): the ranges it marks REVERTED, and those it marks SUCCESS again."""
        with self.plane.within(conn) as tx:
            reverted = (
                tx.execute(sa.select(job_log).where(*_after(table_name, to_delta)).order_by(job_log.c.job_id))
                .mappings()
                .all()
            )
            restored = (
                tx.execute(sa.select(job_log).where(*_back(table_name, to_delta)).order_by(job_log.c.job_id))
                .mappings()
                .all()
            )
        return RevertedRanges([JobRecord(**row) for row in reverted], [JobRecord(**row) for row in restored])

    def mark_reverted(self, conn: Connection, table_name: str, to_delta: int, revert_delta: int) -> RevertedRanges:
        """In the revert's commit transaction `conn`: the ranges of `table_name` whose rows
        were committed after `to_delta` become REVERTED by `revert_delta`; REVERTED ones
        whose rows were committed at or before it, undone by a revert after it, SUCCESS."""
        marks = self.ranges_reverted_by(table_name, to_delta, conn)
        now = self._clock()
        conn.execute(
            job_log.update()
            .where(*_after(table_name, to_delta))
            .values(status=JobStatus.REVERTED.value, reverted_by_delta=revert_delta, last_update_time=now)
        )
        conn.execute(
            job_log.update()
            .where(*_back(table_name, to_delta))
            .values(status=JobStatus.SUCCESS.value, reverted_by_delta=None, last_update_time=now)
        )
        return marks


def _after(table_name: str, to_delta: int) -> list:
    return [job_log.c.target_table == table_name, job_log.c.target_delta_num > to_delta, job_log.c.status.in_(_UNDONE)]


def _back(table_name: str, to_delta: int) -> list:
    return [
        job_log.c.target_table == table_name,
        job_log.c.target_delta_num <= to_delta,
        job_log.c.status == JobStatus.REVERTED.value,
        job_log.c.reverted_by_delta > to_delta,
    ]
