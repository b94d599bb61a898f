"""Reprocess requests: "process every key of this transformation again".

Resetting offsets alone re-scans the inputs, but keys whose meta is newer than their
versions stay processed. A reprocess request supersedes the meta instead: it records a
commit-clock value R, and every key whose meta is older than R (or which has no meta)
belongs to the next run's changed index, in v1 and v2 alike. A run commits its keys with
`process_ts > R`, so a run that dies half-way leaves the request in place and the next
run resumes with the keys still left; the request is deleted in the commit of the run
that finished the whole set. A new request, or a backfill, moves a pending request
forward to its own R (the later value covers every key the earlier one did).

The request and the offset reset are one transaction, and R is taken from the commit
clock, so it is strictly greater than the process_ts of every key processed before it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from sqlalchemy import Connection, delete, select, update

from offset_assets.control_plane.database import ControlPlane
from offset_assets.control_plane.delta_catalog import DeltaCatalog
from offset_assets.control_plane.names import validate_name
from offset_assets.control_plane.offsets import OffsetRepository
from offset_assets.control_plane.schema import transform_reprocess_request

_r = transform_reprocess_request


@dataclass(frozen=True)
class PendingReprocess:
    """A pending request: its clock value R and the wall clock at which it was made (or
    last moved forward), which a report names."""

    requested_ts: float
    requested_at: float


class ReprocessRequests:
    """Pending reprocess requests in `transform_reprocess_request`, one per transformation."""

    def __init__(self, plane: ControlPlane) -> None:
        self.plane = plane

    def request(self, transformation_id: str, conn: Connection | None = None) -> float:
        """Ask for every key to be processed again; returns the request's clock value R.

        In one transaction: the commit clock is bumped (R), the request is stored and every
        offset of the transformation is deleted. A pending request is moved forward to R:
        keys processed since it was made (by a run that died half-way) are covered again,
        and every key the older request covered is older than R too."""
        validate_name(transformation_id, "transformation id")
        with self.plane.within(conn) as c:
            requested_ts = DeltaCatalog.bump_clock(c)
            self.record(transformation_id, requested_ts, c)
            OffsetRepository(self.plane).reset_offset(transformation_id, conn=c)
        return requested_ts

    def record(self, transformation_id: str, requested_ts: float, conn: Connection) -> None:
        """Store request R inside the caller's transaction (a batch-mode backfill records
        its own R in its first commit, so a crash leaves it resumable). A pending request
        ends up at the later of the two values: the later one covers every key the earlier
        one did."""
        pending = self.pending(transformation_id, conn=conn)
        if pending is None:
            conn.execute(_r.insert().values(
                transformation_id=transformation_id, requested_ts=requested_ts, requested_at=time.time()))
        elif requested_ts > pending:
            conn.execute(update(_r).where(_r.c.transformation_id == transformation_id)
                         .values(requested_ts=requested_ts, requested_at=time.time()))

    def pending(self, transformation_id: str, conn: Connection | None = None) -> float | None:
        """R of the pending request, or None."""
        request = self.pending_request(transformation_id, conn)
        return None if request is None else request.requested_ts

    def pending_request(self, transformation_id: str, conn: Connection | None = None) -> PendingReprocess | None:
        """The pending request (R and when it was made), or None."""
        query = select(_r.c.requested_ts, _r.c.requested_at).where(_r.c.transformation_id == transformation_id)
        with self.plane.within(conn) as c:
            row = c.execute(query).one_or_none()
        return None if row is None else PendingReprocess(float(row.requested_ts), float(row.requested_at))

    def complete(self, transformation_id: str, requested_ts: float, conn: Connection) -> None:
        """Delete the request R once a run has processed every key it covers (a newer
        request, made while that run was going, stays)."""
        conn.execute(delete(_r).where(_r.c.transformation_id == transformation_id,
                                      _r.c.requested_ts <= requested_ts))
