"""The delta catalog: which deltas of which versioned table exist, and which are visible.

The catalog is the single source of truth for readers: a delta's files are read only
when its row here says `committed`, so files of hot, rolled-back or crashed deltas are
never seen, whatever lies in the warehouse. This package is SQL only (no Spark).

`DeltaCatalog` is one object over five parts, one module each: `tables.py` (registered
tables), `transaction.py` (hot delta, commit, rollback), `queries.py` (deltas by number,
time or offset; the run snapshot), `snapshots.py` (compaction snapshots, maintenance),
`reverts.py` (a revert's record, the transformations' commits it refuses to undo);
`commit_times.py` says how commit times name microseconds.
What it records is in `records.py`, its errors in `errors.py`.
"""

from __future__ import annotations

from offset_assets.control_plane.database import ControlPlane
from offset_assets.control_plane.delta_catalog.errors import (
    DeltaCatalogError,
    DeltaNotHotError,
    HotDeltaHeldError,
    UnknownTableError,
)
from offset_assets.control_plane.delta_catalog.records import COMMITTED, HOT, DeltaInfo, SnapshotInfo, TableSpec
from offset_assets.control_plane.delta_catalog.reverts import RevertRecords
from offset_assets.control_plane.delta_catalog.snapshots import SnapshotRecords
from offset_assets.control_plane.delta_catalog.tables import TableRegistry
from offset_assets.control_plane.delta_catalog.transaction import DeltaTransactions

# What `delta_catalog` held as one module, still importable from the package.
__all__ = [
    "COMMITTED",
    "HOT",
    "DeltaCatalog",
    "DeltaCatalogError",
    "DeltaInfo",
    "DeltaNotHotError",
    "HotDeltaHeldError",
    "SnapshotInfo",
    "TableSpec",
    "UnknownTableError",
]


class DeltaCatalog(TableRegistry, DeltaTransactions, SnapshotRecords, RevertRecords):
    """Delta catalog of the versioned tables on one control plane."""

    def __init__(self, plane: ControlPlane) -> None:
        self.plane = plane
