"""Ingestion assets in real Dagster runs: time-window and dynamic range partitions."""

import contextlib
import dataclasses
import pickle
import time
from datetime import UTC, datetime, timedelta

import dagster as dg
import pytest
import sqlalchemy as sa
from pyspark.sql import types as T

from offset_assets.control_plane import connect, database
from offset_assets.control_plane.delta_catalog import DeltaCatalog
from offset_assets.control_plane.job_log import JobLog
from offset_assets.dagster_adapter import OffsetStore, ingest_due_ranges, on_input_commits
from offset_assets.dagster_adapter.ingestion.assets import ingestion_asset
from offset_assets.dagster_adapter.ingestion.partitions import (
    period_cron,
    range_from_partition_key,
    range_partition_key,
)
from offset_assets.dagster_adapter.ingestion.schedule import build_ingestion_schedule
from offset_assets.dagster_adapter.ingestion.sensor import build_ingestion_sensor, evaluate_ingestion_sensor
from offset_assets.ranges.errors import PlanningError
from offset_assets.ranges.ingestion import IngestionJob, TargetTable
from offset_assets.ranges.planners import (
    AutoIncrementIdPlanner,
    DataRange,
    RangeKind,
    TimeWindowPlanner,
)
from offset_assets.ranges.sources import SqlTableSource
from offset_assets.versioned.table import VersionedTable
from tests.customers_source import CUSTOMERS
from tests.dagster_resources import engine_resources


def execute(url, sql, **params):
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.execute(sa.text(sql), params)
    engine.dispose()


def add_customer(url, name, city, day):
    execute(url, "INSERT INTO customers (name, city, created_at) VALUES (:n, :c, :t)",
            n=name, c=city, t=f"2022-01-{day:02d} 10:00:00.000000")


def add_customer_at(url, name, city, moment: datetime):
    execute(url, "INSERT INTO customers (name, city, created_at) VALUES (:n, :c, :t)",
            n=name, c=city, t=moment.strftime("%Y-%m-%d %H:%M:%S.000000"))


@pytest.fixture
def stack():
    with contextlib.ExitStack() as exit_stack:
        yield exit_stack


@pytest.fixture
def resources(sqlite_url, warehouse):
    store = OffsetStore(db_url=sqlite_url)
    return engine_resources(store, warehouse)


def table_state(spark, sqlite_url, warehouse, name):
    table = VersionedTable(spark, connect(sqlite_url), name, ["id"], CUSTOMERS, warehouse=warehouse)
    rows = sorted(tuple(r) for r in table.read_actual().select("id", "name", "city").collect())
    return rows, table.last_committed().delta_num


def metadata_of(result, key):
    [event] = result.asset_materializations_for_node(key)
    return {name: value.value for name, value in event.metadata.items()}


def test_range_partition_keys_are_readable_and_round_trip():
    cases = [
        (DataRange(RangeKind.AUTO_INC_ID, "1000", "2000"), "id:1000-2000"),
        (DataRange(RangeKind.UPSTREAM, "20220101000000", "20220102000000"),
         "upstream:20220101000000-20220102000000"),
        (DataRange(RangeKind.KAFKA_OFFSET, '{"orders":{"0":120,"1":98}}', None),
         "kafka:orders/0@120,orders/1@98"),
        (DataRange(RangeKind.KAFKA_OFFSET, "{}", None), "kafka:earliest"),
    ]
    for data_range, key in cases:
        assert range_partition_key(data_range) == key
        assert range_from_partition_key(key) == data_range
    with pytest.raises(PlanningError, match="not a range key"):
        range_from_partition_key("2022-01-01")


def test_partition_cadence_follows_the_period_from_default_start():
    assert period_cron(datetime(2022, 1, 1), timedelta(days=1)) == "0 0 * * *"
    assert period_cron(datetime(2022, 1, 1, 6, 30), timedelta(hours=6)) == "30 0-23/6 * * *"
    assert period_cron(datetime(2022, 1, 1, 0, 5), timedelta(minutes=15)) == "5-59/15 * * * *"
    with pytest.raises(PlanningError, match="90 minutes"):
        period_cron(datetime(2022, 1, 1), timedelta(minutes=90))


def daily_job(source_url):
    return IngestionJob(
        "daily_customers",
        SqlTableSource(source_url, "customers", time_column="created_at",
                       columns=["id", "name", "city"]),
        TimeWindowPlanner(datetime(2022, 1, 1), timedelta(days=1)),
        TargetTable("daily_customers", ["id"], CUSTOMERS),
    )


def test_time_window_partitions_ingest_in_order_and_a_backfill_reingests(
        spark, sqlite_url, warehouse, source_url, resources):
    add_customer(source_url, "ann", "Oslo", 1)
    add_customer(source_url, "bob", "Rome", 2)
    asset = ingestion_asset(daily_job(source_url))
    assert asset.partitions_def.get_partition_keys(datetime(2022, 1, 3))[:2] == [
        "2022-01-01", "2022-01-02"]

    first = dg.materialize([asset], partition_key="2022-01-01", resources=resources)
    meta = metadata_of(first, "daily_customers")
    assert (meta["data_range_start"], meta["data_range_end"], meta["rows_upserted"]) == (
        "2022-01-01T00:00:00Z", "2022-01-02T00:00:00Z", 1)  # bounds and commit time as dates
    assert meta["log_driven_type"] == "timewindow"
    event = first.asset_materializations_for_node("daily_customers")[0]
    assert isinstance(event.metadata["commit_ts"], dg.TimestampMetadataValue)
    assert isinstance(event.metadata["rows_upserted"], dg.IntMetadataValue)  # plotted
    assert meta["dagster/row_count"] == 1
    # Where the range's time went: a table per phase, and its Spark jobs as a number.
    assert "| source_read |" in meta["profile"] and "| write |" in meta["profile"]
    assert isinstance(event.metadata["profile.spark_jobs"], dg.IntMetadataValue)
    assert meta["profile.spark_jobs"] == 0  # a range of one row: read and written by the driver

    early = dg.materialize([asset], partition_key="2022-01-03", resources=resources,
                           raise_on_error=False)
    assert not early.success
    failure = early.get_step_failure_events()[0].step_failure_data.error.message
    assert "waits for earlier range '20220102000000'" in failure

    dg.materialize([asset], partition_key="2022-01-02", resources=resources)
    assert table_state(spark, sqlite_url, warehouse, "daily_customers") == (
        [(1, "ann", "Oslo"), (2, "bob", "Rome")], 2)

    # A backfill of day 1 with nothing changed at the source: no new version.
    backfill = {"dagster/backfill": "bf1"}
    again = dg.materialize([asset], partition_key="2022-01-01", resources=resources, tags=backfill)
    meta = metadata_of(again, "daily_customers")
    assert (meta["refresh"], meta["rows_unchanged"], meta["rows_upserted"]) == (True, 1, 0)
    assert "delta_num" not in meta
    # Day 1 corrected at the source: the backfill records the new version only.
    execute(source_url, "UPDATE customers SET city = 'Bergen' WHERE name = 'ann'")
    fixed = dg.materialize([asset], partition_key="2022-01-01", resources=resources, tags=backfill)
    assert metadata_of(fixed, "daily_customers")["delta_num"] == 3
    assert table_state(spark, sqlite_url, warehouse, "daily_customers") == (
        [(1, "ann", "Bergen"), (2, "bob", "Rome")], 3)
    day1 = JobLog(connect(sqlite_url)).get_range("daily_customers", "20220101000000")
    assert (day1.status, day1.attempt, day1.run_id) == ("SUCCESS", 3, fixed.run_id)


@pytest.mark.quick
def test_today_is_a_partition_ingested_as_it_grows_and_automation_downstream_reacts(
        spark, sqlite_url, warehouse, source_url, resources, stack):
    """The current window is the last partition, so it can be launched from the UI. A plain
    run ingests what the source holds so far (a refresh that keeps the window due),
    again as it grows; each run is a materialization of a partition Dagster knows, so
    declarative automation requests the downstream asset."""
    today = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0, tzinfo=None)
    yesterday = today - timedelta(days=1)
    job = dataclasses.replace(daily_job(source_url),
                              planner=TimeWindowPlanner(yesterday, timedelta(days=1)))
    asset = ingestion_asset(job)

    @dg.asset(deps=[asset.key], automation_condition=on_input_commits())
    def customer_report() -> None: ...

    instance = stack.enter_context(dg.instance_for_test())
    today_key, yesterday_key = today.strftime("%Y-%m-%d"), yesterday.strftime("%Y-%m-%d")
    assert asset.partitions_def.get_partition_keys() == [yesterday_key, today_key]

    defs = dg.Definitions(assets=[asset, customer_report], resources=resources)

    def evaluate(cursor):
        return dg.evaluate_automation_conditions(defs=defs, instance=instance, cursor=cursor)

    result = evaluate(None)
    add_customer_at(source_url, "ann", "Oslo", today)
    early = dg.materialize([asset], partition_key=today_key, resources=resources, instance=instance)
    meta = metadata_of(early, "daily_customers")
    assert (meta["open_window"], meta["refresh"], meta["rows_upserted"]) == (True, True, 1)
    row = JobLog(connect(sqlite_url)).get_range("daily_customers", today.strftime("%Y%m%d%H%M%S"))
    assert row.data_range_end == row.data_range_start  # holds nothing: due again once closed
    result = evaluate(result.cursor)
    assert result.get_num_requested(customer_report.key) == 1

    add_customer_at(source_url, "bob", "Rome", today)
    grown = dg.materialize([asset], partition_key=today_key, resources=resources, instance=instance)
    assert (metadata_of(grown, "daily_customers")["rows_upserted"],
            metadata_of(grown, "daily_customers")["rows_unchanged"]) == (1, 1)
    # Yesterday is still the next range in order: today's early runs did not move past it.
    add_customer_at(source_url, "cid", "Lima", yesterday)
    closed = dg.materialize([asset], partition_key=yesterday_key, resources=resources,
                            instance=instance)
    assert (metadata_of(closed, "daily_customers")["refresh"],
            metadata_of(closed, "daily_customers")["open_window"]) == (False, False)
    assert table_state(spark, sqlite_url, warehouse, "daily_customers") == (
        [(1, "ann", "Oslo"), (2, "bob", "Rome"), (3, "cid", "Lima")], 3)


def test_the_ingestion_schedule_runs_the_window_that_closed_not_the_one_that_opened(
        source_url, resources):
    asset = ingestion_asset(daily_job(source_url))
    schedule = build_ingestion_schedule(asset)
    repository = dg.Definitions(assets=[asset], schedules=[schedule],
                                resources=resources).get_repository_def()

    def tick(moment):
        with dg.build_schedule_context(scheduled_execution_time=moment,
                                       repository_def=repository) as context:
            return schedule.evaluate_tick(context)

    [request] = tick(datetime(2022, 1, 3, tzinfo=UTC)).run_requests
    assert (request.partition_key, request.run_key) == ("2022-01-02", "2022-01-02")
    assert tick(datetime(2022, 1, 1, tzinfo=UTC)).skip_message == (
        "no window has closed by 2022-01-01T00:00:00+00:00")


def test_a_sensor_adds_id_range_partitions_and_runs_them_in_order(
        spark, sqlite_url, warehouse, source_url, resources, stack):
    job = IngestionJob(
        "customers_by_id", SqlTableSource(source_url, "customers", id_column="id",
                                          columns=["id", "name", "city"]),
        AutoIncrementIdPlanner(), TargetTable("customers_by_id", ["id"], CUSTOMERS),
    )
    asset = ingestion_asset(job)
    sensor = build_ingestion_sensor(job, asset)
    instance = stack.enter_context(dg.instance_for_test())
    plane = connect(sqlite_url)

    assert isinstance(evaluate_ingestion_sensor(job, asset.partitions_def, plane, instance),
                      dg.SkipReason)
    add_customer(source_url, "ann", "Oslo", 1)
    add_customer(source_url, "bob", "Rome", 1)
    repository = dg.Definitions(assets=[asset], sensors=[sensor],
                                resources=resources).get_repository_def()
    with dg.build_sensor_context(instance_ref=instance.get_ref(), repository_def=repository,
                                 resources={"offset_store": resources["offset_store"]}) as context:
        tick = sensor.evaluate_tick(context)
    assert [r.partition_key for r in tick.run_requests] == ["id:0-2"]
    assert sensor.job_name == "customers_by_id_ingestion"  # the run names its job
    assert tick.dynamic_partitions_requests[0].partition_keys == ["id:0-2"]
    instance.add_dynamic_partitions("customers_by_id_ranges", ["id:0-2"])

    add_customer(source_url, "cid", "Lima", 2)  # lands after the range was planned
    run = dg.materialize([asset], partition_key="id:0-2", resources=resources, instance=instance)
    assert metadata_of(run, "customers_by_id")["rows_read"] == 2
    row = JobLog(plane).get_range("customers_by_id", "0")
    assert (row.status, row.data_range_end, row.run_id) == ("SUCCESS", "2", run.run_id)

    tick = evaluate_ingestion_sensor(job, asset.partitions_def, plane, instance)
    assert [r.partition_key for r in tick.run_requests] == ["id:2-3"]
    registered = DeltaCatalog(plane).table_spec("customers_by_id").created_at
    stamp = datetime.fromtimestamp(registered, UTC).strftime("%Y%m%dT%H%M%S.%fZ")
    assert [r.run_key for r in tick.run_requests] == [f"id:2-3#1@{stamp}"]
    instance.add_dynamic_partitions("customers_by_id_ranges", ["id:2-3"])
    dg.materialize([asset], partition_key="id:2-3", resources=resources, instance=instance)
    assert table_state(spark, sqlite_url, warehouse, "customers_by_id") == (
        [(1, "ann", "Oslo"), (2, "bob", "Rome"), (3, "cid", "Lima")], 2)
    assert isinstance(evaluate_ingestion_sensor(job, asset.partitions_def, plane, instance),
                      dg.SkipReason)


def test_ingestion_definitions_load(source_url, resources):
    daily = ingestion_asset(daily_job(source_url), group_name="ingestion")
    by_id_job = IngestionJob("by_id", SqlTableSource(source_url, "customers", id_column="id"),
                             AutoIncrementIdPlanner(), TargetTable("by_id", ["id"], CUSTOMERS))
    by_id = ingestion_asset(by_id_job)
    schedule = build_ingestion_schedule(daily)
    defs = dg.Definitions(
        assets=[daily, by_id],
        sensors=[build_ingestion_sensor(by_id_job, by_id)],
        schedules=[schedule],
        resources=resources,
    )
    dg.Definitions.validate_loadable(defs)
    assert (schedule.name, schedule.cron_schedule) == ("daily_customers_schedule", "0 0 * * *")
    with pytest.raises(dg.DagsterInvalidDefinitionError, match="dynamic range partitions"):
        build_ingestion_sensor(daily_job(source_url), daily)
    with pytest.raises(dg.DagsterInvalidDefinitionError, match="name the target table"):
        ingestion_asset(by_id_job, key_prefix="raw")
    feeder = ingestion_asset(dataclasses.replace(daily_job(source_url), name="daily_edits"),
                             feeds="daily_customers")  # a second path into one table
    assert feeder.key == dg.AssetKey("daily_edits")
    with pytest.raises(dg.DagsterInvalidDefinitionError, match="writes table 'daily_customers'"):
        ingestion_asset(dataclasses.replace(daily_job(source_url), name="daily_edits"), feeds="other")


def test_run_keys_of_the_same_range_differ_after_the_control_plane_is_recreated(
        source_url, tmp_path, stack):
    """Dagster never launches a run key twice: a demo reset (new control plane, same
    source) plans the same first range, which must not be skipped as already requested."""
    job = IngestionJob("by_id", SqlTableSource(source_url, "customers", id_column="id"),
                       AutoIncrementIdPlanner(), TargetTable("by_id", ["id"], CUSTOMERS))
    asset = ingestion_asset(job)
    instance = stack.enter_context(dg.instance_for_test())
    add_customer(source_url, "ann", "Oslo", 1)
    keys = []
    for state in ("before", "after"):
        url = f"sqlite:///{tmp_path / state}.db"
        tick = evaluate_ingestion_sensor(job, asset.partitions_def, connect(url), instance)
        keys.append(tick.run_requests[0].run_key)
        database.forget(url)
        time.sleep(0.01)
    assert keys[0].startswith("id:0-1#1@") and keys[1].startswith("id:0-1#1@")
    assert keys[0] != keys[1]


# Customers as a change log's rows become: keyed by customer.
BY_CUSTOMER = T.StructType([T.StructField("customer_id", T.LongType(), False), CUSTOMERS["name"], CUSTOMERS["city"]])


def test_a_range_reports_its_keys_superseded_rows_and_quarantined_records_and_the_check_warns(
        spark, sqlite_url, warehouse, tmp_path, resources, stack):
    url = f"sqlite:///{tmp_path / 'changes.db'}"
    execute(url, "CREATE TABLE changes (id INTEGER PRIMARY KEY AUTOINCREMENT, customer_id INTEGER, name TEXT, "
                 "city TEXT)")
    execute(url, "INSERT INTO changes (customer_id, name, city) VALUES (1, 'ann', 'Oslo'), (1, 'ann', 'Rome'), "
                 "('one', 'bob', 'Lima'), (2, 'cid', 'Kyiv')")
    job = IngestionJob("changes", SqlTableSource(url, "changes", id_column="id", order_by="id"),
                       AutoIncrementIdPlanner(), TargetTable("changes", ["customer_id"], BY_CUSTOMER),
                       transform=lambda rows: rows.selectExpr("customer_id", "name", "city", "id"),
                       on_malformed="quarantine")
    asset = ingestion_asset(job)
    assert [spec.name for spec in asset.check_specs] == ["malformed_records"]
    assert list(ingestion_asset(daily_job(url)).check_specs) == []  # a job that fails on them has no check
    instance = stack.enter_context(dg.instance_for_test())
    instance.add_dynamic_partitions("changes_ranges", ["id:0-4"])
    run = dg.materialize([asset], partition_key="id:0-4", resources=resources, instance=instance)
    meta = metadata_of(run, "changes")
    assert {k: meta[k] for k in ("rows_read", "keys_written", "superseded_in_range", "rows_quarantined",
                                 "rows_upserted", "quarantine_delta_num")} == {
        "rows_read": 4, "keys_written": 2, "superseded_in_range": 1, "rows_quarantined": 1, "rows_upserted": 2,
        "quarantine_delta_num": 1}
    (check,) = run.get_asset_check_evaluations()
    assert (check.check_name, check.passed, check.severity) == ("malformed_records", False,
                                                               dg.AssetCheckSeverity.WARN)
    assert check.description == "1 malformed record(s) set aside in 'changes__quarantine'"
    assert check.metadata["partition_keys"].value == ["id:0-4"]



def test_ingest_due_ranges_returns_each_ranges_key_with_what_its_run_did(
        spark, sqlite_url, warehouse, tmp_path, resources, stack):
    """Two id ranges of a change log: customer 1 twice in the first (its last row wins),
    a customer id that is no integer and customer 2 in the second (the first quarantined).
    What each range did comes back with its partition key, not from the event log."""
    url = f"sqlite:///{tmp_path / 'changes.db'}"
    execute(url, "CREATE TABLE changes (id INTEGER PRIMARY KEY AUTOINCREMENT, customer_id INTEGER, name TEXT, "
                 "city TEXT)")
    execute(url, "INSERT INTO changes (customer_id, name, city) VALUES (1, 'ann', 'Oslo'), (1, 'ann', 'Rome'), "
                 "('one', 'bob', 'Lima'), (2, 'cid', 'Kyiv')")
    job = IngestionJob("changes", SqlTableSource(url, "changes", id_column="id", order_by="id"),
                       AutoIncrementIdPlanner(max_range_size=2), TargetTable("changes", ["customer_id"], BY_CUSTOMER),
                       transform=lambda rows: rows.selectExpr("customer_id", "name", "city", "id"),
                       on_malformed="quarantine")
    defs = dg.Definitions(assets=[ingestion_asset(job)], resources=resources)
    instance = stack.enter_context(dg.instance_for_test())

    ingested = ingest_due_ranges(defs, "changes", instance)

    assert ingested == ["id:0-2", "id:2-4"]  # the partition keys, as the keys alone were before
    assert [(r.partition_key, r.attempt, r.rows_read, r.keys_written, r.superseded_in_range, r.rows_upserted,
             r.rows_quarantined, r.delta_num, r.quarantine_delta_num) for r in ingested] == [
        ("id:0-2", 1, 2, 1, 1, 1, 0, 1, None),
        ("id:2-4", 1, 2, 1, 0, 1, 1, 2, 1)]
    second = JobLog(connect(sqlite_url)).get_range("changes", "2")
    assert (ingested[1].job_id, ingested[1].run_id) == (second.job_id, second.run_id)
    copied = pickle.loads(pickle.dumps(ingested))
    assert copied == ingested and copied[1].rows_quarantined == 1
    assert ingest_due_ranges(defs, "changes", instance) == []
