"""Queries of the delta catalog: which deltas a table has, by number, by time, and since
or beyond an offset, and the state a run snapshots (last deltas and the commit clock)."""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa

from offset_assets.control_plane.database import ControlPlane
from offset_assets.control_plane.delta_catalog.commit_times import microsecond_end, microsecond_of
from offset_assets.control_plane.delta_catalog.records import COMMITTED, HOT, DeltaInfo, delta_info
from offset_assets.control_plane.schema import commit_clock, table_delta


class DeltaQueries:
    """Reads of `table_delta` and the commit clock (part of `DeltaCatalog`)."""

    plane: ControlPlane

    def last_committed(self, table_name: str) -> DeltaInfo | None:
        return self._one(
            sa.select(table_delta)
            .where(table_delta.c.table_name == table_name, table_delta.c.status == COMMITTED)
            .order_by(table_delta.c.delta_num.desc())
            .limit(1)
        )

    def hot(self, table_name: str) -> DeltaInfo | None:
        return self._one(
            sa.select(table_delta).where(table_delta.c.table_name == table_name, table_delta.c.status == HOT)
        )

    def by_num(self, table_name: str, delta_num: int) -> DeltaInfo | None:
        """The delta numbered `delta_num`, hot or committed."""
        return self._one(
            sa.select(table_delta).where(table_delta.c.table_name == table_name, table_delta.c.delta_num == delta_num)
        )

    def by_timestamp(self, table_name: str, ts: float) -> DeltaInfo | None:
        """The last committed delta committed at or before `ts` (the state a reader saw
        then), compared to the microsecond: a commit time as printed selects its delta,
        also one stored with digits below the microsecond (`commit_times.py`)."""
        return self._one(
            sa.select(table_delta)
            .where(
                table_delta.c.table_name == table_name,
                table_delta.c.status == COMMITTED,
                table_delta.c.commit_ts < microsecond_end(microsecond_of(ts)),
            )
            .order_by(table_delta.c.delta_num.desc())
            .limit(1)
        )

    def committed(
        self, table_name: str, since_ts: float | None = None, up_to_delta: int | None = None,
        after_delta: int | None = None,
    ) -> list[DeltaInfo]:
        """Committed deltas in number order; `since_ts` inclusive (commit_ts >= since_ts),
        `after_delta` exclusive (delta_num > after_delta)."""
        query = sa.select(table_delta).where(table_delta.c.table_name == table_name, table_delta.c.status == COMMITTED)
        if since_ts is not None:
            query = query.where(table_delta.c.commit_ts >= since_ts)
        if after_delta is not None:
            query = query.where(table_delta.c.delta_num > after_delta)
        if up_to_delta is not None:
            query = query.where(table_delta.c.delta_num <= up_to_delta)
        with self.plane.begin() as conn:
            return [delta_info(row) for row in conn.execute(query.order_by(table_delta.c.delta_num))]

    def rows_upserted_up_to(self, table_name: str, up_to_delta: int) -> int | None:
        """The upserts of the committed deltas up to `up_to_delta`, summed in one statement:
        the table holds at most this many actual rows as of that delta (every live row was
        upserted by one of them). None when a delta's count is unknown."""
        query = sa.select(
            sa.func.coalesce(sa.func.sum(table_delta.c.rows_upserted), 0),
            sa.func.count() - sa.func.count(table_delta.c.rows_upserted),
        ).where(table_delta.c.table_name == table_name, table_delta.c.status == COMMITTED,
                table_delta.c.delta_num <= up_to_delta)
        with self.plane.begin() as conn:
            upserted, unknown = conn.execute(query).one()
        return None if unknown else int(upserted)

    def versions_stored(self, table_names: Sequence[str]) -> dict[str, int | None]:
        """The versions each table's committed deltas wrote (upserts and deletes), in one
        statement: no read of the table scans more. None for a table with a delta whose
        counts are unknown; 0 for a table without committed deltas."""
        counts = table_delta.c.rows_upserted + table_delta.c.rows_deleted
        query = (
            sa.select(table_delta.c.table_name, sa.func.coalesce(sa.func.sum(counts), 0),
                      sa.func.count() - sa.func.count(counts))
            .where(table_delta.c.table_name.in_(list(table_names)), table_delta.c.status == COMMITTED)
            .group_by(table_delta.c.table_name)
        )
        stored: dict[str, int | None] = dict.fromkeys(table_names, 0)
        with self.plane.begin() as conn:
            for name, versions, unknown in conn.execute(query):
                stored[name] = None if unknown else int(versions)
        return stored

    def actual_rows(self, table_names: Sequence[str]) -> dict[str, int | None]:
        """Each table's actual rows as of its last committed delta, in one statement: a row
        count without a Spark job. 0 for a table without committed deltas; None when the
        count is unknown (a delta committed before revision 0006 or written without one)."""
        last = (
            sa.select(table_delta.c.table_name, sa.func.max(table_delta.c.delta_num).label("delta_num"))
            .where(table_delta.c.table_name.in_(list(table_names)), table_delta.c.status == COMMITTED)
            .group_by(table_delta.c.table_name)
            .subquery()
        )
        query = sa.select(table_delta.c.table_name, table_delta.c.actual_rows).join(
            last, sa.and_(table_delta.c.table_name == last.c.table_name, table_delta.c.delta_num == last.c.delta_num))
        rows: dict[str, int | None] = dict.fromkeys(table_names, 0)
        with self.plane.begin() as conn:
            for name, actual_rows in conn.execute(query):
                rows[name] = actual_rows
        return rows

    def committed_beyond(self, table_name: str, offset: float | None) -> list[DeltaInfo]:
        """The non-empty committed deltas beyond `offset` (commit_ts > offset; every one
        when None): what a transformation whose offset this is has not processed yet. The
        boundary is exclusive here, unlike a run's read (`committed`, inclusive): an offset
        is the commit_ts of a delta the run read whole."""
        return [d for d in self.committed(table_name, since_ts=offset)
                if not d.is_empty and (offset is None or d.commit_ts > offset)]

    def deltas(self, table_name: str, limit: int | None = None) -> list[DeltaInfo]:
        """All deltas of a table, hot included, newest first (the CLI listing)."""
        query = (
            sa.select(table_delta)
            .where(table_delta.c.table_name == table_name)
            .order_by(table_delta.c.delta_num.desc())
        )
        if limit is not None:
            query = query.limit(limit)
        with self.plane.begin() as conn:
            return [delta_info(row) for row in conn.execute(query)]

    def last_commit_ts(self) -> float:
        """The commit clock: the timestamp of the latest commit of any table (0 before any)."""
        with self.plane.begin() as conn:
            return conn.execute(sa.select(commit_clock.c.last_commit_ts).where(commit_clock.c.id == 1)).scalar_one()

    def snapshot_state(self, tables: Sequence[str]) -> tuple[dict[str, int], float]:
        """Last committed delta of each table (0 when none) and the commit clock, read as one
        consistent state: every delta committed at or before the clock value is included.

        One SQL statement, because under PostgreSQL READ COMMITTED two statements of one
        transaction may see different commits; a single statement sees one snapshot.
        """
        names = list(dict.fromkeys(tables))
        clock = sa.select(
            sa.cast(sa.null(), sa.String(255)).label("table_name"),
            sa.cast(sa.null(), sa.BigInteger).label("delta_num"),
            commit_clock.c.last_commit_ts.label("ts"),
        ).where(commit_clock.c.id == 1)
        statement = clock
        if names:
            lasts = (
                sa.select(
                    table_delta.c.table_name,
                    sa.func.max(table_delta.c.delta_num).label("delta_num"),
                    sa.cast(sa.null(), sa.Double).label("ts"),
                )
                .where(table_delta.c.table_name.in_(names), table_delta.c.status == COMMITTED)
                .group_by(table_delta.c.table_name)
            )
            statement = sa.union_all(clock, lasts)
        deltas = dict.fromkeys(names, 0)
        clock_ts = 0.0
        with self.plane.begin() as conn:
            for row in conn.execute(statement):
                if row.table_name is None:
                    clock_ts = row.ts
                else:
                    deltas[row.table_name] = int(row.delta_num)
        return deltas, clock_ts

    def _one(self, query: sa.Select) -> DeltaInfo | None:
        with self.plane.begin() as conn:
            row = conn.execute(query).first()
        return delta_info(row) if row is not None else None

