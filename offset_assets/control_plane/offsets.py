"""Committed offsets: per (transformation, input), the highest `update_ts` processed.

An offset only moves forward. Every write is an upsert that keeps the larger of the
stored and the new value (`GREATEST` on PostgreSQL, scalar `MAX` on SQLite), decided
by the database row by row, so two runs committing out of order, or concurrently,
cannot lower it. `reset_offset` (deleting the row) is the only way down.

`updated_at` is the time the offset last *moved*: it is set when the row is created
and when a write raises the value, and kept when a write brings an equal or smaller
value. `offset_age_seconds = now - updated_at` therefore answers "how long since this
input's offset advanced": a steady age means regular progress, a
growing one that the transformation stopped running or its input stopped changing.

Every entry point checks its names first: a transformation id or an input table name
outside the name rule (`control_plane/names.py`: the rule of table names, the same limit
on SQLite and PostgreSQL) is refused with `InvalidNameError` before the database is
touched. An offset is a commit timestamp in epoch seconds: a value that is not a finite
number, or is negative, is refused with `InvalidOffsetError` and nothing is written.
"""

from __future__ import annotations

import math
import numbers
import time
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from sqlalchemy import Connection, case, delete, func, select
from sqlalchemy.dialects import postgresql, sqlite

from offset_assets.control_plane.database import ControlPlane
from offset_assets.control_plane.names import validate_name
from offset_assets.control_plane.offset_resets import OffsetResets
from offset_assets.control_plane.schema import transform_input_offset, transform_settled
from offset_assets.errors import InvalidOffsetError

OffsetKey = tuple[str, str]

# What each name is, in the errors that refuse it.
TRANSFORMATION_ID = "transformation id"
INPUT_TABLE_NAME = "input table name"

_t = transform_input_offset


class OffsetRepository:
    """Read, advance and reset the offsets in `transform_input_offset`.

    Every method takes an optional `conn`: given, it runs inside the caller's
    transaction (the engine commits offsets together with its output deltas);
    omitted, it runs in a transaction of its own.
    """

    def __init__(self, plane: ControlPlane) -> None:
        self.plane = plane

    def get_offsets_for_transformation(
        self, transformation_id: str, conn: Connection | None = None
    ) -> dict[str, float]:
        """All offsets of one transformation, `{input_table_name: offset}`, in one query."""
        validate_name(transformation_id, TRANSFORMATION_ID)
        query = select(_t.c.input_table_name, _t.c.update_ts_offset).where(
            _t.c.transformation_id == transformation_id
        )
        with self.plane.within(conn) as c:
            return {name: float(offset) for name, offset in c.execute(query)}

    def get_offset(
        self, transformation_id: str, input_table_name: str, conn: Connection | None = None
    ) -> float | None:
        """The offset of one input, or None when none is committed."""
        _validate_pair(transformation_id, input_table_name)
        query = select(_t.c.update_ts_offset).where(
            _t.c.transformation_id == transformation_id,
            _t.c.input_table_name == input_table_name,
        )
        with self.plane.within(conn) as c:
            offset = c.execute(query).scalar_one_or_none()
        return None if offset is None else float(offset)

    def update_offsets_bulk(
        self, offsets: Mapping[OffsetKey, float], conn: Connection | None = None
    ) -> None:
        """Advance many offsets in one transaction; an offset never decreases.

        Every key and value is checked before anything is written: one name outside
        the rule refuses the whole bulk with `InvalidNameError`, one value that is not
        a finite, non-negative number (an epoch timestamp; a negative one is a bug
        upstream) with `InvalidOffsetError`.
        """
        rows = [
            {
                "transformation_id": key[0],
                "input_table_name": key[1],
                "update_ts_offset": value,
            }
            for key, value in sorted(_validated(offsets).items())
        ]
        if not rows:
            return
        now = time.time()
        for row in rows:
            row["updated_at"] = now
        with self.plane.within(conn) as c:
            # Rows go in key order so that concurrent PostgreSQL writers lock them in the
            # same order and cannot deadlock each other.
            c.execute(self._never_decreasing_upsert(c.dialect.name), rows)

    def reset_offset(
        self,
        transformation_id: str,
        input_table_name: str | None = None,
        conn: Connection | None = None,
    ) -> int:
        """Delete the offset of one input, or of every input when `input_table_name` is
        None, so the next run reads those inputs from the beginning. Returns the number
        of offsets deleted. The values deleted are kept in the same transaction until a
        run reports them (`offset_resets.py`)."""
        validate_name(transformation_id, TRANSFORMATION_ID)
        if input_table_name is not None:
            validate_name(input_table_name, INPUT_TABLE_NAME)
        statement = delete(_t).where(_t.c.transformation_id == transformation_id)
        if input_table_name is not None:
            statement = statement.where(_t.c.input_table_name == input_table_name)
        with self.plane.within(conn) as c:
            # A re-scan reads the deltas again, so the settled snapshot that lets a run skip
            # deltas it processed entirely is forgotten with the offsets.
            c.execute(delete(transform_settled).where(transform_settled.c.transformation_id == transformation_id))
            deleted = {name: value for name, value in self.get_offsets_for_transformation(transformation_id, c).items()
                       if input_table_name is None or name == input_table_name}
            OffsetResets(self.plane).record(transformation_id, deleted, c)
            return c.execute(statement).rowcount

    def get_statistics(
        self,
        now: float | None = None,
        *,
        transformation_id: str | None = None,
        conn: Connection | None = None,
    ) -> list[dict[str, Any]]:
        """Every offset (or those of one transformation) with its age, ordered by
        transformation and input: `transformation_id`, `input_table_name`,
        `update_ts_offset`, `updated_at`, `offset_age_seconds` (`now - updated_at`)."""
        query = select(
            _t.c.transformation_id, _t.c.input_table_name, _t.c.update_ts_offset, _t.c.updated_at
        ).order_by(_t.c.transformation_id, _t.c.input_table_name)
        if transformation_id is not None:
            validate_name(transformation_id, TRANSFORMATION_ID)
            query = query.where(_t.c.transformation_id == transformation_id)
        with self.plane.within(conn) as c:
            rows = c.execute(query).all()
        now = time.time() if now is None else now
        return [
            {
                "transformation_id": row.transformation_id,
                "input_table_name": row.input_table_name,
                "update_ts_offset": float(row.update_ts_offset),
                "updated_at": float(row.updated_at),
                "offset_age_seconds": now - float(row.updated_at),
            }
            for row in rows
        ]

    @staticmethod
    def _never_decreasing_upsert(dialect: str):  # noqa: ANN205 - dialect-specific Insert
        if dialect == "postgresql":
            statement = postgresql.insert(_t)
            larger = func.greatest(_t.c.update_ts_offset, statement.excluded.update_ts_offset)
        elif dialect == "sqlite":
            statement = sqlite.insert(_t)
            # Two-argument max() is SQLite's scalar maximum, not the aggregate.
            larger = func.max(_t.c.update_ts_offset, statement.excluded.update_ts_offset)
        else:
            raise NotImplementedError(f"offsets are not supported on the {dialect!r} dialect")
        advanced = statement.excluded.update_ts_offset > _t.c.update_ts_offset
        # Both SET expressions read the row as it was before this update.
        return statement.on_conflict_do_update(
            index_elements=[_t.c.transformation_id, _t.c.input_table_name],
            set_={
                "updated_at": case(
                    (advanced, statement.excluded.updated_at), else_=_t.c.updated_at
                ),
                "update_ts_offset": larger,
            },
        )


def _validated(offsets: Mapping[OffsetKey, Any]) -> dict[OffsetKey, float]:
    """The offsets as floats, or `InvalidOffsetError` naming the first bad pair and value."""
    checked: dict[OffsetKey, float] = {}
    for key, value in offsets.items():
        if not (
            isinstance(key, tuple)
            and len(key) == 2
            and all(isinstance(part, str) and part for part in key)
        ):
            raise InvalidOffsetError(
                f"offset key {key!r} is not a (transformation_id, input_table_name) pair "
                "of non-empty strings; nothing was written"
            )
        _validate_pair(*key)
        checked[key] = _valid_offset(key, value)
    return checked


def _validate_pair(transformation_id: str, input_table_name: str) -> None:
    validate_name(transformation_id, TRANSFORMATION_ID)
    validate_name(input_table_name, INPUT_TABLE_NAME)


def _valid_offset(key: OffsetKey, value: Any) -> float:
    # bool is a Real in Python, but True as an epoch timestamp is always a mistake.
    if isinstance(value, bool) or not isinstance(value, numbers.Real | Decimal):
        problem = "is not a number"
    else:
        try:
            as_float = float(value)
        except OverflowError:
            as_float = math.inf
        if not math.isfinite(as_float):
            problem = "is not finite"
        elif as_float < 0:
            problem = "is negative (an offset is a commit timestamp in epoch seconds)"
        else:
            return as_float
    raise InvalidOffsetError(
        f"offset of transformation {key[0]!r}, input {key[1]!r} {problem}: {value!r}; "
        "nothing was written"
    )
