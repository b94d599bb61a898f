"""The write side of the delta catalog: open a hot delta, commit hot deltas in one
transaction (bumping the commit clock), roll a hot delta back.

Commit is one transaction on the control plane: the commit clock is bumped (its row
update serialises commits on both backends), every hot delta of the commit becomes
`committed` with that one timestamp, and the caller writes its own rows (offsets,
job_log) in the same transaction (its `conn`, or an `on_commit` hook). Either all of it
is visible or none.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import sqlalchemy as sa
from sqlalchemy import Connection
from sqlalchemy.exc import IntegrityError

from offset_assets.control_plane.delta_catalog.commit_times import next_commit_ts
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
    delta_info,
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
                        sa.select(table_delta.c.delta_num, table_delta.c.actual_rows)
                        .where(table_delta.c.table_name == table_name, table_delta.c.status == COMMITTED)
                        .order_by(table_delta.c.delta_num.desc())
                        .limit(1)
                    ).first()
                    # What the delta's writes add to: the table's rows as of the last commit,
                    # which no other writer can change while this delta is the hot one.
                    num, actual_rows = (last.delta_num + 1, last.actual_rows) if last else (1, 0)
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
                            actual_rows=actual_rows,
                        )
                    )
                return DeltaInfo(table_name, num, HOT, path, None, holder, run_id, None, None, opened_at,
                                 actual_rows)
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

        Each item is a `HotCommit` (or a tuple of its fields: table, delta_num,
        rows_upserted, rows_deleted, then optionally the data_path, which refuses the
        commit if the hot row was rolled back and reopened by someone else meanwhile, and
        the table's actual rows once committed). On any error (including from
        `on_commit`) nothing is committed and the deltas stay hot. With `conn` the
        commit joins the caller's transaction, and is visible once that one commits.
        """
        entries = [HotCommit(*item) for item in hot]
        seen: set[tuple[str, int]] = set()
        for entry in entries:
            if (entry.table_name, entry.delta_num) in seen:
                raise DeltaNotHotError(
                    f"table {entry.table_name!r}: delta {entry.delta_num} listed twice in one commit")
            seen.add((entry.table_name, entry.delta_num))
        with self.plane.within(conn) as tx:
            commit_ts = self.bump_clock(tx)
            for entry in entries:
                query = table_delta.update().where(
                    table_delta.c.table_name == entry.table_name,
                    table_delta.c.delta_num == entry.delta_num,
                    table_delta.c.status == HOT,
                )
                if entry.data_path is not None:
                    query = query.where(table_delta.c.data_path == entry.data_path)
                result = tx.execute(
                    query.values(
                        status=COMMITTED,
                        commit_ts=commit_ts,
                        rows_upserted=int(entry.rows_upserted),
                        rows_deleted=int(entry.rows_deleted),
                        actual_rows=entry.actual_rows,
                    )
                )
                if result.rowcount != 1:
                    raise DeltaNotHotError(
                        self._not_hot_message(tx, entry.table_name, entry.delta_num, entry.data_path))
            if on_commit is not None:
                on_commit(tx, commit_ts)
        return commit_ts

    @staticmethod
    def bump_clock(conn: Connection) -> float:
        """Hand out the next commit-clock value inside `conn`'s transaction."""
        # FOR UPDATE (PostgreSQL) / BEGIN IMMEDIATE (SQLite) serialise commits here, and
        # time is read only once the lock is held, so timestamps follow commit order.
        # Whole microseconds, at least one after the last: each names its delta when
        # printed (`commit_times.py`).
        last = conn.execute(
            sa.select(commit_clock.c.last_commit_ts).where(commit_clock.c.id == 1).with_for_update()
        ).scalar_one()
        commit_ts = next_commit_ts(time.time(), last)
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

    def discard_hot(self, table_name: str, holder: str | None, run_id: str | None,
                    conn: Connection | None = None) -> DeltaInfo | None:
        """Discard the hot delta of `table_name` if `holder` opened it under `run_id` (a
        run that died holding it; None matches a delta opened without one), freeing its
        number; the delta discarded, else None.
        With `conn` it joins the caller's transaction; either way its files are the
        caller's to delete once that transaction has committed."""
        with self.plane.within(conn) as tx:
            row = tx.execute(
                sa.select(table_delta).where(
                    table_delta.c.table_name == table_name, table_delta.c.status == HOT,
                    table_delta.c.holder.is_not_distinct_from(holder),
                    table_delta.c.run_id.is_not_distinct_from(run_id),
                )
            ).first()
            if row is None:
                return None
            tx.execute(table_delta.delete().where(
                table_delta.c.table_name == table_name, table_delta.c.delta_num == row.delta_num,
                table_delta.c.status == HOT, table_delta.c.data_path == row.data_path,
            ))
        return delta_info(row)

    def record_actual_rows(self, table_name: str, delta_num: int, rows: int) -> bool:
        """Record `rows`, the table's actual rows as of committed delta `delta_num` (counted
        by the caller), where the catalog has no count for that delta (one committed before
        revision 0006, or after a write that did not count its keys); the deltas committed
        from then on derive theirs from it. False when the delta is not committed or
        already has a count, which is kept."""
        if rows < 0:
            raise ValueError(f"table {table_name!r}: a row count cannot be negative, got {rows}")
        with self.plane.begin() as conn:
            recorded = conn.execute(
                table_delta.update()
                .where(table_delta.c.table_name == table_name, table_delta.c.delta_num == delta_num,
                       table_delta.c.status == COMMITTED, table_delta.c.actual_rows.is_(None))
                .values(actual_rows=rows)
            )
            return recorded.rowcount == 1

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
