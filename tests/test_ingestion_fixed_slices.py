"""A range is a fixed slice of its source once it has run: a retry, a refresh or a Dagster
partition launched again reads exactly the bounds job_log recorded for it, and only the
head range, never run, is planned to the present (a real Kafka-protocol broker, a real
SQLite source, real Spark and Dagster)."""

from __future__ import annotations

import dagster as dg
import pytest
from pyspark.sql import types as T

from offset_assets.control_plane import connect
from offset_assets.control_plane.job_log import JobLog
from offset_assets.dagster_adapter import OffsetStore
from offset_assets.dagster_adapter.ingestion.assets import ingestion_asset
from offset_assets.ranges.errors import IngestionError, PlanningError
from offset_assets.ranges.ingestion import IngestionJob, RangeIngestion, TargetTable
from offset_assets.ranges.planners import AutoIncrementIdPlanner, DataRange, KafkaOffsetPlanner, RangeKind
from offset_assets.ranges.sources import SqlTableSource
from offset_assets.ranges.sources.kafka import KafkaSource
from offset_assets.versioned.table import VersionedTable
from tests.customers_source import CUSTOMERS
from tests.dagster_resources import engine_resources
from tests.test_ingestion_backlog import add_customers

MESSAGES = T.StructType([
    T.StructField("kafka_partition", T.IntegerType(), False),
    T.StructField("kafka_offset", T.LongType(), False),
    T.StructField("value", T.StringType(), True),
])
KEY = ["kafka_partition", "kafka_offset"]


class FailingOnce:
    """A transform that fails the first range it shapes (after the source was read: the
    range's end is recorded by then), and keeps the target's columns afterwards."""

    def __init__(self, columns):
        self.columns, self.calls = columns, 0

    def __call__(self, rows):
        self.calls += 1
        if self.calls == 1:
            raise ConnectionError("the writer went away")
        return rows.select(*self.columns)


def kafka_job(broker, topic, transform=None) -> IngestionJob:
    return IngestionJob("raw_events", KafkaSource(broker.bootstrap_servers, [topic], timeout_s=5.0),
                        KafkaOffsetPlanner(), TargetTable("raw_events", KEY, MESSAGES), transform=transform)


def id_job(source_url, transform=None) -> IngestionJob:
    return IngestionJob("raw_customers", SqlTableSource(source_url, "customers", id_column="id",
                                                        columns=["id", "name", "city"]),
                        AutoIncrementIdPlanner(), TargetTable("raw_customers", ["id"], CUSTOMERS),
                        transform=transform)


def logged(plane, job_name) -> list[tuple]:
    return [(r.data_range_start, r.data_range_end, r.status, r.attempt) for r in JobLog(plane).history(job_name)]


def rows_of(spark, plane, warehouse, name, key, schema) -> list[tuple]:
    table = VersionedTable(spark, plane, name, key, schema, warehouse=warehouse)
    return sorted(tuple(r) for r in table.read_actual().select(*schema.fieldNames()).collect())


def offsets(topic, **by_partition) -> str:
    parts = ",".join(f'"{p.removeprefix("p")}":{o}' for p, o in by_partition.items())
    return f'{{"{topic}":{{{parts}}}}}'


def test_a_kafka_range_run_again_reads_exactly_its_recorded_offsets_and_the_new_messages_wait(
        kafka_broker, spark, sqlite_url, warehouse):
    topic = kafka_broker.new_topic("fixed", partitions=3)
    kafka_broker.produce(topic, ["a", "b"], partition=0)
    kafka_broker.produce(topic, ["c"], partition=1)
    plane = connect(sqlite_url)
    ingestion = RangeIngestion(spark, plane, kafka_job(kafka_broker, topic), warehouse)
    (first,) = ingestion.run_pending()
    first_end = offsets(topic, p0=2, p1=1, p2=0)
    assert (first.data_range.end, first.rows_read) == (first_end, 3)

    kafka_broker.produce(topic, ["d", "e"], partition=0)
    kafka_broker.produce(topic, ["f"], partition=2)
    # The first range again, as `kafka:earliest` names it (no end): its 3 messages, not 6.
    (again,) = ingestion.refresh([DataRange(RangeKind.KAFKA_OFFSET, "{}", None)])
    assert (again.data_range.end, again.rows_read, again.rows_unchanged, again.delta_num) == (
        first_end, 3, 3, None)
    assert logged(plane, "raw_events") == [("{}", first_end, "SUCCESS", 2)]

    (second,) = ingestion.run_pending()  # the head range takes what arrived since
    assert (second.data_range.start, second.data_range.end, second.rows_read) == (
        first_end, offsets(topic, p0=4, p1=1, p2=1), 3)
    assert logged(plane, "raw_events") == [("{}", first_end, "SUCCESS", 2),
                                           (first_end, second.data_range.end, "SUCCESS", 1)]
    assert rows_of(spark, plane, warehouse, "raw_events", KEY, MESSAGES) == [
        (0, 0, "a"), (0, 1, "b"), (0, 2, "d"), (0, 3, "e"), (1, 0, "c"), (2, 0, "f")]


def test_a_failed_kafka_range_recorded_its_end_before_reading_and_its_retry_reads_exactly_that(
        kafka_broker, spark, sqlite_url, warehouse):
    topic = kafka_broker.new_topic("retried", partitions=2)
    kafka_broker.produce(topic, ["a"], partition=0)
    kafka_broker.produce(topic, ["b"], partition=1)
    plane = connect(sqlite_url)
    transform = FailingOnce(MESSAGES.fieldNames())
    ingestion = RangeIngestion(spark, plane, kafka_job(kafka_broker, topic, transform), warehouse)
    with pytest.raises(IngestionError, match="the writer went away"):
        ingestion.run_pending()
    first_end = offsets(topic, p0=1, p1=1)
    assert logged(plane, "raw_events") == [("{}", first_end, "FAILURE", 1)]

    kafka_broker.produce(topic, ["c"], partition=0)
    retry, head = ingestion.run_pending(), ingestion.run_pending()
    assert [(r.data_range.start, r.data_range.end, r.attempt, r.rows_read) for r in (*retry, *head)] == [
        ("{}", first_end, 2, 2), (first_end, offsets(topic, p0=2, p1=1), 1, 1)]
    assert rows_of(spark, plane, warehouse, "raw_events", KEY, MESSAGES) == [
        (0, 0, "a"), (0, 1, "c"), (1, 0, "b")]


@pytest.mark.slow
def test_launching_an_ingested_kafka_partition_again_reads_its_recorded_slice(
        kafka_broker, spark, sqlite_url, warehouse):
    topic = kafka_broker.new_topic("relaunched", partitions=2)
    kafka_broker.produce(topic, ["a", "b"], partition=0)
    kafka_broker.produce(topic, ["c"], partition=1)
    plane = connect(sqlite_url)
    asset = ingestion_asset(kafka_job(kafka_broker, topic))
    resources = engine_resources(OffsetStore(db_url=sqlite_url), warehouse)
    first_end = offsets(topic, p0=2, p1=1)
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("raw_events_ranges", ["kafka:earliest"])

        def launch():
            run = dg.materialize([asset], partition_key="kafka:earliest", resources=resources,
                                 instance=instance)
            (materialization,) = run.asset_materializations_for_node("raw_events")
            return {key: value.value for key, value in materialization.metadata.items()
                    if key in ("rows_read", "data_range_end", "refresh")}

        assert launch() == {"rows_read": 3, "data_range_end": first_end, "refresh": False}
        kafka_broker.produce(topic, ["d", "e"], partition=1)
        assert launch() == {"rows_read": 3, "data_range_end": first_end, "refresh": True}
    assert logged(plane, "raw_events") == [("{}", first_end, "SUCCESS", 2)]
    assert rows_of(spark, plane, warehouse, "raw_events", KEY, MESSAGES) == [
        (0, 0, "a"), (0, 1, "b"), (1, 0, "c")]


def test_an_id_range_whose_end_was_left_to_the_run_keeps_the_max_id_it_read(
        sqlite_url, spark, warehouse, source_url):
    plane = connect(sqlite_url)
    add_customers(source_url, 2)
    transform = FailingOnce(CUSTOMERS.fieldNames())
    ingestion = RangeIngestion(spark, plane, id_job(source_url, transform), warehouse)
    # `id:0-` run as a refresh: its end is the max id read now (2), recorded before the read.
    open_ended = DataRange(RangeKind.AUTO_INC_ID, "0", None)
    with pytest.raises(IngestionError, match="the writer went away"):
        ingestion.refresh([open_ended])
    assert logged(plane, "raw_customers") == [("0", "2", "FAILURE", 1)]

    add_customers(source_url, 2)  # ids 3 and 4
    (retry,) = ingestion.refresh([open_ended])
    assert (retry.data_range.end, retry.rows_read, retry.attempt) == ("2", 2, 2)
    (again,) = ingestion.refresh([open_ended])  # done: still its own slice
    assert (again.data_range.end, again.rows_read, again.rows_unchanged) == ("2", 2, 2)
    with pytest.raises(PlanningError, match=r"range '0' has run as '0'\.\.'2' \(job_log\); a range keeps "
                                            r"its bounds once it has run, so it cannot run to '4'"):
        ingestion.refresh([DataRange(RangeKind.AUTO_INC_ID, "0", "4")])
    (head,) = ingestion.run_pending()
    assert (head.data_range.start, head.data_range.end, head.rows_read) == ("2", "4", 2)
    assert logged(plane, "raw_customers") == [("0", "2", "SUCCESS", 3), ("2", "4", "SUCCESS", 1)]
    assert rows_of(spark, plane, warehouse, "raw_customers", ["id"], CUSTOMERS) == [
        (1, "c1", "Oslo"), (2, "c2", "Oslo"), (3, "c3", "Oslo"), (4, "c4", "Oslo")]


@pytest.mark.slow
def test_launching_an_open_ended_id_partition_again_reads_its_recorded_slice(
        sqlite_url, spark, warehouse, source_url):
    plane = connect(sqlite_url)
    add_customers(source_url, 2)
    asset = ingestion_asset(id_job(source_url))
    resources = engine_resources(OffsetStore(db_url=sqlite_url), warehouse)
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("raw_customers_ranges", ["id:0-"])

        def launch():
            run = dg.materialize([asset], partition_key="id:0-", resources=resources, instance=instance)
            (materialization,) = run.asset_materializations_for_node("raw_customers")
            return {key: value.value for key, value in materialization.metadata.items()
                    if key in ("rows_read", "data_range_end")}

        assert launch() == {"rows_read": 2, "data_range_end": "2"}
        add_customers(source_url, 3)
        assert launch() == {"rows_read": 2, "data_range_end": "2"}
    assert logged(plane, "raw_customers") == [("0", "2", "SUCCESS", 2)]
