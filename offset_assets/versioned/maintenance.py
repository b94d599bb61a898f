"""Table maintenance: compaction by a policy, and cleanup of expired snapshots and orphans.

An hourly schedule commits ~9,000 deltas a year per table. Without maintenance every
actual read (and every write, which looks up the actual versions of its keys) merges all
of them; with it, a read merges one snapshot and the few deltas after it.

- `maintain(table, policy)` compacts when the deltas since the latest snapshot are too
  many or hold too many versions against the snapshot's rows. The decision is read from
  the catalog alone (no Spark job), so it is cheap to ask after every run.
- `cleanup(table, retention_s)` removes snapshots superseded for longer than the
  retention (catalog row first, then files) and folders no catalog row references
  (rolled-back deltas, failed compactions, writes of crashed processes), once older than
  the retention.

Why a retention at all: a run plans its reads when it starts and may still read a
snapshot that a newer one superseded meanwhile; a compaction writes its folder before
recording it, so the folder looks unreferenced until then. Those files must stay until
the run or the compaction is over: the retention must exceed the longest of both. Deltas are never removed: they are the
history (as-of, started-in, changes-since reads), and snapshots are only a faster way
to the same rows.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from offset_assets.errors import OffsetAssetsError
from offset_assets.versioned.layout import DELTAS_DIR, SNAPSHOTS_DIR

if TYPE_CHECKING:  # the CLI reads the policy's defaults without importing Spark
    from offset_assets.versioned.table import VersionedTable

DEFAULT_RETENTION_S = 24 * 3600.0


class MaintenancePolicyError(OffsetAssetsError, ValueError):
    """A maintenance policy or retention value is invalid; the message names it."""


@dataclass(frozen=True)
class MaintenancePolicy:
    """When a table is compacted: after `max_deltas_since_snapshot` deltas with versions
    since its latest snapshot, or once those deltas hold `max_rows_ratio` times the
    snapshot's rows (a table without a snapshot is compacted as soon as it has versions:
    the snapshot is sorted and range-partitioned by key, which key lookups prune on).
    `max_rows_ratio=None` decides on the number of deltas alone.
    """

    max_deltas_since_snapshot: int = 20
    max_rows_ratio: float | None = 0.2

    def __post_init__(self) -> None:
        deltas = self.max_deltas_since_snapshot
        if isinstance(deltas, bool) or not isinstance(deltas, int) or deltas < 1:
            raise MaintenancePolicyError(f"max_deltas_since_snapshot must be an integer >= 1, got {deltas!r}")
        ratio = self.max_rows_ratio
        if ratio is not None and (
            isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not math.isfinite(ratio) or ratio <= 0
        ):
            raise MaintenancePolicyError(f"max_rows_ratio must be a finite number > 0 or None, got {ratio!r}")

    def reason_to_compact(self, deltas_since: int, rows_since: int, snapshot_rows: int | None) -> str | None:
        """Why a table in this state is due for compaction (None: it is not)."""
        if deltas_since == 0:
            return None
        if deltas_since >= self.max_deltas_since_snapshot:
            where = "since the snapshot" if snapshot_rows is not None else "and no snapshot"
            return f"{deltas_since} deltas {where} (max {self.max_deltas_since_snapshot})"
        if self.max_rows_ratio is None:
            return None
        if snapshot_rows is None:
            return f"no snapshot yet, {rows_since} versions in {deltas_since} delta(s)"
        if rows_since >= self.max_rows_ratio * max(snapshot_rows, 1):
            return (
                f"{rows_since} versions since the snapshot of {snapshot_rows} rows "
                f"(max ratio {self.max_rows_ratio})"
            )
        return None


@dataclass(frozen=True)
class MaintenanceResult:
    """What `maintain` found and did for one table."""

    table_name: str
    deltas_since_snapshot: int
    rows_since_snapshot: int
    snapshot_delta: int | None  # the latest snapshot after maintenance (None: none)
    compacted: bool
    reason: str  # why it compacted, or why not


@dataclass(frozen=True)
class CleanupResult:
    """What `cleanup` removed from one table."""

    table_name: str
    expired_snapshots: list[int]  # delta numbers of the snapshots expired
    removed_paths: list[str]  # their folders and the orphan folders


def maintain(table: VersionedTable, policy: MaintenancePolicy | None = None) -> MaintenanceResult:
    """Compact `table` if `policy` (default `MaintenancePolicy()`) says it is due."""
    policy = policy or MaintenancePolicy()
    catalog = table.catalog
    last = catalog.last_committed(table.name)
    snapshot = catalog.snapshot_at(table.name, last.delta_num) if last else None
    deltas_since, rows_since = catalog.changes_after(table.name, snapshot.delta_num if snapshot else 0)
    reason = policy.reason_to_compact(deltas_since, rows_since, snapshot.row_count if snapshot else None)
    if reason is None:
        why = "up to date" if deltas_since == 0 else "not due"
        return MaintenanceResult(
            table.name, deltas_since, rows_since, snapshot.delta_num if snapshot else None, False, why
        )
    from offset_assets.versioned.compaction import compact

    return MaintenanceResult(table.name, deltas_since, rows_since, compact(table), True, reason)


def cleanup(table: VersionedTable, retention_s: float = DEFAULT_RETENTION_S) -> CleanupResult:
    """Expire snapshots superseded more than `retention_s` ago and remove folders the
    catalog does not reference that are older than `retention_s`.

    The catalog rows go first: once a snapshot's row is gone no new read plans with it,
    and if deleting its files fails they are orphans that the next cleanup removes.
    """
    if isinstance(retention_s, bool) or not isinstance(retention_s, (int, float)) or not (
        math.isfinite(retention_s) and retention_s >= 0
    ):
        raise MaintenancePolicyError(f"retention must be a finite number of seconds >= 0, got {retention_s!r}")
    cutoff = time.time() - retention_s
    expired = table.catalog.expire_snapshots(table.name, superseded_before=cutoff)
    removed = [s.data_path for s in expired if table.files.delete(s.data_path)]
    removed += _remove_orphans(table, cutoff)
    return CleanupResult(table.name, [s.delta_num for s in expired], removed)


def _remove_orphans(table: VersionedTable, cutoff: float) -> list[str]:
    """Delete delta and snapshot folders of `table` that no catalog row references and
    that were last modified at or before `cutoff`."""
    referenced = {path.rstrip("/").rsplit("/", 1)[-1] for path in table.catalog.data_paths(table.name)}
    removed = []
    for kind in (DELTAS_DIR, SNAPSHOTS_DIR):
        for folder in table.files.list_folders(f"{table.root}/{kind}"):
            if folder.name not in referenced and folder.modified_at <= cutoff:
                table.files.delete(folder.path)
                removed.append(folder.path)
    return removed
