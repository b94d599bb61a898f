"""Committing hot deltas of several tables at once: all become visible together or none.

The commit itself is one control-plane transaction (`DeltaCatalog.commit`); the files
were written before it and are immutable, so no data moves at commit time and a crash
at any point leaves either the old or the new catalog state.
"""

from __future__ import annotations

from collections.abc import Sequence

from offset_assets.control_plane.delta_catalog import DeltaCatalog, OnCommit
from offset_assets.versioned.errors import VersionedTableError
from offset_assets.versioned.hot_delta import HotDelta


def commit_deltas(hot_deltas: Sequence[HotDelta], on_commit: OnCommit | None = None) -> float:
    """Commit `hot_deltas` in one transaction; `on_commit(conn, commit_ts)` runs inside it.

    Returns the commit timestamp, which is the `update_ts` of every version written.
    On any error nothing is committed and the deltas stay hot (commit or roll back again).
    """
    entries = [hot.commit_entry() for hot in hot_deltas]
    planes = {hot.table.plane.url for hot in hot_deltas}
    if len(planes) > 1:
        names = [hot.table.name for hot in hot_deltas]
        raise VersionedTableError(
            names[0],
            f"tables {names} live on different control planes; one commit cannot span them",
        )
    if not hot_deltas:
        raise ValueError("commit_deltas needs at least one hot delta")
    catalog = DeltaCatalog(hot_deltas[0].table.plane)
    commit_ts = catalog.commit(entries, on_commit=on_commit)
    for hot in hot_deltas:
        hot.mark_committed(commit_ts)
    return commit_ts
