"""A backlog of id ranges: ingested range by range in order, each committed once; a crash
in the middle resumes at the first unfinished range (real SQLite source, real Spark)."""

import signal
import subprocess
import sys

import dagster as dg
import pytest
import sqlalchemy as sa
from click.testing import CliRunner

from offset_assets.cli import main
from offset_assets.control_plane import connect
from offset_assets.control_plane.job_log import JobLog
from offset_assets.dagster_adapter import OffsetStore
from offset_assets.dagster_adapter.ingestion.assets import ingestion_asset
from offset_assets.dagster_adapter.ingestion.sensor import evaluate_ingestion_sensor
from offset_assets.ranges.claims import ClaimPolicy
from offset_assets.ranges.errors import IngestionError
from offset_assets.ranges.ingestion import IngestionJob, RangeIngestion, TargetTable
from offset_assets.ranges.planners import AutoIncrementIdPlanner, DataRange, RangeKind
from offset_assets.ranges.sources import SourceBatch
from offset_assets.versioned.table import VersionedTable
from tests.customers_source import CUSTOMERS
from tests.dagster_resources import engine_resources

RANGE_SIZE = 3


class ReadHook:
    """The `customers` table read by id range through SQLAlchemy (as an id source reads it),
    calling `before_read(data_range)` first."""

    source_type = "sql"

    def __init__(self, source_url, before_read):
        self.url, self.before_read = source_url, before_read

    def max_id(self):
        return max((row[0] for row in source_rows(self.url)), default=None)

    def read_range(self, spark, data_range):
        self.before_read(data_range)
        start, end = int(data_range.start), int(data_range.end)
        rows = [row for row in source_rows(self.url) if start < row[0] <= end]
        return SourceBatch(spark.createDataFrame(rows, CUSTOMERS), data_range.end, len(rows))


def backlog_job(source_url, source, **kwargs) -> IngestionJob:
    return IngestionJob("raw_customers", source,
                        AutoIncrementIdPlanner(max_range_size=RANGE_SIZE),
                        TargetTable("raw_customers", ["id"], CUSTOMERS), **kwargs)


def add_customers(url, count):
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        for _ in range(count):
            conn.execute(sa.text("INSERT INTO customers (name, city) VALUES ('c', 'Oslo')"))
        conn.execute(sa.text("UPDATE customers SET name = 'c' || id"))
    engine.dispose()


def source_rows(url):
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        rows = sorted(tuple(r) for r in conn.execute(sa.text("SELECT id, name, city FROM customers")))
    engine.dispose()
    return rows


def target(spark, plane, warehouse):
    table = VersionedTable(spark, plane, "raw_customers", ["id"], CUSTOMERS, warehouse=warehouse)
    rows = sorted(tuple(r) for r in table.read_actual().select("id", "name", "city").collect())
    return rows, table.last_committed().delta_num


def progress(db_url):
    """The last line of `offset-assets jobs raw_customers`: the backlog's progress."""
    result = CliRunner().invoke(main, ["--db-url", db_url, "jobs", "raw_customers"])
    assert result.exit_code == 0, result.output
    return result.output.splitlines()[-1]


def ranges_logged(plane):
    return [(r.data_range_start, r.data_range_end, r.status, r.attempt)
            for r in JobLog(plane).history("raw_customers")]


def test_a_backlog_is_ingested_in_ranges_and_a_failed_range_is_resumed_first(
        sqlite_url, spark, warehouse, source_url):
    plane = connect(sqlite_url)
    add_customers(source_url, 10)
    reads = []

    def fail_range_6_once(data_range):
        reads.append(data_range.start)
        if data_range.start == "6" and reads.count("6") == 1:
            raise ConnectionError("source went away at id 6")

    ingestion = RangeIngestion(spark, plane, backlog_job(source_url,
                                                         ReadHook(source_url, fail_range_6_once)),
                               warehouse)
    assert [(r.start, r.end) for r in ingestion.plan()] == [
        ("0", "3"), ("3", "6"), ("6", "9"), ("9", "10")]
    with pytest.raises(IngestionError, match="range '6'..'9' failed .*source went away at id 6"):
        ingestion.run_pending(run_id="run-1")
    assert ranges_logged(plane) == [("0", "3", "SUCCESS", 1), ("3", "6", "SUCCESS", 1),
                                    ("6", "9", "FAILURE", 1)]
    assert target(spark, plane, warehouse) == (source_rows(source_url)[:6], 2)
    assert progress(sqlite_url).startswith(
        "raw_customers: 2 ranges done, 1 failed, 0 running; ids ingested up to 6 of 10; "
        "2 ranges due (planned at ")

    add_customers(source_url, 2)  # the source grows meanwhile: ids 11, 12
    due = ingestion.plan()
    assert [(r.start, r.end, r.previous_status) for r in due] == [
        ("6", "9", "FAILURE"), ("9", "12", None)]
    results = ingestion.run_pending(run_id="run-2")
    assert [(r.data_range.start, r.attempt, r.rows_upserted) for r in results] == [
        ("6", 2, 3), ("9", 1, 3)]
    assert reads == ["0", "3", "6", "6", "9"]  # ranges 1..k-1 were not read again
    assert ranges_logged(plane) == [("0", "3", "SUCCESS", 1), ("3", "6", "SUCCESS", 1),
                                    ("6", "9", "SUCCESS", 2), ("9", "12", "SUCCESS", 1)]
    assert target(spark, plane, warehouse) == (source_rows(source_url), 4)  # one delta per range
    assert ingestion.plan() == []
    assert progress(sqlite_url).startswith(
        "raw_customers: 4 ranges done, 0 failed, 0 running; ids ingested up to 12 of 12; "
        "0 ranges due (planned at ")


def test_a_run_killed_in_the_middle_of_a_backlog_is_resumed_at_the_first_unfinished_range(
        sqlite_url, spark, warehouse, source_url):
    plane = connect(sqlite_url)
    add_customers(source_url, 11)
    child = subprocess.run(
        [sys.executable, "-m", "tests.backlog_crash_runner", sqlite_url, warehouse, source_url, "6"],
        capture_output=True, text=True, timeout=600)
    assert child.returncode == -signal.SIGKILL, child.stderr[-2000:]
    assert ranges_logged(plane) == [("0", "3", "SUCCESS", 1), ("3", "6", "SUCCESS", 1),
                                    ("6", "9", "RUNNING", 1)]

    reads = []
    dead = ClaimPolicy(is_run_dead=lambda run_id: run_id == "child-run")  # as Dagster reports it
    job = backlog_job(source_url, ReadHook(source_url, lambda r: reads.append(r.start)),
                      claim_policy=dead)
    ingestion = RangeIngestion(spark, plane, job, warehouse)
    results = ingestion.run_pending(run_id="retry")
    assert [(r.data_range.start, r.data_range.end, r.took_over_run_id) for r in results] == [
        ("6", "9", "child-run"), ("9", "11", None)]
    assert reads == ["6", "9"]
    assert ranges_logged(plane) == [("0", "3", "SUCCESS", 1), ("3", "6", "SUCCESS", 1),
                                    ("6", "9", "SUCCESS", 2), ("9", "11", "SUCCESS", 1)]
    assert target(spark, plane, warehouse) == (source_rows(source_url), 4)


def test_a_run_records_its_backlog_and_an_open_ended_range_takes_the_planned_bound(
        sqlite_url, spark, warehouse, source_url):
    plane = connect(sqlite_url)
    add_customers(source_url, 7)
    job = backlog_job(source_url, ReadHook(source_url, lambda data_range: None))
    ingestion = RangeIngestion(spark, plane, job, warehouse)
    # `id:0-` (an end left to the run) is the next range: it runs as planned, (0, 3].
    result = ingestion.run_range(DataRange(RangeKind.AUTO_INC_ID, "0", None), run_id="run-1")
    assert (result.data_range.end, result.rows_read) == ("3", 3)
    row = JobLog(plane).get_range("raw_customers", "0")
    assert row.data_range_end == "3"
    assert row.runtime_args_dict == {"backlog_end": "7", "backlog_ranges": 3, "refresh": False}


def test_the_sensor_adds_a_partition_per_range_of_a_backlog_and_runs_them_in_order(
        sqlite_url, spark, warehouse, source_url):
    plane = connect(sqlite_url)
    resources = engine_resources(OffsetStore(db_url=sqlite_url), warehouse)
    add_customers(source_url, 7)
    failures = {"3": 1}

    def fail_range_3_once(data_range):
        if failures.get(data_range.start):
            failures[data_range.start] -= 1
            raise ConnectionError("source went away at id 3")

    job = backlog_job(source_url, ReadHook(source_url, fail_range_3_once))
    asset = ingestion_asset(job)
    with dg.instance_for_test() as instance:

        def tick():
            result = evaluate_ingestion_sensor(job, asset.partitions_def, plane, instance)
            added = [key for request in result.dynamic_partitions_requests
                     for key in request.partition_keys]
            instance.add_dynamic_partitions("raw_customers_ranges", added)
            return added, [(r.partition_key, r.run_key.split("@")[0]) for r in result.run_requests]

        def materialize(key):
            return dg.materialize([asset], partition_key=key, resources=resources,
                                  instance=instance, raise_on_error=False)

        # Every range gets its partition but the partial last one, whose end follows the
        # source until it is next; the first range is requested.
        assert tick() == (["id:0-3", "id:3-6"], [("id:0-3", "id:0-3#1")])
        early = materialize("id:3-6")
        assert not early.success
        assert "waits for earlier range '0'" in (
            early.get_step_failure_events()[0].step_failure_data.error.message)
        assert materialize("id:0-3").success
        add_customers(source_url, 1)  # id 8: the last range is now (6, 8]
        assert tick() == ([], [("id:3-6", "id:3-6#1")])
        assert not materialize("id:3-6").success  # the source fails: range 3 is retried first
        assert tick() == ([], [("id:3-6", "id:3-6#2")])
        assert materialize("id:3-6").success
        assert tick() == (["id:6-8"], [("id:6-8", "id:6-8#1")])
        assert materialize("id:6-8").success
        assert isinstance(evaluate_ingestion_sensor(job, asset.partitions_def, plane, instance),
                          dg.SkipReason)
        assert instance.get_dynamic_partitions("raw_customers_ranges") == [
            "id:0-3", "id:3-6", "id:6-8"]  # no stale partition of a range that moved
    assert ranges_logged(plane) == [("0", "3", "SUCCESS", 1), ("3", "6", "SUCCESS", 2),
                                    ("6", "8", "SUCCESS", 1)]
    assert target(spark, plane, warehouse) == (source_rows(source_url), 3)
