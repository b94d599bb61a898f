"""A dead writer never blocks a range: an ingestion killed (SIGKILL) while it holds the
target's hot delta, during its write or inside its commit, is taken over by the next run,
which discards the dead run's delta and ingests the range exactly once, with no manual step
(real child processes, a real SQLite source and Kafka-protocol broker, both control planes).
"""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path

import dagster as dg
import pytest
from pyspark.sql import types as T

from offset_assets.control_plane import connect
from offset_assets.control_plane.delta_catalog import HotDeltaHeldError
from offset_assets.control_plane.job_log import JobLog
from offset_assets.dagster_adapter import OffsetStore
from offset_assets.dagster_adapter.ingestion.assets import ingestion_asset
from offset_assets.ranges.claims import ClaimPolicy
from offset_assets.ranges.errors import IngestionError
from offset_assets.ranges.ingestion import IngestionJob, RangeIngestion, TargetTable
from offset_assets.ranges.planners import AutoIncrementIdPlanner, KafkaOffsetPlanner, TimeWindowPlanner
from offset_assets.ranges.sources import FolderSource, SqlTableSource
from offset_assets.ranges.sources.kafka import KafkaSource
from offset_assets.versioned.layout import WarehouseFiles
from offset_assets.versioned.table import VersionedTable
from tests.customers_source import CUSTOMERS
from tests.dagster_resources import engine_resources
from tests.test_ingestion_backlog import add_customers, source_rows

ROOT = Path(__file__).resolve().parent.parent
MESSAGES = T.StructType([
    T.StructField("kafka_partition", T.IntegerType(), False),
    T.StructField("kafka_offset", T.LongType(), False),
    T.StructField("value", T.StringType(), True),
])
DAGSTER_PARTITION = "id:0-5"
# The crashed run is dead, as Dagster reports a run that is no longer running.
DEAD = ClaimPolicy(is_run_dead=lambda run_id: run_id == "crashed-run")


def customers_job(source_url: str, **kwargs) -> IngestionJob:
    return IngestionJob("raw_customers", SqlTableSource(source_url, "customers", id_column="id",
                                                        columns=["id", "name", "city"]),
                        AutoIncrementIdPlanner(), TargetTable("raw_customers", ["id"], CUSTOMERS), **kwargs)


def events_job(bootstrap_servers: str, topic: str, **kwargs) -> IngestionJob:
    return IngestionJob("raw_events", KafkaSource(bootstrap_servers, [topic], timeout_s=5.0),
                        KafkaOffsetPlanner(), TargetTable("raw_events", ["kafka_partition", "kafka_offset"],
                                                          MESSAGES), **kwargs)


def kill_child(db_url: str, warehouse: str, kind: str, source: str, point: str) -> None:
    child = subprocess.run(
        [sys.executable, "-m", "tests.ingestion_crash_runner", db_url, warehouse, kind, source, point],
        cwd=ROOT, capture_output=True, text=True, timeout=600, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert child.returncode == -signal.SIGKILL, child.stderr[-3000:]


def held_by_the_dead_run(table: VersionedTable, run_id: str = "crashed-run") -> str:
    """The dead run's hot delta (its files written): what every retry was refused by."""
    hot = table.hot()
    assert (hot.holder, hot.run_id) == (f"ingestion:{table.name}", run_id)
    assert WarehouseFiles().exists(hot.data_path)
    return hot.data_path


def actual_rows(table: VersionedTable, *columns: str) -> list[tuple]:
    return sorted(tuple(r) for r in table.read_actual().select(*columns).collect())


def logged(plane, job_name: str) -> list[tuple]:
    return [(r.data_range_start, r.data_range_end, r.status, r.attempt, r.run_id)
            for r in JobLog(plane).history(job_name)]


@pytest.mark.slow
@pytest.mark.sigkill
@pytest.mark.parametrize("point", ["during_write", pytest.param("inside_commit", marks=pytest.mark.extended)])
# The range's five rows are written by the driver; by Spark (as Kafka's range below is) in `make exactness`.
@pytest.mark.parametrize("kind", ["sql", pytest.param("sql-spark", marks=pytest.mark.extended)])
def test_a_sql_range_whose_writer_was_killed_is_taken_over_and_ingested_exactly_once(
        db_url, spark, warehouse, source_url, point, kind):
    plane = connect(db_url)
    add_customers(source_url, 5)
    kill_child(db_url, warehouse, kind, source_url, point)
    table = VersionedTable(spark, plane, "raw_customers", ["id"], CUSTOMERS, warehouse=warehouse)
    assert logged(plane, "raw_customers") == [("0", "5", "RUNNING", 1, "crashed-run")]
    dead_files = held_by_the_dead_run(table)
    assert table.last_committed() is None  # nothing of the dead run is visible

    add_customers(source_url, 2)  # ids 6 and 7 arrive meanwhile: the next range's
    retry = RangeIngestion(spark, plane, customers_job(source_url, claim_policy=DEAD), warehouse)
    results = retry.run_pending(run_id="retry")
    assert [(r.data_range.start, r.data_range.end, r.took_over_run_id, r.rows_read, r.delta_num)
            for r in results] == [("0", "5", "crashed-run", 5, 1), ("5", "7", None, 2, 2)]
    assert logged(plane, "raw_customers") == [("0", "5", "SUCCESS", 2, "retry"), ("5", "7", "SUCCESS", 1, "retry")]
    assert actual_rows(table, "id", "name", "city") == source_rows(source_url)
    assert table.hot() is None and not WarehouseFiles().exists(dead_files)
    assert retry.run_pending(run_id="again") == []


@pytest.mark.slow
@pytest.mark.sigkill
def test_a_kafka_range_whose_writer_was_killed_is_taken_over_and_reads_its_recorded_offsets(
        kafka_broker, sqlite_url, spark, warehouse):
    topic = kafka_broker.new_topic("killed", partitions=2)
    kafka_broker.produce(topic, ["a", "b"], partition=0)
    kafka_broker.produce(topic, ["c"], partition=1)
    plane = connect(sqlite_url)
    kill_child(sqlite_url, warehouse, "kafka", f"{kafka_broker.bootstrap_servers}|{topic}", "during_write")
    table = VersionedTable(spark, plane, "raw_events", ["kafka_partition", "kafka_offset"], MESSAGES,
                           warehouse=warehouse)
    first_end = f'{{"{topic}":{{"0":2,"1":1}}}}'
    assert logged(plane, "raw_events") == [("{}", first_end, "RUNNING", 1, "crashed-run")]
    held_by_the_dead_run(table)

    kafka_broker.produce(topic, ["d"], partition=1)
    retry = RangeIngestion(spark, plane, events_job(kafka_broker.bootstrap_servers, topic, claim_policy=DEAD),
                           warehouse)
    (taken_over,) = retry.run_pending(run_id="retry")
    (head,) = retry.run_pending(run_id="retry")
    assert [(r.data_range.start, r.data_range.end, r.took_over_run_id, r.rows_read) for r in (taken_over, head)] == [
        ("{}", first_end, "crashed-run", 3), (first_end, f'{{"{topic}":{{"0":2,"1":2}}}}', None, 1)]
    assert actual_rows(table, *MESSAGES.fieldNames()) == [(0, 0, "a"), (0, 1, "b"), (1, 0, "c"), (1, 1, "d")]
    assert table.hot() is None


@pytest.mark.slow
@pytest.mark.sigkill
def test_the_ingestion_asset_retried_after_a_dead_dagster_run_takes_its_range_over(
        sqlite_url, spark, warehouse, source_url):
    plane = connect(sqlite_url)
    add_customers(source_url, 5)
    kill_child(sqlite_url, warehouse, "dagster", source_url, "during_write")
    (dead,) = JobLog(plane).history("raw_customers")
    assert (dead.status, dead.data_range_end) == ("RUNNING", "5")
    table = VersionedTable(spark, plane, "raw_customers", ["id"], CUSTOMERS, warehouse=warehouse)
    held_by_the_dead_run(table, dead.run_id)

    asset = ingestion_asset(customers_job(source_url))
    with dg.instance_for_test() as instance:  # the dead run is not among its runs: it is dead
        instance.add_dynamic_partitions("raw_customers_ranges", [DAGSTER_PARTITION])
        run = dg.materialize([asset], partition_key=DAGSTER_PARTITION, instance=instance,
                             resources=engine_resources(OffsetStore(db_url=sqlite_url), warehouse))
    (materialization,) = run.asset_materializations_for_node("raw_customers")
    assert materialization.metadata["took_over_run_id"].value == dead.run_id
    assert materialization.metadata["rows_read"].value == 5
    assert logged(plane, "raw_customers") == [("0", "5", "SUCCESS", 2, run.run_id)]
    assert actual_rows(table, "id", "name", "city") == source_rows(source_url)
    assert table.hot() is None


def land_day(spark, root: Path, day: str, rows) -> None:
    spark.createDataFrame(rows, CUSTOMERS).write.mode("overwrite").parquet(str(root / f"dt={day}"))


def test_a_dead_writer_of_any_source_is_discarded_by_the_next_range_and_a_live_one_is_not(
        sqlite_url, spark, warehouse, tmp_path):
    """A file source and a window that is not the dead run's range: the dead run held its
    own range RUNNING (found dead, not taken over) and the target's hot delta."""
    plane = connect(sqlite_url)
    land_day(spark, tmp_path / "landing", "2022-01-01", [(1, "ann", "Oslo")])
    land_day(spark, tmp_path / "landing", "2022-01-02", [(2, "bob", "Rome")])
    job = IngestionJob("daily_customers", FolderSource(str(tmp_path / "landing")),
                       TimeWindowPlanner(datetime(2022, 1, 1), timedelta(days=1)),
                       TargetTable("daily_customers", ["id"], CUSTOMERS))
    table = VersionedTable(spark, plane, "daily_customers", ["id"], CUSTOMERS, warehouse=warehouse)

    def a_run_holding(run_id: str, window_start: str, window_end: str) -> None:
        JobLog(plane).claim("daily_customers", window_start, window_end, run_id=run_id, refresh=True)
        table.open_delta(holder="ingestion:daily_customers", run_id=run_id)

    a_run_holding("live-run", "20220105000000", "20220106000000")  # heartbeating: alive
    ingestion = RangeIngestion(spark, plane, job, warehouse)
    with pytest.raises(IngestionError) as refused:
        ingestion.run_pending(now=datetime(2022, 1, 3), run_id="next")
    assert isinstance(refused.value.__cause__, HotDeltaHeldError)
    assert table.hot().run_id == "live-run"
    table.discard_dead_hot()
    JobLog(plane).mark_failure(JobLog(plane).get_range("daily_customers", "20220105000000").job_id, "gone")

    a_run_holding("crashed-run", "20220105000000", "20220106000000")
    dead = RangeIngestion(spark, plane, dataclasses.replace(job, claim_policy=DEAD), warehouse)
    results = dead.run_pending(now=datetime(2022, 1, 3), run_id="next")
    assert [(r.data_range.start, r.attempt, r.rows_upserted) for r in results] == [
        ("20220101000000", 2, 1), ("20220102000000", 1, 1)]
    assert actual_rows(table, "id", "name", "city") == [(1, "ann", "Oslo"), (2, "bob", "Rome")]
    assert table.hot() is None
