"""Where a transformation's failed keys are: the meta deltas that recorded them.

A failed key is retried by every run, whatever the offsets. Scanning the whole meta for
`is_success = false` would make every run cost O(N); instead the commit that writes
failed meta rows records that meta delta here, in the same transaction, and a run reads
only the deltas listed. Once a run finds that none of a listed delta's keys is still
failed (they were retried with success), it drops the delta in its own commit.
"""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import Connection, delete, select

from offset_assets.control_plane.database import ControlPlane
from offset_assets.control_plane.schema import transform_failed_delta

_f = transform_failed_delta


class FailedDeltas:
    """Meta deltas holding keys whose last processing failed, per transformation."""

    def __init__(self, plane: ControlPlane) -> None:
        self.plane = plane

    def listed(self, transformation_id: str, conn: Connection | None = None) -> list[int]:
        """Meta delta numbers that may still hold failed keys, oldest first."""
        query = (select(_f.c.meta_delta_num).where(_f.c.transformation_id == transformation_id)
                 .order_by(_f.c.meta_delta_num))
        with self.plane.within(conn) as c:
            return [int(num) for num in c.execute(query).scalars()]

    def add(self, transformation_id: str, meta_delta_num: int, failed_keys: int, conn: Connection) -> None:
        conn.execute(_f.insert().values(transformation_id=transformation_id,
                                        meta_delta_num=meta_delta_num, failed_keys=failed_keys))

    def drop(self, transformation_id: str, meta_delta_nums: Iterable[int], conn: Connection) -> None:
        nums = list(meta_delta_nums)
        if nums:
            conn.execute(delete(_f).where(_f.c.transformation_id == transformation_id,
                                          _f.c.meta_delta_num.in_(nums)))

    def clear(self, transformation_id: str, conn: Connection | None = None) -> None:
        with self.plane.within(conn) as c:
            c.execute(delete(_f).where(_f.c.transformation_id == transformation_id))
