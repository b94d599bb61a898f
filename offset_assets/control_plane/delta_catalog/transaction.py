"""The write side of the delta catalog: open a hot delta, commit hot deltas in one
transaction (bumping the commit clock), roll a hot delta back.

Commit is one transaction on the control plane: the commit clock is bumped (its row
update serialises commits on both backends), every hot delta of the commit becomes
`committed` with that one timestamp, and the caller writes its own rows (offsets,
job_log) in the same transaction (its `conn`, or an `on_commit` hook). Either all of it
is visible or none.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence

import sqlalchemy as sa
from sqlalchemy import Connection
from sqlalchemy.exc import IntegrityError

from offset_assets.control_plane.delta_catalog.errors import (
    DeltaCatalogError,
    DeltaNotHotError,
    HotDeltaHeldError,
)
from offset_assets.control_plane.delta_catalog.queries import DeltaQueries
from offset_assets.control_plane.delta_catalog.records import (
    COMMITTED,
    HOT,
    DeltaInfo,
    HotCommit,
    OnCommit,
)
from offset_assets.control_plane.schema import commit_clock, table_delta

# open_hot retries when a concurrent opener took the number first (PostgreSQL, READ COMMITTED).
OPEN_ATTEMPTS = 5


class DeltaTransactions(DeltaQueries):
    """Opening, committing and rolling back deltas (part of `DeltaCatalog`); it reads
    the catalog (`hot`) before it opens a delta."""

    def open_hot(
        self,
        table_name: str,
        holder: str | None,
        run_id: str | None,
        data_path: str | Callable[[int], str],
    ) -> DeltaInfo:
        """Open the hot delta of `table_name`, numbered last committed + 1.

        `data_path` may be a function of the delta number (the number is only known
        here). A second hot delta is refused with `HotDeltaHeldError` naming its holder;
        the partial unique index on hot rows makes that hold under concurrent openers.
        """
        for _ in range(OPEN_ATTEMPTS):
            held = self.hot(table_name)
            if held is not None:
                raise HotDeltaHeldError(table_name, held)
            try:
                with self.plane.begin() as conn:
                    last = conn.execute(
                        sa.select(sa.func.max(table_delta.c.delta_num)).where(
                            table_delta.c.table_name == table_name,
                            table_delta.c.status == COMMITTED,
                        )
                    ).scalar()
                    num = (last or 0) + 1
                    path = data_path(num) if callable(data_path) else data_path
                    opened_at = time.time()
                    conn.execute(
                        table_delta.insert().values(
                            table_name=table_name,
                            delta_num=num,
                            status=HOT,
                            data_path=path,
                            holder=holder,
                            run_id=run_id,
                            opened_at=opened_at,
                        )
                    )
                return DeltaInfo(table_name, num, HOT, path, None, holder, run_id, None, None, opened_at)
            except IntegrityError:
                continue  # a concurrent opener or commit took the number: look again
        held = self.hot(table_name)
        if held is not None:
            raise HotDeltaHeldError(table_name, held)
        raise DeltaCatalogError(
            f"table {table_name!r}: could not open a hot delta after {OPEN_ATTEMPTS} attempts (concurrent writers)"
        )

    def commit(self, hot: Sequence[HotCommit], on_commit: OnCommit | None = None,
               conn: Connection | None = None) -> float:
        """Commit hot deltas of one or more tables in ONE transaction; returns commit_ts.

        Each item is (table, delta_num, rows_upserted, rows_deleted), optionally with the
        delta's data_path as a fifth element: the commit is then refused if the hot row
        was rolled back and reopened by someone else meanwhile. On any error (including
        from `on_commit`) nothing is committed and the deltas stay hot. With `conn` the
        commit joins the caller's transaction, and is visible once that one commits.
        """
        seen: set[tuple[str, int]] = set()
        for item in hot:
            if (item[0], item[1]) in seen:
                raise DeltaNotHotError(f"table {item[0]!r}: delta {item[1]} listed twice in one commit")
            seen.add((item[0], item[1]))
        with self.plane.within(conn) as tx:
            commit_ts = self.bump_clock(tx)
            for item in hot:
                table_name, delta_num, rows_upserted, rows_deleted = item[:4]
                query = table_delta.update().where(
                    table_delta.c.table_name == table_name,
                    table_delta.c.delta_num == delta_num,
                    table_delta.c.status == HOT,
                )
                if len(item) > 4:
                    query = query.where(table_delta.c.data_path == item[4])
                result = tx.execute(
                    query.values(
                        status=COMMITTED,
                        commit_ts=commit_ts,
                        rows_upserted=int(rows_upserted),
                        rows_deleted=int(rows_deleted),
                    )
                )
                if result.rowcount != 1:
                    path = item[4] if len(item) > 4 else None
                    raise DeltaNotHotError(self._not_hot_message(tx, table_name, delta_num, path))
            if on_commit is not None:
                on_commit(tx, commit_ts)
        return commit_ts

    @staticmethod
    def bump_clock(conn: Connection) -> float:
        """Hand out the next commit-clock value inside `conn`'s transaction."""
        # FOR UPDATE (PostgreSQL) / BEGIN IMMEDIATE (SQLite) serialise commits here, and
        # time is read only once the lock is held, so timestamps follow commit order.
        last = conn.execute(
            sa.select(commit_clock.c.last_commit_ts).where(commit_clock.c.id == 1).with_for_update()
        ).scalar_one()
        commit_ts = max(time.time(), math.nextafter(last, math.inf))
        conn.execute(commit_clock.update().where(commit_clock.c.id == 1).values(last_commit_ts=commit_ts))
        return commit_ts

    def rollback(self, table_name: str, delta_num: int, data_path: str | None = None) -> bool:
        """Discard a hot delta, freeing its number; False when there was no such hot delta.

        With `data_path`, only the hot delta written there is discarded. A committed
        delta is never rolled back (`DeltaNotHotError`).
        """
        with self.plane.begin() as conn:
            query = table_delta.delete().where(
                table_delta.c.table_name == table_name,
                table_delta.c.delta_num == delta_num,
                table_delta.c.status == HOT,
            )
            if data_path is not None:
                query = query.where(table_delta.c.data_path == data_path)
            if conn.execute(query).rowcount == 1:
                return True
            status = conn.execute(
                sa.select(table_delta.c.status).where(
                    table_delta.c.table_name == table_name, table_delta.c.delta_num == delta_num
                )
            ).scalar()
        if status == COMMITTED:
            raise DeltaNotHotError(f"table {table_name!r}: delta {delta_num} is committed and cannot be rolled back")
        return False

    def _not_hot_message(self, conn: Connection, table_name: str, delta_num: int, data_path: str | None) -> str:
        row = conn.execute(
            sa.select(table_delta.c.status, table_delta.c.holder, table_delta.c.data_path).where(
                table_delta.c.table_name == table_name, table_delta.c.delta_num == delta_num
            )
        ).first()
        if row is None:
            why = "it does not exist (never opened, or rolled back)"
        elif data_path is not None and row.data_path != data_path:
            why = f"it was rolled back and the number reused by {row.holder!r} ({row.status})"
        else:
            why = "it is already committed"
        return f"cannot commit delta {delta_num} of table {table_name!r}: {why}"
