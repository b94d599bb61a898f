"""End to end: real SQLite source tables and real landing folders into versioned tables."""

from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from offset_assets.control_plane import connect
from offset_assets.control_plane.job_log import JobLog
from offset_assets.control_plane.job_log.errors import ClaimLostError
from offset_assets.ranges.claims import ClaimPolicy
from offset_assets.ranges.errors import IngestionError, RangeOrderError
from offset_assets.ranges.ingestion import IngestionJob, RangeIngestion, TargetTable
from offset_assets.ranges.ingestion import run as ingestion_run
from offset_assets.ranges.planners import (
    AutoIncrementIdPlanner,
    DataRange,
    RangeKind,
    TimeWindowPlanner,
    UpstreamPlanner,
)
from offset_assets.ranges.sources import FolderSource, SqlTableSource
from offset_assets.spark_jobs import count_spark_jobs
from offset_assets.versioned import write_candidates
from offset_assets.versioned.held_files import DEFAULT_HELD_ROWS_LIMIT
from offset_assets.versioned.table import VersionedTable
from tests.customers_source import CUSTOMERS


def insert_customers(url, *rows):
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        for name, city, created_at in rows:
            conn.execute(
                sa.text("INSERT INTO customers (name, city, created_at) VALUES (:n, :c, :t)"),
                {"n": name, "c": city, "t": created_at.strftime("%Y-%m-%d %H:%M:%S.000000")},
            )
    engine.dispose()


def id_job(source_url, source=None, **kwargs):
    return IngestionJob(
        name="raw_customers",
        source=source or SqlTableSource(source_url, "customers", id_column="id"),
        planner=AutoIncrementIdPlanner(),
        target=TargetTable("raw_customers", ["id"], CUSTOMERS),
        **kwargs,
    )


def actual(spark, plane, warehouse, name="raw_customers", schema=CUSTOMERS):
    table = VersionedTable(spark, plane, name, ["id"], schema, warehouse=warehouse)
    rows = sorted(tuple(r) for r in table.read_actual().select(*schema.fieldNames()).collect())
    last = table.last_committed()
    return rows, (last.delta_num if last else 0)


def test_id_ranges_ingest_each_row_once_and_a_rerun_changes_nothing(db_url, spark, warehouse,
                                                                     source_url):
    plane = connect(db_url)
    day = datetime(2022, 1, 1)
    insert_customers(source_url, ("ann", "Oslo", day), ("bob", "Rome", day))
    ingestion = RangeIngestion(spark, plane, id_job(source_url), warehouse)

    (first,) = ingestion.run_pending(run_id="run-1")
    assert (first.data_range.start, first.data_range.end, first.rows_upserted) == ("0", "2", 2)
    assert first.delta_num == 1
    insert_customers(source_url, ("cid", "Lima", day))
    (second,) = ingestion.run_pending(run_id="run-2")
    assert (second.data_range.start, second.data_range.end, second.delta_num) == ("2", "3", 2)
    assert ingestion.run_pending() == []  # nothing new at the source
    assert actual(spark, plane, warehouse) == (
        [(1, "ann", "Oslo"), (2, "bob", "Rome"), (3, "cid", "Lima")], 2)

    # Re-running an ingested range finds every row unchanged: no new delta.
    (again,) = ingestion.refresh([DataRange(RangeKind.AUTO_INC_ID, "0", "2")], run_id="run-3")
    assert (again.rows_read, again.rows_upserted, again.rows_unchanged) == (2, 0, 2)
    assert again.delta_num is None and again.attempt == 2
    assert actual(spark, plane, warehouse)[1] == 2

    log = JobLog(plane)
    rows = log.history("raw_customers")
    assert [(r.data_range_start, r.data_range_end, r.status, r.run_id) for r in rows] == [
        ("0", "2", "SUCCESS", "run-3"), ("2", "3", "SUCCESS", "run-2")]
    steps = log.steps(rows[0].job_id, attempt=1)
    assert [(s.step_id, s.status, s.source_count, s.target_count) for s in steps] == [
        ("read", "SUCCESS", 2, None), ("write", "SUCCESS", 2, 2)]
    assert steps[0].source_type == "sql" and steps[1].target_type == "versioned_table"


class FlakySource:
    """Wraps a source; its first `failures` reads raise."""

    def __init__(self, inner, failures=1, on_read=None):
        self.inner, self.failures, self.on_read = inner, failures, on_read
        self.source_type = inner.source_type

    def max_id(self):
        return self.inner.max_id()

    def read_range(self, spark, data_range):
        if self.on_read:
            self.on_read(data_range)
        if self.failures:
            self.failures -= 1
            raise ConnectionError("source went away")
        return self.inner.read_range(spark, data_range)


@pytest.mark.quick
def test_a_failed_range_is_logged_commits_nothing_and_is_retried_first(sqlite_url, spark,
                                                                       warehouse, source_url):
    plane = connect(sqlite_url)
    insert_customers(source_url, ("ann", "Oslo", datetime(2022, 1, 1)))
    flaky = FlakySource(SqlTableSource(source_url, "customers", id_column="id"))
    ingestion = RangeIngestion(spark, plane, id_job(source_url, source=flaky), warehouse)
    with pytest.raises(IngestionError, match="range '0'.*ConnectionError: source went away"):
        ingestion.run_pending(run_id="run-1")
    log = JobLog(plane)
    (failed,) = log.history("raw_customers")
    assert (failed.status, failed.error) == ("FAILURE", "ConnectionError: source went away")
    assert [(s.step_id, s.status) for s in log.steps(failed.job_id)] == [("read", "FAILURE")]
    assert actual(spark, plane, warehouse) == ([], 0)

    # The failed range recorded its end (1, the max id) at its claim: it is retried as that
    # slice, and the row that arrived since is the next range's.
    assert failed.data_range_end == "1"
    insert_customers(source_url, ("bob", "Rome", datetime(2022, 1, 1)))
    assert [(r.start, r.end, r.previous_status) for r in ingestion.plan()] == [
        ("0", "1", "FAILURE"), ("1", "2", None)]
    done, after = ingestion.run_pending(run_id="run-2")
    assert (done.job_id, done.attempt, done.data_range.end, done.rows_read) == (failed.job_id, 2, "1", 1)
    assert (after.data_range.start, after.data_range.end, after.rows_read) == ("1", "2", 1)
    assert actual(spark, plane, warehouse) == ([(1, "ann", "Oslo"), (2, "bob", "Rome")], 2)


def test_a_holder_whose_range_was_taken_over_commits_nothing(sqlite_url, spark, warehouse,
                                                             source_url):
    plane = connect(sqlite_url)
    insert_customers(source_url, ("ann", "Oslo", datetime(2022, 1, 1)))

    def take_over(data_range):
        # While this run reads, a scheduler decides it is dead and takes the range over.
        JobLog(plane).claim("raw_customers", data_range.start, None, run_id="rescuer",
                            is_run_dead=lambda run_id: run_id == "slow-run")

    slow = FlakySource(SqlTableSource(source_url, "customers", id_column="id"), failures=0,
                       on_read=take_over)
    job = id_job(source_url, source=slow, claim_policy=ClaimPolicy(heartbeat_every_s=3600))
    with pytest.raises(ClaimLostError):
        RangeIngestion(spark, plane, job, warehouse).run_range(
            DataRange(RangeKind.AUTO_INC_ID, "0", None), run_id="slow-run")
    table = VersionedTable(spark, plane, "raw_customers", ["id"], CUSTOMERS, warehouse=warehouse)
    assert table.last_committed() is None and table.hot() is None
    row = JobLog(plane).get_range("raw_customers", "0")
    assert (row.status, row.run_id) == ("RUNNING", "rescuer")


def daily_customers_job(source_url: str) -> IngestionJob:
    """Daily windows of the `customers` table by `created_at`, from 2022-01-01."""
    return IngestionJob(
        "daily_customers", SqlTableSource(source_url, "customers", time_column="created_at",
                                          columns=["id", "name", "city"]),
        TimeWindowPlanner(datetime(2022, 1, 1), timedelta(days=1)),
        TargetTable("daily_customers", ["id"], CUSTOMERS),
    )


def test_time_windows_from_a_sql_table_catch_up_in_order(sqlite_url, spark, warehouse,
                                                         source_url):
    plane = connect(sqlite_url)
    insert_customers(source_url, ("ann", "Oslo", datetime(2022, 1, 1, 9)),
                     ("bob", "Rome", datetime(2022, 1, 2, 9)),
                     ("cid", "Lima", datetime(2022, 1, 3, 9)))
    job = daily_customers_job(source_url)
    ingestion = RangeIngestion(spark, plane, job, warehouse)
    now = datetime(2022, 1, 3, 12, tzinfo=UTC)
    later = DataRange(RangeKind.TIME_WINDOW, "20220102000000", "20220103000000")
    with pytest.raises(RangeOrderError, match="waits for earlier range '20220101000000'"):
        ingestion.run_range(later, now=now)
    results = ingestion.run_pending(now=now)
    assert [(r.data_range.start, r.rows_upserted) for r in results] == [
        ("20220101000000", 1), ("20220102000000", 1)]
    rows, last = actual(spark, plane, warehouse, "daily_customers")
    assert rows == [(1, "ann", "Oslo"), (2, "bob", "Rome")] and last == 2
    assert JobLog(plane).history("daily_customers")[0].period == 1440

    # A job driven by upstream follows the daily job's ranges, and its refreshes.
    follower = RangeIngestion(spark, plane, IngestionJob(
        "customers_copy", job.source, UpstreamPlanner("daily_customers"),
        TargetTable("customers_copy", ["id"], CUSTOMERS)), warehouse)
    assert [(r.data_range.start, r.data_range.kind) for r in follower.run_pending()] == [
        ("20220101000000", "upstream"), ("20220102000000", "upstream")]
    assert follower.plan() == []
    ingestion.refresh([DataRange(RangeKind.TIME_WINDOW, "20220101000000", "20220102000000")])
    (again,) = follower.run_pending()
    assert (again.data_range.start, again.data_range.refresh, again.delta_num) == (
        "20220101000000", True, None)


def test_an_open_window_is_ingested_as_it_grows_without_moving_the_pointer(
        sqlite_url, spark, warehouse, source_url):
    """Today's window, ingested before it ends: its rows are committed, but its job_log row
    holds nothing (end = start), so the pointer stays put, also behind a gap, and the
    window runs again, whole, once it has closed."""
    plane = connect(sqlite_url)
    insert_customers(source_url, ("ann", "Oslo", datetime(2022, 1, 1, 9)),
                     ("bob", "Rome", datetime(2022, 1, 2, 9)))
    job = daily_customers_job(source_url)
    ingestion = RangeIngestion(spark, plane, job, warehouse)
    day1 = DataRange(RangeKind.TIME_WINDOW, "20220101000000", "20220102000000")
    today = DataRange(RangeKind.TIME_WINDOW, "20220102000000", "20220103000000")
    noon = datetime(2022, 1, 2, 12, tzinfo=UTC)

    # Day 1 is not ingested yet (a gap): the open window runs anyway, as a refresh.
    early = ingestion.run_range(today, now=noon)
    assert (early.open_window, early.data_range.refresh, early.rows_upserted) == (True, True, 1)
    assert early.data_range.end == "20220103000000"  # read up to the window's end
    row = JobLog(plane).get_range("daily_customers", "20220102000000")
    assert (row.status, row.data_range_end) == ("SUCCESS", "20220102000000")
    assert row.runtime_args_dict == {"open_window": True, "refresh": True}
    assert ingestion.plan(noon) == [day1]  # the pointer did not move past the gap
    (first,) = ingestion.run_pending(now=noon)
    assert (first.data_range.start, first.rows_upserted) == ("20220101000000", 1)
    assert ingestion.plan(noon) == []  # the window is still open: not due

    # Re-run while it grows: only the new row is a new version.
    insert_customers(source_url, ("cid", "Lima", datetime(2022, 1, 2, 15)))
    grown = ingestion.run_range(today, now=datetime(2022, 1, 2, 16, tzinfo=UTC))
    assert (grown.rows_read, grown.rows_upserted, grown.rows_unchanged) == (2, 1, 1)

    # Once closed, the window is due again and ingested whole; then the pointer moves.
    insert_customers(source_url, ("dan", "Kyiv", datetime(2022, 1, 2, 23)))
    after = datetime(2022, 1, 3, 1, tzinfo=UTC)
    (due,) = ingestion.plan(after)
    assert (due.start, due.refresh, due.previous_status) == ("20220102000000", True, "SUCCESS")
    (closed,) = ingestion.run_pending(now=after)
    assert (closed.open_window, closed.rows_upserted, closed.rows_unchanged) == (False, 1, 2)
    row = JobLog(plane).get_range("daily_customers", "20220102000000")
    assert (row.data_range_end, row.attempt) == ("20220103000000", 3)
    assert ingestion.plan(after) == []
    rows, last = actual(spark, plane, warehouse, "daily_customers")
    assert rows == [(1, "ann", "Oslo"), (2, "bob", "Rome"), (3, "cid", "Lima"), (4, "dan", "Kyiv")]
    assert last == 4


def land(spark, root, day, rows):
    spark.createDataFrame(rows, CUSTOMERS).coalesce(1).write.mode("overwrite").parquet(
        f"{root}/dt={day}")


def test_files_landing_in_day_folders_are_ingested_per_day(sqlite_url, spark, warehouse, tmp_path):
    plane = connect(sqlite_url)
    root = str(tmp_path / "landing" / "customers")
    land(spark, root, "2022-01-01", [(1, "ann", "Oslo"), (2, "bob", "Rome")])
    land(spark, root, "2022-01-02", [(2, "bob", "Paris")])
    job = IngestionJob("landed_customers", FolderSource(root),
                       TimeWindowPlanner(datetime(2022, 1, 1), timedelta(days=1)),
                       TargetTable("landed_customers", ["id"], CUSTOMERS))
    ingestion = RangeIngestion(spark, plane, job, warehouse)
    results = ingestion.run_pending(now=datetime(2022, 1, 3, 1))
    assert [(r.rows_read, r.rows_upserted, r.delta_num) for r in results] == [(2, 2, 1), (1, 1, 2)]
    assert actual(spark, plane, warehouse, "landed_customers") == (
        [(1, "ann", "Oslo"), (2, "bob", "Paris")], 2)
    # Day 3 has not landed: its range succeeds with no rows and no delta.
    (empty,) = ingestion.run_pending(now=datetime(2022, 1, 4, 1))
    assert (empty.rows_read, empty.delta_num) == (0, None)


@pytest.mark.parametrize("adaptive", ["false", "true"])
def test_an_id_range_into_a_large_table_is_read_classified_and_written_in_one_spark_job(
        db_url, spark, warehouse, source_url, monkeypatch, adaptive):
    spark.conf.set("spark.sql.adaptive.enabled", adaptive)
    # Every committed table counts as large: its candidates are bounded by the id range.
    monkeypatch.setattr(write_candidates, "WHOLE_SCAN_ROWS", 0)
    plane = connect(db_url)
    day = datetime(2022, 1, 1)
    insert_customers(source_url, *[(f"c{i}", "Oslo", day) for i in range(30)])
    # Written by Spark: the driver would read and write ranges this small itself.
    ingestion = RangeIngestion(spark, plane, id_job(source_url), warehouse, held_rows_limit=0)
    with count_spark_jobs(spark) as first:
        ingestion.run_pending(run_id="first")
    assert first.count == 1, first.describe()  # nothing committed: no candidate to look up
    insert_customers(source_url, *[(f"d{i}", "Rome", day) for i in range(20)])
    with count_spark_jobs(spark) as increment:
        (result,) = ingestion.run_pending(run_id="increment")
    # The id range bounds the candidate scan (Parquet skips the first range's file): no job
    # to find the written keys' bounds.
    assert increment.count == 1, increment.describe()
    assert (result.rows_read, result.rows_upserted, result.delta_num) == (20, 20, 2)
    # The range's profile names its phases and holds the same job, started by its write.
    profile = result.profile
    assert [phase.name for phase in profile.phases] == ["claim", "source_read", "write", "commit", "other"]
    assert [job.job_id for job in profile.jobs] == [job.job_id for job in increment.jobs]
    assert profile.phase("write").jobs == 1 and profile.phase("commit").jobs == 0
    assert all(phase.seconds >= 0 for phase in profile.phases)
    assert sum(phase.seconds for phase in profile.phases) == pytest.approx(profile.wall_s)
    rows, _ = actual(spark, plane, warehouse)
    assert len(rows) == 50 and rows[-1] == (50, "d19", "Rome")


def versions(spark, plane, warehouse):
    """Every version of raw_customers: its data, sys_op, and the deltas that wrote and ended it."""
    table = VersionedTable(spark, plane, "raw_customers", ["id"], CUSTOMERS, warehouse=warehouse)
    columns = [*CUSTOMERS.fieldNames(), "sys_op", "sys_from", "sys_to"]
    return sorted((tuple(r) for r in table.read_started_in(1, table.last_committed().delta_num)
                   .select(*columns).collect()), key=repr)


def test_a_small_id_range_is_read_and_written_by_the_driver_without_spark_as_spark_writes_it(
        spark, tmp_path, source_url):
    day = datetime(2022, 1, 1)
    insert_customers(source_url, *[(f"c{i}", None if i % 3 == 0 else "Oslo", day) for i in range(30)])
    # The same job twice: by the driver (the default limit), and by Spark (limit 0).
    runs = {limit: RangeIngestion(spark, connect(f"sqlite:///{tmp_path / f'plane-{limit}.db'}"), id_job(source_url),
                                  str(tmp_path / f"warehouse-{limit}"), held_rows_limit=limit)
            for limit in (DEFAULT_HELD_ROWS_LIMIT, 0)}

    ranges = []

    def each(step):
        found = {}
        for limit, ingestion in runs.items():
            with count_spark_jobs(spark) as jobs:
                results = step(ingestion)
            found[limit] = ([((r.data_range.start, r.data_range.end), r.rows_read, r.rows_upserted, r.rows_unchanged,
                              r.delta_num) for r in results], jobs.count)
            ranges.extend(r.data_range for r in results)
        held, by_spark = found[DEFAULT_HELD_ROWS_LIMIT], found[0]
        assert held[0] == by_spark[0]
        assert held[1] == 0 and by_spark[1] >= 1, (held, by_spark)
        return held[0]

    assert each(lambda ingestion: ingestion.run_pending(run_id="first")) == [(("0", "30"), 30, 30, 0, 1)]
    first = ranges[0]
    # New rows, and rows of the first range changed (a NULL among them) or set to what they hold.
    insert_customers(source_url, *[(f"d{i}", "Rome", day) for i in range(20)])
    engine = sa.create_engine(source_url)
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE customers SET city = 'Paris' WHERE id BETWEEN 1 AND 5"))
        conn.execute(sa.text("UPDATE customers SET city = NULL WHERE id = 6"))
        conn.execute(sa.text("UPDATE customers SET city = city WHERE id BETWEEN 7 AND 9"))
    engine.dispose()
    assert each(lambda ingestion: ingestion.run_pending(run_id="increment")) == [(("30", "50"), 20, 20, 0, 2)]
    # The first range loaded again: ids 1-6 changed (1 and 4 held NULL, 6 becomes NULL),
    # 7-9 set to what they hold and the others untouched are unchanged.
    assert each(lambda ingestion: ingestion.refresh([first])) == [(("0", "30"), 30, 6, 24, 3)]
    held, by_spark = (versions(spark, runs[limit].plane, runs[limit].warehouse) for limit in runs)
    assert held == by_spark
    assert len(held) == 56 and (6, "c5", None, 0, 3, None) in held and (1, "c0", "Paris", 0, 3, None) in held


@pytest.mark.parametrize("bound", ["rows", "bytes"])
def test_a_range_beyond_the_drivers_bounds_is_read_and_written_by_spark(db_url, spark, warehouse, source_url,
                                                                       monkeypatch, bound):
    insert_customers(source_url, *[(f"c{i}", "Oslo" * 10, datetime(2022, 1, 1)) for i in range(30)])
    limit = 29 if bound == "rows" else DEFAULT_HELD_ROWS_LIMIT
    if bound == "bytes":  # 30 rows of two numbers and 42-43 characters: about 1,760 bytes, as the database reckons
        monkeypatch.setattr(ingestion_run, "HELD_BYTES_LIMIT", 1_600)
    ingestion = RangeIngestion(spark, connect(db_url), id_job(source_url), warehouse, held_rows_limit=limit)
    with count_spark_jobs(spark) as jobs:
        (result,) = ingestion.run_pending()
    assert jobs.count >= 1 and (result.rows_read, result.rows_upserted) == (30, 30)
    monkeypatch.setattr(ingestion_run, "HELD_BYTES_LIMIT", 10_000)
    insert_customers(source_url, *[(f"d{i}", "Oslo" * 10, datetime(2022, 1, 1)) for i in range(29)])
    with count_spark_jobs(spark) as jobs:
        (result,) = ingestion.run_pending()
    assert jobs.count == 0 and (result.rows_read, result.rows_upserted) == (29, 29)


def test_a_small_range_starts_no_spark_session_and_one_that_needs_spark_starts_it_once(
        db_url, spark, warehouse, source_url):
    insert_customers(source_url, *[(f"c{i}", "Oslo", datetime(2022, 1, 1)) for i in range(10)])
    started = []

    def start_spark():
        started.append(1)
        return spark

    ingestion = RangeIngestion(start_spark, connect(db_url), id_job(source_url), warehouse, held_rows_limit=10)
    (held,) = ingestion.run_pending()
    assert started == [] and (held.rows_upserted, held.profile.job_count) == (10, 0)
    # Eleven rows: beyond the driver's limit, so Spark is started for the range and its
    # jobs are the range's, counted in the phase that started it.
    insert_customers(source_url, *[(f"d{i}", "Rome", datetime(2022, 1, 2)) for i in range(11)])
    with count_spark_jobs(spark) as jobs:
        (by_spark,) = ingestion.run_pending()
    assert started == [1] and by_spark.rows_upserted == 11
    assert by_spark.profile.job_count == jobs.count >= 1 and by_spark.profile.phase("write").jobs == jobs.count
    assert actual(spark, connect(db_url), warehouse)[0][-1] == (21, "d10", "Rome")
