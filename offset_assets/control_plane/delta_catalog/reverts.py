"""What a revert asks of the delta catalog: whether the deltas it would undo were written by
a transformation's run, and the record of the delta a revert's delta set its table back to."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy import Connection

from offset_assets.control_plane.database import ControlPlane
from offset_assets.control_plane.delta_catalog.records import COMMITTED
from offset_assets.control_plane.names import META_TABLE_PREFIX
from offset_assets.control_plane.schema import table_delta, versioned_table


class RevertRecords:
    """The catalog's part in reverts (part of `DeltaCatalog`)."""

    plane: ControlPlane

    def transformation_commit_after(self, table_name: str, after_delta: int) -> tuple[int, str] | None:
        """(delta, meta table) of the first committed delta of `table_name` after
        `after_delta` that was committed in one transaction with a transformation's meta
        table (`_meta__<transformation>`), else None. A transformation commits its outputs
        and its meta together, and nothing else commits a meta table, so such a delta is a
        transformation's output. A commit's
        timestamp is its own (the commit clock only moves forward), so one commit's deltas
        share it and no other delta has it."""
        metas = sa.select(versioned_table.c.table_name).where(
            versioned_table.c.table_name.startswith(META_TABLE_PREFIX, autoescape=True)
        )
        mine = table_delta.alias("mine")
        meta = table_delta.alias("meta")
        query = (
            sa.select(mine.c.delta_num, meta.c.table_name)
            .join(meta, sa.and_(meta.c.commit_ts == mine.c.commit_ts, meta.c.status == COMMITTED))
            .where(
                mine.c.table_name == table_name,
                mine.c.status == COMMITTED,
                mine.c.delta_num > after_delta,
                meta.c.table_name.in_(metas),
            )
            .order_by(mine.c.delta_num)
            .limit(1)
        )
        with self.plane.begin() as conn:
            row = conn.execute(query).first()
        return None if row is None else (int(row[0]), row[1])

    def record_revert(self, conn: Connection, table_name: str, delta_num: int, reverts_to: int) -> None:
        """Record, in the caller's commit transaction, that delta `delta_num` of
        `table_name` set the table back to its state as of delta `reverts_to`."""
        conn.execute(
            table_delta.update()
            .where(table_delta.c.table_name == table_name, table_delta.c.delta_num == delta_num)
            .values(reverts_to=reverts_to)
        )
