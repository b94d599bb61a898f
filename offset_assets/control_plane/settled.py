"""Settled snapshots: the input deltas a transformation has processed completely.

A complete run (every batch committed, no failed key) records its run snapshot here in
its final commit. The next run compares: when every input still has the same last
committed delta, no reprocess request and no failed key is pending and every offset is
in place, nothing can have changed, and the control plane alone says so (no Spark job).
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping

from sqlalchemy import Connection, delete, select

from offset_assets.control_plane.database import ControlPlane
from offset_assets.control_plane.schema import transform_settled

_s = transform_settled


class SettledSnapshots:
    def __init__(self, plane: ControlPlane) -> None:
        self.plane = plane

    def get(self, transformation_id: str) -> dict[str, int] | None:
        query = select(_s.c.input_deltas).where(_s.c.transformation_id == transformation_id)
        with self.plane.begin() as conn:
            value = conn.execute(query).scalar_one_or_none()
        return None if value is None else {name: int(num) for name, num in json.loads(value).items()}

    def record(self, transformation_id: str, input_deltas: Mapping[str, int], conn: Connection) -> None:
        conn.execute(delete(_s).where(_s.c.transformation_id == transformation_id))
        conn.execute(_s.insert().values(transformation_id=transformation_id,
                                        input_deltas=json.dumps(dict(sorted(input_deltas.items()))),
                                        settled_at=time.time()))

    def forget(self, transformation_id: str, conn: Connection) -> None:
        conn.execute(delete(_s).where(_s.c.transformation_id == transformation_id))
