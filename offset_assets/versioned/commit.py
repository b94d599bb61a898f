"""Committing hot deltas of several tables at once: all become visible together or none.

The commit itself is one control-plane transaction (`DeltaCatalog.commit`); the files
were written before it and are immutable, so no data moves at commit time and a crash
at any point leaves either the old or the new catalog state.

- `commit_deltas(hots)` commits the deltas alone.
- `commit_transaction(hots)` opens that transaction and hands its connection and
  commit_ts to the caller, whose own control-plane rows (offsets, meta listings, job
  log) then commit with the deltas, in its own code: nothing calls back into it.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from sqlalchemy import Connection

from offset_assets.control_plane.delta_catalog import DeltaCatalog
from offset_assets.control_plane.delta_catalog.records import OnCommit
from offset_assets.versioned.errors import VersionedTableError
from offset_assets.versioned.hot_delta import HotDelta

__all__ = ["DeltaCommit", "commit_deltas", "commit_transaction"]


@dataclass(frozen=True)
class DeltaCommit:
    """The open commit transaction: the caller's writes go through `conn`; `commit_ts` is
    the `update_ts` of every version of the deltas committed."""

    conn: Connection
    commit_ts: float


@contextmanager
def commit_transaction(hot_deltas: Sequence[HotDelta]) -> Iterator[DeltaCommit]:
    """Commit `hot_deltas` in one transaction, together with what the block writes
    through the yielded `DeltaCommit.conn`.

    The deltas are marked committed in the catalog on entry (the commit clock is taken
    then) and become visible when the block ends. If the block raises, or the
    transaction fails to commit, nothing is committed and the deltas stay hot (commit
    or roll back again); `HotDelta` objects are marked committed only after the commit.
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
    with catalog.plane.begin() as conn:
        commit_ts = catalog.commit(entries, conn=conn)
        yield DeltaCommit(conn, commit_ts)
    for hot in hot_deltas:
        hot.mark_committed(commit_ts)


def commit_deltas(hot_deltas: Sequence[HotDelta], on_commit: OnCommit | None = None) -> float:
    """Commit `hot_deltas` in one transaction; `on_commit(conn, commit_ts)` runs inside it.

    Returns the commit timestamp, which is the `update_ts` of every version written.
    On any error nothing is committed and the deltas stay hot (commit or roll back again).
    """
    with commit_transaction(hot_deltas) as commit:
        if on_commit is not None:
            on_commit(commit.conn, commit.commit_ts)
    return commit.commit_ts
