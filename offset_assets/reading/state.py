"""The catalog state a read is planned on: pinned once, so that one query sees one commit.

A query that reads several tables (a join, a clause and the actual state of another
table) takes the last committed delta of each in one SQL statement
(`DeltaCatalog.snapshot_state`) and reads every table up to that delta and no further: a
commit is one control-plane transaction, so the state holds all of a commit (of one
table or several at once) or nothing of it, and a delta committed while the query is
planned or runs is not read. Which deltas and snapshot make a state up (`as_of_delta`
reads) never changes once committed, so the rest of the plan may read the catalog in
further statements.
"""

from __future__ import annotations

import datetime
import math
import re
from collections.abc import Collection
from dataclasses import dataclass
from zoneinfo import ZoneInfo

from offset_assets.control_plane.delta_catalog import DeltaCatalog, DeltaInfo, TableSpec
from offset_assets.control_plane.delta_catalog.commit_times import MICROS, microsecond_of
from offset_assets.control_plane.delta_catalog.errors import UnknownTableError
from offset_assets.versioned.errors import VersionedTableError

# A moment given to a read: a datetime (naive: the process's local time, as Python and
# Spark's createDataFrame read it), or epoch seconds.
Instant = datetime.datetime | float | int


@dataclass(frozen=True)
class CatalogState:
    """The last committed delta of each table a query reads (0: none committed yet)."""

    last_delta: dict[str, int]

    @classmethod
    def pin(cls, catalog: DeltaCatalog, tables: Collection[str]) -> CatalogState:
        """The committed state of `tables` now, in one statement."""
        deltas, _clock = catalog.snapshot_state(list(tables))
        return cls(deltas)

    def last(self, table: str) -> int:
        return self.last_delta[table]

    def as_of_delta(self, table: str, delta: int | None) -> int:
        """The delta a read of `table` as of `delta` (None: the last) stops at; refused
        when `delta` is not committed in this state."""
        last = self.last(table)
        if delta is None:
            return last
        if isinstance(delta, bool) or not isinstance(delta, int) or delta < 0:
            raise VersionedTableError(table, f"as_of_delta must be an integer >= 0, got {delta!r}")
        if delta > last:
            raise VersionedTableError(table, f"delta {delta} is not committed (last committed: {last})")
        return delta

    def as_of_time(self, catalog: DeltaCatalog, table: str, ts: float) -> int:
        """The last delta of `table` committed at or before `ts` in this state (0: none)."""
        info = catalog.by_timestamp(table, ts)
        return min(info.delta_num if info is not None else 0, self.last(table))

    def committed_between(self, catalog: DeltaCatalog, table: str, first: float, last: float) -> list[DeltaInfo]:
        """The deltas of `table` in this state committed from `first` to `last`, both
        included, compared to the microsecond as `as_of_time` compares (none: [])."""
        before = catalog.by_timestamp(table, (microsecond_of(first) - 1) / MICROS)
        low, high = (before.delta_num if before is not None else 0) + 1, self.as_of_time(catalog, table, last)
        return catalog.committed(table, after_delta=low - 1, up_to_delta=high) if low <= high else []


def table_spec(catalog: DeltaCatalog, name: str) -> TableSpec:
    """The registered table `name`, or `UnknownTableError` listing the tables there are."""
    spec = catalog.table_spec(name)
    if spec is None:
        known = ", ".join(catalog.tables()) or "none"
        raise UnknownTableError(f"no versioned table {name!r} in the delta catalog (tables: {known})")
    return spec


def delta_or_time(table: str, text: str) -> tuple[int | None, str | None]:
    """`text` given as "a delta number or a time" (`offset-assets show --as-of`): (the
    delta, None) for ASCII digits, (None, the time) for ISO 8601 text; refused naming the
    table and the value otherwise (`²`, `٣`, `2.5`, `-1`, empty)."""
    if re.fullmatch(r"[0-9]+", text):
        return int(text), None
    if parse_timestamp(text, "UTC") is not None:
        return None, text
    raise VersionedTableError(table, f"as of {text!r}: neither a delta number (ASCII digits) nor an ISO 8601 time")


def parse_timestamp(text: str, time_zone: str) -> float | None:
    """Epoch seconds of ISO 8601 `text` (a date, or a date and a time with `T` or a space
    between, an optional fraction, an optional offset or `Z`), a time without an offset
    being in `time_zone`; None when `text` is not one."""
    try:
        parsed = datetime.datetime.fromisoformat(text.strip())
    except ValueError:
        return None
    return (parsed if parsed.tzinfo else parsed.replace(tzinfo=ZoneInfo(time_zone))).timestamp()


def epoch_seconds(table: str, at: Instant) -> float:
    """`at` as epoch seconds; refused when it is not a finite moment."""
    if isinstance(at, datetime.datetime):
        return at.timestamp()
    if isinstance(at, bool) or not isinstance(at, (int, float)) or not math.isfinite(at):
        raise VersionedTableError(table, f"as_of must be a datetime or epoch seconds, got {at!r}")
    return float(at)
