"""The delta catalog (layer 1, no Spark), on SQLite and PostgreSQL."""

from __future__ import annotations

import threading

import pytest
import sqlalchemy as sa

from offset_assets.control_plane import connect
from offset_assets.control_plane.delta_catalog import DeltaCatalog
from offset_assets.control_plane.delta_catalog.errors import DeltaNotHotError, HotDeltaHeldError
from offset_assets.control_plane.delta_catalog.records import HotCommit
from offset_assets.control_plane.schema import commit_clock, table_delta


@pytest.fixture
def catalog(db_url) -> DeltaCatalog:
    catalog = DeltaCatalog(connect(db_url))
    catalog.register_table("orders", ["id"], '{"type": "struct", "fields": []}')
    catalog.register_table("customers", ["id"], '{"type": "struct", "fields": []}')
    return catalog


def _open(catalog: DeltaCatalog, table: str = "orders", holder: str = "w1", run: str = "r1"):
    return catalog.open_hot(table, holder, run, lambda n: f"/wh/{table}/deltas/{n:012d}-x")


def test_deltas_are_numbered_last_committed_plus_one(catalog):
    first = _open(catalog)
    assert (first.delta_num, first.status, first.data_path) == (1, "hot", "/wh/orders/deltas/000000000001-x")
    catalog.commit([("orders", 1, 3, 0)])
    second = _open(catalog)
    assert second.delta_num == 2
    assert catalog.rollback("orders", 2) is True
    # A rolled-back number is free again.
    assert _open(catalog).delta_num == 2


def test_second_hot_delta_is_refused_naming_table_and_holder(catalog):
    _open(catalog, holder="ingest@host:42")
    with pytest.raises(HotDeltaHeldError, match=r"'orders'.*hot delta 1 held by 'ingest@host:42'"):
        _open(catalog, holder="other")
    # Other tables are independent.
    assert _open(catalog, table="customers").delta_num == 1


def test_concurrent_openers_get_one_hot_delta(catalog):
    results, errors = [], []

    def opener(i: int) -> None:
        try:
            results.append(_open(catalog, holder=f"w{i}"))
        except HotDeltaHeldError as exc:
            errors.append(exc)

    threads = [threading.Thread(target=opener, args=(i,)) for i in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 1 and len(errors) == 5
    assert catalog.hot("orders").holder == results[0].holder


def test_commit_records_timestamp_counts_and_makes_delta_the_last_committed(catalog):
    _open(catalog)
    ts = catalog.commit([("orders", 1, 10, 2)])
    last = catalog.last_committed("orders")
    assert (last.delta_num, last.status, last.commit_ts) == (1, "committed", ts)
    assert (last.rows_upserted, last.rows_deleted, last.holder, last.run_id) == (10, 2, "w1", "r1")
    assert catalog.hot("orders") is None
    assert catalog.last_commit_ts() == ts


def test_committed_beyond_an_offset_excludes_the_offsets_own_delta_and_empty_deltas(catalog):
    commits = {}
    for num, (upserted, deleted) in enumerate([(3, 0), (0, 0), (1, 1), (2, 0)], start=1):
        _open(catalog)
        commits[num] = catalog.commit([("orders", num, upserted, deleted)])

    assert [d.delta_num for d in catalog.committed_beyond("orders", None)] == [1, 3, 4]
    assert [d.delta_num for d in catalog.committed_beyond("orders", commits[1])] == [3, 4]
    assert [d.delta_num for d in catalog.committed_beyond("orders", commits[3])] == [4]
    assert catalog.committed_beyond("orders", commits[4]) == []
    assert catalog.committed_beyond("customers", None) == []


def test_versions_stored_sums_the_committed_deltas_of_each_table_in_one_statement(catalog):
    for num, (upserted, deleted) in enumerate([(3, 0), (2, 1)], start=1):
        _open(catalog)
        catalog.commit([("orders", num, upserted, deleted)])
    _open(catalog)  # a hot delta stores nothing a reader sees
    _open(catalog, "customers")
    catalog.commit([("customers", 1, 4, 0)])
    assert catalog.versions_stored(["orders", "customers", "never_written"]) == {
        "orders": 6, "customers": 4, "never_written": 0}
    # A delta whose counts are unknown leaves its table's size unknown.
    with catalog.plane.begin() as conn:
        conn.execute(table_delta.update().where(table_delta.c.table_name == "customers")
                     .values(rows_upserted=None))
    assert catalog.versions_stored(["orders", "customers"]) == {"orders": 6, "customers": None}


def test_each_delta_records_the_tables_actual_rows_and_a_hot_delta_starts_from_the_last_commit(catalog):
    assert _open(catalog).actual_rows == 0  # a new table: nothing to add to
    catalog.commit([HotCommit("orders", 1, 3, 0, actual_rows=3)])
    assert _open(catalog).actual_rows == 3
    catalog.commit([HotCommit("orders", 2, 2, 1, actual_rows=4)])
    assert catalog.by_num("orders", 2).actual_rows == 4
    _open(catalog)  # a hot delta changes no count a reader sees
    _open(catalog, "customers")
    catalog.commit([("customers", 1, 4, 0)])  # written without a count: unknown from here on
    assert catalog.actual_rows(["orders", "customers", "never_written"]) == {
        "orders": 4, "customers": None, "never_written": 0}
    assert _open(catalog, "customers").actual_rows is None


def test_a_count_taken_by_the_caller_is_recorded_only_for_a_committed_delta_without_one(catalog):
    _open(catalog, "customers")
    catalog.commit([("customers", 1, 4, 0)])  # written without a count
    assert not catalog.record_actual_rows("customers", 2, 4)  # no such committed delta
    assert catalog.record_actual_rows("customers", 1, 4)
    assert catalog.actual_rows(["customers"]) == {"customers": 4}
    assert not catalog.record_actual_rows("customers", 1, 5)  # a known count is kept
    assert catalog.by_num("customers", 1).actual_rows == 4
    # The next hot delta starts from it, so its commit knows its count again.
    assert _open(catalog, "customers").actual_rows == 4
    assert not catalog.record_actual_rows("customers", 2, 4)  # hot, not committed
    with pytest.raises(ValueError, match="'customers'.*negative, got -1"):
        catalog.record_actual_rows("customers", 1, -1)


def test_commit_of_several_tables_is_one_timestamp(catalog):
    _open(catalog, "orders")
    _open(catalog, "customers")
    ts = catalog.commit([("orders", 1, 1, 0), ("customers", 1, 2, 0)])
    assert catalog.by_num("orders", 1).commit_ts == ts == catalog.by_num("customers", 1).commit_ts


def test_on_commit_runs_in_the_commit_transaction_and_its_failure_commits_nothing(catalog):
    _open(catalog, "orders")
    _open(catalog, "customers")
    seen = []

    def failing(conn, commit_ts):
        seen.append(conn.execute(sa.select(commit_clock.c.last_commit_ts)).scalar_one() == commit_ts)
        raise RuntimeError("offsets could not be written")

    with pytest.raises(RuntimeError):
        catalog.commit([("orders", 1, 1, 0), ("customers", 1, 1, 0)], on_commit=failing)
    assert seen == [True]  # the clock was already bumped inside the transaction
    assert catalog.last_committed("orders") is None and catalog.last_committed("customers") is None
    assert catalog.hot("orders").delta_num == 1 and catalog.hot("customers").delta_num == 1
    assert catalog.last_commit_ts() == 0
    catalog.commit([("orders", 1, 1, 0), ("customers", 1, 1, 0)])
    assert catalog.last_committed("customers").delta_num == 1


def test_commit_of_a_delta_that_is_not_hot_names_table_and_delta_and_commits_nothing(catalog):
    _open(catalog, "orders")
    catalog.commit([("orders", 1, 1, 0)])
    _open(catalog, "customers")
    with pytest.raises(DeltaNotHotError, match=r"delta 1 of table 'orders'.*already committed"):
        catalog.commit([("customers", 1, 1, 0), ("orders", 1, 1, 0)])
    with pytest.raises(DeltaNotHotError, match=r"delta 7 of table 'orders'.*does not exist"):
        catalog.commit([("orders", 7, 1, 0)])
    assert catalog.hot("customers").delta_num == 1  # untouched by the failed commit


def test_commit_with_data_path_refuses_a_delta_reopened_by_someone_else(catalog):
    first = _open(catalog, holder="crashed")
    catalog.rollback("orders", 1)
    catalog.open_hot("orders", "new", None, "/wh/orders/deltas/000000000001-y")
    with pytest.raises(DeltaNotHotError, match="rolled back and the number reused by 'new'"):
        catalog.commit([("orders", 1, 1, 0, first.data_path)])
    assert catalog.hot("orders").holder == "new"


def test_rollback_of_a_committed_delta_is_refused(catalog):
    _open(catalog)
    catalog.commit([("orders", 1, 1, 0)])
    with pytest.raises(DeltaNotHotError, match="committed and cannot be rolled back"):
        catalog.rollback("orders", 1)
    assert catalog.rollback("orders", 5) is False


def test_commit_ts_strictly_increases_even_when_the_clock_steps_back(catalog, monkeypatch):
    stamps = []
    for table, now in [("orders", 1000.0), ("customers", 900.0), ("orders", 900.0), ("customers", 1500.0)]:
        hot = catalog.open_hot(table, "w", None, "/p")
        with monkeypatch.context() as patch:
            patch.setattr("offset_assets.control_plane.delta_catalog.transaction.time.time", lambda now=now: now)
            stamps.append(catalog.commit([(table, hot.delta_num, 0, 0)]))
    # A microsecond after the last commit when the clock is not later.
    assert stamps == [1000.0, 1000.000001, 1000.000002, 1500.0]


def test_commit_times_are_whole_microseconds_after_a_clock_stored_with_finer_digits(catalog, monkeypatch):
    # A clock value from before the rule (a system time with digits below the microsecond).
    with catalog.plane.begin() as conn:
        conn.execute(commit_clock.update().values(last_commit_ts=1767225600.1234567))
    stamps = []
    for now in [1767225600.1234561, 1767225600.9876543, 1767225601.5000004]:
        hot = _open(catalog)
        with monkeypatch.context() as patch:
            patch.setattr("offset_assets.control_plane.delta_catalog.transaction.time.time", lambda now=now: now)
            stamps.append(catalog.commit([("orders", hot.delta_num, 1, 0)]))

    assert stamps == [1767225600.123458, 1767225600.987654, 1767225601.5]
    # Each stored double is the one its printed microsecond parses back to.
    assert [d.commit_ts for d in catalog.committed("orders")] == stamps


def test_a_time_selects_the_deltas_committed_in_its_microsecond_or_before(catalog):
    with catalog.plane.begin() as conn:  # times stored before the rule, with digits below the microsecond
        for n, ts in enumerate([1767225600.1234562, 1767225600.1234567, 1767225600.9999996], start=1):
            conn.execute(table_delta.insert().values(table_name="orders", delta_num=n, status="committed",
                                                     opened_at=ts, commit_ts=ts, data_path=f"/p{n}",
                                                     rows_upserted=1, rows_deleted=0))

    def selected(ts: float) -> int | None:
        found = catalog.by_timestamp("orders", ts)
        return found.delta_num if found else None

    # As printed: .123456 (delta 1), .123457 (delta 2), 1767225601.000000 (delta 3).
    assert [selected(ts) for ts in (1767225600.123455, 1767225600.123456, 1767225600.123457)] == [None, 1, 2]
    assert [selected(ts) for ts in (1767225600.999999, 1767225601.0)] == [2, 3]
    # A time between two microseconds is the microsecond it rounds to.
    assert [selected(ts) for ts in (1767225600.1234562, 1767225600.1234568)] == [1, 2]


def test_delta_lookups_by_number_timestamp_and_range(catalog):
    stamps = []
    for _ in range(4):
        hot = _open(catalog)
        stamps.append(catalog.commit([("orders", hot.delta_num, 1, 0)]))
    _open(catalog)  # hot delta 5
    assert catalog.by_num("orders", 5).status == "hot"
    assert catalog.by_num("orders", 9) is None
    assert catalog.by_timestamp("orders", stamps[0] - 1) is None
    assert catalog.by_timestamp("orders", stamps[2]).delta_num == 3
    assert catalog.by_timestamp("orders", (stamps[2] + stamps[3]) / 2).delta_num == 3
    assert catalog.by_timestamp("orders", stamps[3] + 1e6).delta_num == 4
    assert [d.delta_num for d in catalog.committed("orders")] == [1, 2, 3, 4]
    assert [d.delta_num for d in catalog.committed("orders", since_ts=stamps[1])] == [2, 3, 4]
    assert [d.delta_num for d in catalog.committed("orders", since_ts=stamps[1], up_to_delta=3)] == [2, 3]
    assert [d.delta_num for d in catalog.deltas("orders", limit=2)] == [5, 4]


def test_snapshot_state_reads_last_deltas_and_clock_together(catalog):
    assert catalog.snapshot_state(["orders", "customers"]) == ({"orders": 0, "customers": 0}, 0)
    _open(catalog)
    ts = catalog.commit([("orders", 1, 1, 0)])
    _open(catalog)  # hot deltas are not part of the state
    assert catalog.snapshot_state(["orders", "customers", "missing"]) == (
        {"orders": 1, "customers": 0, "missing": 0},
        ts,
    )
    assert catalog.snapshot_state([]) == ({}, ts)


def test_snapshots_are_found_at_or_below_a_delta(catalog):
    for _ in range(3):
        hot = _open(catalog)
        catalog.commit([("orders", hot.delta_num, 1, 0)])
    catalog.add_snapshot("orders", 2, "/wh/orders/snapshots/2", 7)
    assert catalog.snapshot_at("orders", 1) is None
    assert catalog.snapshot_at("orders", 3).delta_num == 2
    assert catalog.snapshot_at("orders", 3).row_count == 7
    assert "/wh/orders/snapshots/2" in catalog.data_paths("orders")


def test_register_table_keeps_the_first_definition(catalog):
    spec = catalog.register_table("orders", ["other"], "{}")
    assert spec.primary_key == ["id"]
    assert catalog.tables() == ["customers", "orders"]
