"""What the delta catalog records: a table's registration, its deltas and snapshots.

A delta is `hot` while its writer fills it (invisible to readers) and `committed` once
its commit transaction ran; only committed deltas are ever read.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import sqlalchemy as sa
from sqlalchemy import Connection

HOT = "hot"
COMMITTED = "committed"


@dataclass(frozen=True)
class DeltaInfo:
    """One delta of a versioned table as the catalog records it."""

    table_name: str
    delta_num: int
    status: str
    data_path: str
    commit_ts: float | None
    holder: str | None
    run_id: str | None
    rows_upserted: int | None
    rows_deleted: int | None
    opened_at: float | None = None
    # The table's actual rows as of this delta (a hot delta: as of the last committed
    # one); None when unknown (a delta committed before revision 0006 or after one whose
    # count is unknown, a meta write).
    actual_rows: int | None = None
    # A revert's delta: the delta whose state it set the table back to (None otherwise).
    reverts_to: int | None = None

    @property
    def is_empty(self) -> bool:
        """A committed delta that wrote no version has no files to read."""
        return self.status == COMMITTED and not (self.rows_upserted or self.rows_deleted)


@dataclass(frozen=True)
class TableSpec:
    """A registered versioned table: primary key and Spark schema (JSON) of its data columns."""

    name: str
    primary_key: list[str]
    schema_json: str
    created_at: float


@dataclass(frozen=True)
class SnapshotInfo:
    """The compacted actual state of a table as of committed delta `delta_num`."""

    table_name: str
    delta_num: int
    data_path: str
    row_count: int
    created_at: float
    # The files hold each row's update_ts (snapshots written since revision 0005).
    stores_update_ts: bool = False


class HotCommit(NamedTuple):
    """A hot delta as one commit marks it committed: its counts, and optionally the path
    it was opened with (the commit is then refused if the delta was rolled back and the
    number reused meanwhile) and the table's actual rows once it is committed."""

    table_name: str
    delta_num: int
    rows_upserted: int
    rows_deleted: int
    data_path: str | None = None
    actual_rows: int | None = None


OnCommit = Callable[[Connection, float], None]


def delta_info(row: sa.Row) -> DeltaInfo:
    """A `table_delta` row as a `DeltaInfo`."""
    return DeltaInfo(
        table_name=row.table_name,
        delta_num=int(row.delta_num),
        status=row.status,
        data_path=row.data_path,
        commit_ts=row.commit_ts,
        holder=row.holder,
        run_id=row.run_id,
        rows_upserted=row.rows_upserted,
        rows_deleted=row.rows_deleted,
        opened_at=row.opened_at,
        actual_rows=row.actual_rows,
        reverts_to=row.reverts_to,
    )


def snapshot_info(row: sa.Row) -> SnapshotInfo:
    """A `table_snapshot` row as a `SnapshotInfo`."""
    return SnapshotInfo(row.table_name, int(row.delta_num), row.data_path, int(row.row_count), row.created_at,
                        bool(row.stores_update_ts))
