"""The delta catalog: which deltas of which versioned table exist, and which are visible.

The catalog is the single source of truth for readers: a delta's files are read only
when its row here says `committed`, so files of hot, rolled-back or crashed deltas are
never seen, whatever lies in the warehouse. This module is SQL only (no Spark).

Commit is one transaction on the control plane: the commit clock is bumped (its row
update serialises commits on both backends), every hot delta of the commit becomes
`committed` with that one timestamp, and the caller writes its own rows (offsets,
job_log) in the same transaction (its `conn`, or an `on_commit` hook). Either all of it
is visible or none.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy import Connection
from sqlalchemy.exc import IntegrityError

from offset_assets.control_plane.database import ControlPlane
from offset_assets.control_plane.schema import (
    commit_clock,
    table_delta,
    table_snapshot,
    versioned_table,
)
from offset_assets.errors import OffsetAssetsError

HOT = "hot"
COMMITTED = "committed"
# open_hot retries when a concurrent opener took the number first (PostgreSQL, READ COMMITTED).
OPEN_ATTEMPTS = 5


class DeltaCatalogError(OffsetAssetsError):
    """A delta-catalog operation was refused; the message names the table and delta."""


class UnknownTableError(DeltaCatalogError):
    """The table is not registered in the delta catalog."""


class HotDeltaHeldError(DeltaCatalogError):
    """The table already has a hot delta; only one writer at a time."""

    def __init__(self, table_name: str, hot: DeltaInfo) -> None:
        self.table_name = table_name
        self.hot = hot
        opened = _iso(hot.opened_at) if hot.opened_at is not None else "?"
        super().__init__(
            f"table {table_name!r} already has hot delta {hot.delta_num} held by "
            f"{hot.holder!r} (run {hot.run_id!r}, opened {opened}); commit or roll it back "
            f"(VersionedTable.rollback_hot() discards it if that holder died)"
        )


class DeltaNotHotError(DeltaCatalogError):
    """Commit or rollback of a delta that is not hot (already committed, unknown, replaced)."""


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


HotCommit = tuple[str, int, int, int] | tuple[str, int, int, int, str]
OnCommit = Callable[[Connection, float], None]


class DeltaCatalog:
    """Delta catalog of the versioned tables on one control plane."""

    def __init__(self, plane: ControlPlane) -> None:
        self.plane = plane

    # -- tables -------------------------------------------------------------------------

    def register_table(self, name: str, primary_key: Sequence[str], schema_json: str) -> TableSpec:
        """Register `name` unless it exists; returns the stored spec either way.

        The caller compares the stored spec with its own (primary key, schema): a
        concurrent first registration of the same table is not an error here.
        """
        existing = self.table_spec(name)
        if existing is not None:
            return existing
        try:
            with self.plane.begin() as conn:
                conn.execute(
                    versioned_table.insert().values(
                        table_name=name,
                        primary_key=json.dumps(list(primary_key)),
                        schema_json=schema_json,
                        created_at=time.time(),
                    )
                )
        except IntegrityError:
            pass  # registered concurrently: the stored spec wins
        spec = self.table_spec(name)
        assert spec is not None
        return spec

    def table_spec(self, name: str) -> TableSpec | None:
        with self.plane.begin() as conn:
            row = conn.execute(sa.select(versioned_table).where(versioned_table.c.table_name == name)).first()
        if row is None:
            return None
        return TableSpec(row.table_name, json.loads(row.primary_key), row.schema_json, row.created_at)

    def update_schema(self, name: str, expected_schema_json: str, new_schema_json: str) -> bool:
        """Compare-and-set of a table's schema (compatible evolution); False when the stored
        schema is no longer `expected_schema_json` (changed concurrently)."""
        with self.plane.begin() as conn:
            result = conn.execute(
                versioned_table.update()
                .where(versioned_table.c.table_name == name)
                .where(versioned_table.c.schema_json == expected_schema_json)
                .values(schema_json=new_schema_json)
            )
        return result.rowcount == 1

    def tables(self) -> list[str]:
        with self.plane.begin() as conn:
            rows = conn.execute(sa.select(versioned_table.c.table_name).order_by(versioned_table.c.table_name))
            return [row[0] for row in rows]

    # -- writing: hot delta, commit, rollback -------------------------------------------

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

    # -- delta information ---------------------------------------------------------------

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
        """The last committed delta with commit_ts <= ts (the state a reader saw at ts)."""
        return self._one(
            sa.select(table_delta)
            .where(
                table_delta.c.table_name == table_name,
                table_delta.c.status == COMMITTED,
                table_delta.c.commit_ts <= ts,
            )
            .order_by(table_delta.c.delta_num.desc())
            .limit(1)
        )

    def committed(
        self, table_name: str, since_ts: float | None = None, up_to_delta: int | None = None
    ) -> list[DeltaInfo]:
        """Committed deltas in number order; `since_ts` inclusive (commit_ts >= since_ts)."""
        query = sa.select(table_delta).where(table_delta.c.table_name == table_name, table_delta.c.status == COMMITTED)
        if since_ts is not None:
            query = query.where(table_delta.c.commit_ts >= since_ts)
        if up_to_delta is not None:
            query = query.where(table_delta.c.delta_num <= up_to_delta)
        with self.plane.begin() as conn:
            return [_delta_info(row) for row in conn.execute(query.order_by(table_delta.c.delta_num))]

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
            return [_delta_info(row) for row in conn.execute(query)]

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

    # -- snapshots (compaction) ----------------------------------------------------------

    def add_snapshot(self, table_name: str, delta_num: int, data_path: str, row_count: int) -> SnapshotInfo:
        """Record a compacted snapshot of committed delta `delta_num` (its files are written)."""
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
                )
            )
        return SnapshotInfo(table_name, delta_num, data_path, row_count, created_at)

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
        return _snapshot_info(row) if row is not None else None

    def snapshots(self, table_name: str) -> list[SnapshotInfo]:
        with self.plane.begin() as conn:
            rows = conn.execute(
                sa.select(table_snapshot)
                .where(table_snapshot.c.table_name == table_name)
                .order_by(table_snapshot.c.delta_num)
            )
            return [_snapshot_info(row) for row in rows]

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
                _snapshot_info(row)
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

    def _one(self, query: sa.Select) -> DeltaInfo | None:
        with self.plane.begin() as conn:
            row = conn.execute(query).first()
        return _delta_info(row) if row is not None else None


def _delta_info(row: sa.Row) -> DeltaInfo:
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
    )


def _snapshot_info(row: sa.Row) -> SnapshotInfo:
    return SnapshotInfo(row.table_name, int(row.delta_num), row.data_path, int(row.row_count), row.created_at)


def _iso(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))
