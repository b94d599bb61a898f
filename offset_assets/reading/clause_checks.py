"""The clauses of a query checked against the delta catalog alone, no engine: what a shell
checks before it starts one, and what every engine checks before it reads."""

from __future__ import annotations

from offset_assets.control_plane.database import ControlPlane
from offset_assets.control_plane.delta_catalog import DeltaCatalog
from offset_assets.control_plane.delta_catalog.commit_times import microsecond_of
from offset_assets.reading.errors import SystemTimeError
from offset_assets.reading.state import CatalogState, parse_timestamp
from offset_assets.reading.system_time import ClauseKind, SystemTimeClause, parse_system_time


def check_clause(clause: SystemTimeClause, last: int) -> None:
    """Refuse `clause` (`SystemTimeError` naming it) when it names a delta beyond `last`,
    the table's last committed delta, an empty range, or text that is not a timestamp."""
    if clause.kind is ClauseKind.AS_OF_DELTA and clause.delta > last:
        raise clause.error(f"delta {clause.delta} is not committed (last committed: {last})")
    for text in [clause.timestamp] if clause.kind is ClauseKind.AS_OF_TIME else clause.timestamps or ():
        if parse_timestamp(text, "UTC") is None:
            raise clause.error(f"{text!r} is not an ISO 8601 timestamp")
    if clause.timestamps is not None:
        first, last_ts = (parse_timestamp(text, "UTC") for text in clause.timestamps)
        if microsecond_of(first) > microsecond_of(last_ts):
            raise clause.error("an empty range: {!r} is after {!r}".format(*clause.timestamps))
    if clause.deltas is not None:
        d1, d2 = clause.deltas
        if d1 > d2:
            raise clause.error(f"an empty range: {d1} > {d2}")
        if d1 < 1:
            raise clause.error("delta numbers start at 1")
        if d2 > last:
            raise clause.error(f"delta {d2} is not committed (last committed: {last})")


def uncommitted_refusal(clause: SystemTimeClause, catalog: DeltaCatalog) -> SystemTimeError:
    """The error of `AS OF LATEST_UNCOMMITTED_DELTA` read without the table's hot delta:
    only its writer reads it, so a reader that does not hold it learns whose it is."""
    hot = catalog.hot(clause.table)
    whose = (
        f"{clause.table!r} has no hot delta"
        if hot is None
        else f"the hot delta of {clause.table!r} ({hot.delta_num}) is held by {hot.holder or 'an unnamed writer'}"
    )
    return clause.error(
        f"only the writer holding the table's hot delta reads it "
        f"(VersionedTables.sql(..., hot_deltas=[that HotDelta])); {whose}"
    )


def check_query(plane: ControlPlane, query: str) -> None:
    """Refuse `query`'s malformed clauses, clauses on names that are not versioned tables
    and deltas that are not committed, from the control plane alone (no Spark): what a
    shell checks before it starts a driver."""
    catalog = DeltaCatalog(plane)
    parsed = parse_system_time(query, catalog.tables())
    state = CatalogState.pin(catalog, parsed.tables)
    for table, clause in parsed.reads.values():
        if clause is not None and clause.kind is ClauseKind.AS_OF_UNCOMMITTED:
            raise uncommitted_refusal(clause, catalog)  # a shell holds no hot delta
        if clause is not None:
            check_clause(clause, state.last(table))
