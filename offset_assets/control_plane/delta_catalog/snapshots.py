"""Compacted snapshots in the catalog, and what maintenance asks of it: the changes a
read merges on top of a snapshot, the snapshots to expire, the paths still referenced."""

from __future__ import annotations

import time

import sqlalchemy as sa

from offset_assets.control_plane.database import ControlPlane
from offset_assets.control_plane.delta_catalog.errors import DeltaCatalogError
from offset_assets.control_plane.delta_catalog.records import COMMITTED, SnapshotInfo, snapshot_info
from offset_assets.control_plane.schema import table_delta, table_snapshot


class SnapshotRecords:
    """The `table_snapshot` rows of one control plane (part of `DeltaCatalog`)."""

    plane: ControlPlane

    def add_snapshot(self, table_name: str, delta_num: int, data_path: str, row_count: int,
                     stores_update_ts: bool = False) -> SnapshotInfo:
        """Record a compacted snapshot of committed delta `delta_num` (its files are written;
        `stores_update_ts`: they hold each row's update_ts)."""
        with self.plane.begin() as conn:
            status = conn.execute(
                sa.select(table_delta.c.status).where(
                    table_delta.c.table_name == table_name, table_delta.c.delta_num == delta_num
                )
            ).scalar()
            if status != COMMITTED:
                raise DeltaCatalogError(f"table {table_name!r}: cannot snapshot delta {delta_num}: it is not committed")
            created_at = time.time()
            conn.execute(
                table_snapshot.insert().values(
                    table_name=table_name,
                    delta_num=delta_num,
                    data_path=data_path,
                    row_count=row_count,
                    created_at=created_at,
                    stores_update_ts=stores_update_ts,
                )
            )
        return SnapshotInfo(table_name, delta_num, data_path, row_count, created_at, stores_update_ts)

    def snapshot_at(self, table_name: str, delta_num: int) -> SnapshotInfo | None:
        """The latest snapshot taken at or before delta `delta_num`."""
        with self.plane.begin() as conn:
            row = conn.execute(
                sa.select(table_snapshot)
                .where(
                    table_snapshot.c.table_name == table_name,
                    table_snapshot.c.delta_num <= delta_num,
                )
                .order_by(table_snapshot.c.delta_num.desc())
                .limit(1)
            ).first()
        return snapshot_info(row) if row is not None else None

    def snapshots(self, table_name: str) -> list[SnapshotInfo]:
        with self.plane.begin() as conn:
            rows = conn.execute(
                sa.select(table_snapshot)
                .where(table_snapshot.c.table_name == table_name)
                .order_by(table_snapshot.c.delta_num)
            )
            return [snapshot_info(row) for row in rows]

    def changes_after(self, table_name: str, delta_num: int) -> tuple[int, int]:
        """(committed deltas with versions after `delta_num`, versions they wrote): what a
        read of the actual state must merge on top of the snapshot at `delta_num`."""
        with self.plane.begin() as conn:
            row = conn.execute(
                sa.select(
                    sa.func.count(),
                    sa.func.coalesce(
                        sa.func.sum(
                            sa.func.coalesce(table_delta.c.rows_upserted, 0)
                            + sa.func.coalesce(table_delta.c.rows_deleted, 0)
                        ),
                        0,
                    ),
                ).where(
                    table_delta.c.table_name == table_name,
                    table_delta.c.status == COMMITTED,
                    table_delta.c.delta_num > delta_num,
                    (sa.func.coalesce(table_delta.c.rows_upserted, 0)
                     + sa.func.coalesce(table_delta.c.rows_deleted, 0)) > 0,
                )
            ).one()
        return int(row[0]), int(row[1])

    def expire_snapshots(self, table_name: str, superseded_before: float) -> list[SnapshotInfo]:
        """Remove the rows of snapshots superseded by a newer snapshot created at or before
        `superseded_before`; returns them (their files are the caller's to delete).

        The latest snapshot is never expired. Reads that would have used an expired one
        (as of a delta before its successor) read an older snapshot or the deltas instead,
        which hold every version, so they return the same rows.
        """
        with self.plane.begin() as conn:
            rows = conn.execute(
                sa.select(table_snapshot)
                .where(table_snapshot.c.table_name == table_name)
                .order_by(table_snapshot.c.delta_num)
            ).all()
            expired = [
                snapshot_info(row)
                for row, successor in zip(rows, rows[1:], strict=False)
                if successor.created_at <= superseded_before
            ]
            if expired:
                conn.execute(
                    table_snapshot.delete().where(
                        table_snapshot.c.table_name == table_name,
                        table_snapshot.c.delta_num.in_([s.delta_num for s in expired]),
                    )
                )
        return expired

    def data_paths(self, table_name: str) -> set[str]:
        """Every path the catalog references for a table (deltas hot or committed, snapshots)."""
        with self.plane.begin() as conn:
            deltas = conn.execute(sa.select(table_delta.c.data_path).where(table_delta.c.table_name == table_name))
            paths = {row[0] for row in deltas}
            snaps = conn.execute(sa.select(table_snapshot.c.data_path).where(table_snapshot.c.table_name == table_name))
            paths.update(row[0] for row in snaps)
        return paths
