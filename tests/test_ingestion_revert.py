"""A bad load undone: a revert of an ingestion target marks the ranges whose deltas it undid
REVERTED in job_log, in its own commit. No plan runs them again (the source may still send
what was reverted) and the ranges after them are planned as before; a run of a reverted
range, once the source is fixed, loads it again."""

from __future__ import annotations

from datetime import UTC, datetime

import sqlalchemy as sa

from offset_assets.control_plane import connect
from offset_assets.control_plane.job_log import JobLog
from offset_assets.ranges.ingestion import RangeIngestion
from offset_assets.ranges.planners import DataRange, RangeKind
from offset_assets.versioned import plan_revert, revert_table
from offset_assets.versioned.table import VersionedTable
from tests.customers_source import CUSTOMERS
from tests.test_ingestion import daily_customers_job, id_job, insert_customers

DAY_3 = DataRange(RangeKind.TIME_WINDOW, "20220103000000", "20220104000000")


def fix_cities(url: str, cities: dict[str, str]) -> None:
    """The source fixed: each customer's city set again, by name."""
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        for name, city in cities.items():
            conn.execute(sa.text("UPDATE customers SET city = :c WHERE name = :n"), {"c": city, "n": name})
    engine.dispose()


def table_rows(table: VersionedTable) -> list[tuple]:
    return sorted(tuple(r) for r in table.read_actual().select(*CUSTOMERS.fieldNames()).collect())


def test_a_reverted_window_waits_for_a_run_by_hand_and_loads_the_fixed_source_while_later_windows_go_on(
    sqlite_url, spark, warehouse, source_url
):
    plane = connect(sqlite_url)
    log = JobLog(plane)
    insert_customers(
        source_url,
        ("ann", "Oslo", datetime(2022, 1, 1, 9)),
        ("bob", "Rome", datetime(2022, 1, 2, 9)),
        ("cid", "LIMA??", datetime(2022, 1, 3, 9)),
        ("dan", "PARIS??", datetime(2022, 1, 3, 10)),
    )
    ingestion = RangeIngestion(spark, plane, daily_customers_job(source_url), warehouse)
    ingestion.run_pending(now=datetime(2022, 1, 4, 1, tzinfo=UTC))  # windows 1, 2 and the bad 3: deltas 1-3
    table = VersionedTable(spark, plane, "daily_customers", ["id"], CUSTOMERS, warehouse=warehouse)
    assert [(r.data_range_start, r.target_table, r.target_delta_num) for r in log.history("daily_customers")] == [
        ("20220101000000", "daily_customers", 1),
        ("20220102000000", "daily_customers", 2),
        ("20220103000000", "daily_customers", 3),
    ]

    planned = plan_revert(table, 2)
    result = revert_table(table, 2)

    assert [r.data_range_start for r in planned.ranges.reverted] == ["20220103000000"]
    assert [r.data_range_start for r in result.ranges.reverted] == ["20220103000000"]
    assert table_rows(table) == [(1, "ann", "Oslo"), (2, "bob", "Rome")]
    day_3 = log.get_range("daily_customers", "20220103000000")
    assert (day_3.status, day_3.reverted_by_delta, day_3.target_delta_num) == ("REVERTED", 4, 3)
    # Not run again by a plan (its source still says LIMA??), and window 4 is due once it closed.
    assert ingestion.plan(now=datetime(2022, 1, 4, 12, tzinfo=UTC)) == []
    assert [r.start for r in ingestion.plan(now=datetime(2022, 1, 5, 1, tzinfo=UTC))] == ["20220104000000"]

    fix_cities(source_url, {"cid": "Lima", "dan": "Paris"})
    reload = ingestion.run_range(DAY_3, now=datetime(2022, 1, 5, 1, tzinfo=UTC))

    assert (reload.data_range.refresh, reload.rows_upserted, reload.delta_num) == (True, 2, 5)
    assert table_rows(table) == [(1, "ann", "Oslo"), (2, "bob", "Rome"), (3, "cid", "Lima"), (4, "dan", "Paris")]
    day_3 = log.get_range("daily_customers", "20220103000000")
    assert (day_3.status, day_3.reverted_by_delta, day_3.target_delta_num) == ("SUCCESS", None, 5)
    assert [r.start for r in ingestion.plan(now=datetime(2022, 1, 5, 1, tzinfo=UTC))] == ["20220104000000"]


def test_a_reverted_id_range_is_skipped_by_the_plan_and_a_revert_of_the_revert_makes_it_a_success_again(
    sqlite_url, spark, warehouse, source_url
):
    plane = connect(sqlite_url)
    log = JobLog(plane)
    day = datetime(2022, 1, 1)
    ingestion = RangeIngestion(spark, plane, id_job(source_url), warehouse)
    insert_customers(source_url, ("ann", "Oslo", day), ("bob", "Rome", day))
    ingestion.run_pending()  # (0, 2]: delta 1
    insert_customers(source_url, ("cid", "??", day))
    ingestion.run_pending()  # (2, 3]: delta 2, the bad load
    table = VersionedTable(spark, plane, "raw_customers", ["id"], CUSTOMERS, warehouse=warehouse)

    revert_table(table, 1)  # delta 3
    insert_customers(source_url, ("dan", "Kyiv", day))

    assert [(r.data_range_start, r.status) for r in log.history("raw_customers")] == [
        ("0", "SUCCESS"),
        ("2", "REVERTED"),
    ]
    assert [(r.start, r.end) for r in ingestion.plan()] == [("3", "4")]  # after the reverted range, not it
    ingestion.run_pending()  # (3, 4]: delta 4
    assert table_rows(table) == [(1, "ann", "Oslo"), (2, "bob", "Rome"), (4, "dan", "Kyiv")]

    undone = revert_table(table, 2)  # back to delta 2's state: the bad row is back, as is its range's mark

    assert [r.data_range_start for r in undone.ranges.restored] == ["2"]
    assert [r.data_range_start for r in undone.ranges.reverted] == ["3"]
    assert [(r.data_range_start, r.status, r.reverted_by_delta) for r in log.history("raw_customers")] == [
        ("0", "SUCCESS", None),
        ("2", "SUCCESS", None),
        ("3", "REVERTED", 5),
    ]
    assert table_rows(table) == [(1, "ann", "Oslo"), (2, "bob", "Rome"), (3, "cid", "??")]
