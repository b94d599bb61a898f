"""Offsets reset between runs, kept until a run reports them.

A backfill resets offsets inside its own run and reports the values it replaced
(`offsets_reset`). A reset made between runs (`offset-assets rescan`, `offset-assets
reprocess`, `OffsetStore.reset_offset`) deletes the offsets before any run exists to say
so: the value each had is kept here, in the transaction that deletes it, and the next
full run reports it and deletes the rows in its final commit. A second reset before that
run keeps the first value: the offset the last complete run left is what the report names.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass

from sqlalchemy import Connection, delete, select
from sqlalchemy.dialects import postgresql, sqlite

from offset_assets.control_plane.database import ControlPlane
from offset_assets.control_plane.schema import transform_offset_reset

_r = transform_offset_reset


@dataclass(frozen=True)
class RecordedResets:
    """The offsets reset since a transformation's last complete run: input -> the value
    it had, and the wall clock of the latest reset."""

    offsets: Mapping[str, float]
    reset_at: float


class OffsetResets:
    """Offsets deleted between runs, per transformation and input (`transform_offset_reset`)."""

    def __init__(self, plane: ControlPlane) -> None:
        self.plane = plane

    def record(self, transformation_id: str, offsets: Mapping[str, float], conn: Connection) -> None:
        """Keep `offsets` (input -> the value being deleted) inside the caller's
        transaction; an input already recorded keeps its first value."""
        if not offsets:
            return
        now = time.time()
        rows = [{"transformation_id": transformation_id, "input_table_name": name,
                 "update_ts_offset": value, "reset_at": now} for name, value in sorted(offsets.items())]
        dialect = {"postgresql": postgresql, "sqlite": sqlite}.get(conn.dialect.name)
        if dialect is None:
            raise NotImplementedError(f"offsets are not supported on the {conn.dialect.name!r} dialect")
        conn.execute(dialect.insert(_r).on_conflict_do_nothing(), rows)

    def recorded(self, transformation_id: str, conn: Connection | None = None) -> RecordedResets | None:
        """The resets not reported yet, or None."""
        query = select(_r.c.input_table_name, _r.c.update_ts_offset, _r.c.reset_at).where(
            _r.c.transformation_id == transformation_id)
        with self.plane.within(conn) as c:
            rows = c.execute(query).all()
        if not rows:
            return None
        return RecordedResets({row.input_table_name: float(row.update_ts_offset) for row in rows},
                              max(float(row.reset_at) for row in rows))

    def clear(self, transformation_id: str, conn: Connection) -> None:
        """Delete the records once a complete run has reported them (in its final commit)."""
        conn.execute(delete(_r).where(_r.c.transformation_id == transformation_id))
