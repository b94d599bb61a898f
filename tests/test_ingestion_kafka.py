"""Kafka ingestion end to end: a real Kafka-protocol broker (tests/kafka_broker.py), real
Spark reading the offset slices on its executors, a real control plane and versioned table.

Each test writes a handful of messages to topics of its own and runs ranges with
`RangeIngestion`; the table holds one row per message (partition, offset, value).
"""

from __future__ import annotations

import re
import socket
from dataclasses import dataclass, field

import pytest
from pyspark.errors import PythonException
from pyspark.sql import types as T

from offset_assets.control_plane import connect
from offset_assets.control_plane.job_log import JobLog
from offset_assets.ranges.errors import IngestionError, SourceError
from offset_assets.ranges.ingestion import IngestionJob, RangeIngestion, TargetTable
from offset_assets.ranges.planners import DataRange, KafkaOffsetPlanner, RangeKind
from offset_assets.ranges.sources.kafka import KafkaSource
from offset_assets.ranges.sources.kafka_read import slices_frame
from offset_assets.spark_jobs import count_spark_jobs
from offset_assets.versioned.table import VersionedTable
from tests.kafka_broker import KafkaBroker, free_port
from tests.test_cluster import run_driver

MESSAGES = T.StructType([
    T.StructField("kafka_partition", T.IntegerType(), False),
    T.StructField("kafka_offset", T.LongType(), False),
    T.StructField("value", T.StringType(), True),
])
KEY = ["kafka_partition", "kafka_offset"]


@dataclass(frozen=True)
class BrokerStoppedAfterPlanning(KafkaSource):
    """A Kafka source whose broker goes away once the driver has planned the range's
    slices for the read (its end recorded), before the executors read them (the first
    range read only)."""

    broker: KafkaBroker | None = None
    stops: list[bool] = field(default_factory=list)

    def plan(self, data_range: DataRange):
        planned = super().plan(data_range)
        if data_range.end is not None and not self.stops:
            self.stops.append(True)
            self.broker.stop()
        return planned


def kafka_job(bootstrap_servers: str, topic: str, transform=None, planner=None,
              topics=None, source_type=KafkaSource, **source_settings) -> IngestionJob:
    source = source_type(bootstrap_servers, topics or [topic], **{"timeout_s": 5.0, **source_settings})
    return IngestionJob("raw_messages", source, planner or KafkaOffsetPlanner(),
                        TargetTable("raw_messages", KEY, MESSAGES), transform=transform)


def table_rows(spark, plane, warehouse) -> list[tuple]:
    table = VersionedTable(spark, plane, "raw_messages", KEY, MESSAGES, warehouse=warehouse)
    return sorted(tuple(r) for r in table.read_actual().select(*MESSAGES.fieldNames()).collect())


def logged(plane) -> list[tuple]:
    return [(r.data_range_start, r.data_range_end, r.status, r.attempt)
            for r in JobLog(plane).history("raw_messages")]


def test_each_partition_of_a_topic_is_ingested_from_its_committed_offset_exactly_once(
        kafka_broker, spark, sqlite_url, warehouse):
    topic = kafka_broker.new_topic("orders", partitions=3)
    kafka_broker.produce(topic, ["a", "b"], partition=0)
    kafka_broker.produce(topic, ["c"], partition=1)
    plane = connect(sqlite_url)
    ingestion = RangeIngestion(spark, plane, kafka_job(kafka_broker.bootstrap_servers, topic), warehouse)

    (first,) = ingestion.run_pending()
    assert (first.data_range.start, first.data_range.end, first.rows_read) == (
        "{}", f'{{"{topic}":{{"0":2,"1":1,"2":0}}}}', 3)
    kafka_broker.produce(topic, ["d"], partition=0)
    kafka_broker.produce(topic, ["e"], partition=2)
    (second,) = ingestion.run_pending()
    assert (second.data_range.start, second.data_range.end, second.rows_read) == (
        first.data_range.end, f'{{"{topic}":{{"0":3,"1":1,"2":1}}}}', 2)
    assert ingestion.run_pending() == []  # nothing new on any partition
    assert table_rows(spark, plane, warehouse) == [
        (0, 0, "a"), (0, 1, "b"), (0, 2, "d"), (1, 0, "c"), (2, 0, "e")]


def test_a_range_is_read_by_the_executors_one_input_partition_per_topic_partition(
        kafka_broker, spark):
    topic = kafka_broker.new_topic("sliced", partitions=3)
    for partition in range(3):
        kafka_broker.produce(topic, [f"m{partition}"], partition=partition)
    source = KafkaSource(kafka_broker.bootstrap_servers, [topic])
    whole = DataRange(RangeKind.KAFKA_OFFSET, "{}", None)

    slices, _end = source.plan(whole)
    reader = slices_frame(spark, slices, source._config(), source.timeout_s)._jdf.queryExecution()
    plan = reader.executedPlan().toString()
    assert "MapInArrow" in plan and "Range (0, 3, step=1, splits=3)" in plan
    assert "LocalTableScan" not in plan and "LocalRelation" not in reader.toString()
    batch = source.read_range(spark, whole)
    assert batch.df.rdd.getNumPartitions() == 3 and batch.row_count == 3
    assert sorted((r.kafka_partition, r.value) for r in batch.df.collect()) == [
        (0, "m0"), (1, "m1"), (2, "m2")]


def test_a_range_is_read_from_the_broker_once_and_counted_as_it_is_read(
        kafka_broker, spark, sqlite_url, warehouse):
    topic = kafka_broker.new_topic("once", partitions=2)
    kafka_broker.produce(topic, ["a", "b"], partition=0)
    kafka_broker.transaction(topic, ["x"], partition=1, commit=False)  # offset 0, abort marker 1
    kafka_broker.produce(topic, ["c"], partition=1)                    # offset 2
    stops = []

    def stop_the_broker_once_read(messages):
        # Called once the source has read the range, before the range is counted and written.
        stops.append(True)
        kafka_broker.stop()
        return messages.select(*MESSAGES.fieldNames())

    plane = connect(sqlite_url)
    job = kafka_job(kafka_broker.bootstrap_servers, topic, stop_the_broker_once_read)
    try:
        with count_spark_jobs(spark) as jobs:
            (result,) = RangeIngestion(spark, plane, job, warehouse).run_pending()
    finally:
        kafka_broker.start()
    # Counted and written without the broker: 3 rows, not the 4 offsets the range spans.
    assert stops == [True]
    assert (result.rows_read, result.data_range.end) == (3, f'{{"{topic}":{{"0":2,"1":3}}}}')
    assert table_rows(spark, plane, warehouse) == [(0, 0, "a"), (0, 1, "b"), (1, 2, "c")]
    assert logged(plane) == [("{}", result.data_range.end, "SUCCESS", 1)]
    # One job read the slices and counted them; no job of its own counts the range.
    assert "localCheckpoint" in jobs.jobs[0].name, jobs.describe()
    assert not [job for job in jobs.jobs if job.name.startswith("count at")], jobs.describe()


@pytest.mark.slow
def test_a_range_is_read_and_counted_exactly_over_spark_connect(kafka_broker, connect_server, tmp_path):
    topic = kafka_broker.new_topic("remote", partitions=2)
    kafka_broker.produce(topic, ["a", "b"], partition=0)
    kafka_broker.transaction(topic, ["x"], partition=1, commit=False)  # offset 0, abort marker 1
    kafka_broker.produce(topic, ["c"], partition=1)                    # offset 2

    story = run_driver(["tests.kafka_connect_story", connect_server.url, kafka_broker.bootstrap_servers,
                        topic, str(tmp_path)], {}, connect_server=connect_server)
    # 3 messages of the 4 offsets: a Connect checkpoint reports no observed count, the copy is counted.
    assert story["ranges"] == [["{}", f'{{"{topic}":{{"0":2,"1":3}}}}', 3]]
    assert story["rows"] == [[0, 0, "a"], [0, 1, "b"], [1, 2, "c"]]


def test_a_backlog_is_ingested_in_ranges_of_at_most_max_offsets_per_partition(
        kafka_broker, spark, sqlite_url, warehouse):
    topic = kafka_broker.new_topic("backlog", partitions=2)
    kafka_broker.produce(topic, ["a", "b", "c"], partition=0)
    kafka_broker.produce(topic, ["d"], partition=1)
    plane = connect(sqlite_url)
    job = kafka_job(kafka_broker.bootstrap_servers, topic,
                    planner=KafkaOffsetPlanner(max_offsets_per_partition=2))
    ingestion = RangeIngestion(spark, plane, job, warehouse)

    (first,) = ingestion.run_pending()
    (second,) = ingestion.run_pending()
    assert ingestion.run_pending() == []
    assert [(r.data_range.end, r.rows_read) for r in (first, second)] == [
        (f'{{"{topic}":{{"0":2,"1":1}}}}', 3), (f'{{"{topic}":{{"0":3,"1":1}}}}', 1)]
    assert table_rows(spark, plane, warehouse) == [(0, 0, "a"), (0, 1, "b"), (0, 2, "c"), (1, 0, "d")]


def test_messages_of_an_aborted_transaction_are_never_ingested(kafka_broker, spark, sqlite_url, warehouse):
    topic = kafka_broker.new_topic("payments")
    kafka_broker.produce(topic, ["a"])                              # offset 0
    kafka_broker.transaction(topic, ["x", "y"], commit=False)       # 1, 2, abort marker 3
    kafka_broker.transaction(topic, ["b"])                          # 4, commit marker 5
    kafka_broker.produce(topic, ["c"])                              # 6
    plane = connect(sqlite_url)
    ingestion = RangeIngestion(spark, plane, kafka_job(kafka_broker.bootstrap_servers, topic), warehouse)

    (result,) = ingestion.run_pending()
    assert (result.data_range.end, result.rows_read) == (f'{{"{topic}":{{"0":7}}}}', 3)
    assert table_rows(spark, plane, warehouse) == [(0, 0, "a"), (0, 4, "b"), (0, 6, "c")]


def test_a_range_ending_on_a_transaction_marker_ends_after_it_and_the_next_range_loses_nothing(
        kafka_broker, spark, sqlite_url, warehouse):
    topic = kafka_broker.new_topic("ledger")
    kafka_broker.transaction(topic, ["a", "b"])  # 0, 1, commit marker 2
    plane = connect(sqlite_url)
    ingestion = RangeIngestion(spark, plane, kafka_job(kafka_broker.bootstrap_servers, topic), warehouse)

    (first,) = ingestion.run_pending()
    assert first.data_range.end == f'{{"{topic}":{{"0":3}}}}'  # past the marker
    assert ingestion.run_pending() == []  # the marker alone is not a new message
    kafka_broker.transaction(topic, ["c"])  # 3, commit marker 4
    (second,) = ingestion.run_pending()
    assert (second.data_range.end, second.rows_read) == (f'{{"{topic}":{{"0":5}}}}', 1)
    assert table_rows(spark, plane, warehouse) == [(0, 0, "a"), (0, 1, "b"), (0, 3, "c")]
    assert [row[:3] for row in logged(plane)] == [
        ("{}", first.data_range.end, "SUCCESS"), (first.data_range.end, second.data_range.end, "SUCCESS")]


def test_a_partition_added_between_ranges_is_read_from_its_earliest_offset(
        kafka_broker, spark, sqlite_url, warehouse):
    topic = kafka_broker.new_topic("growing")
    kafka_broker.produce(topic, ["a"])
    plane = connect(sqlite_url)
    ingestion = RangeIngestion(spark, plane, kafka_job(kafka_broker.bootstrap_servers, topic), warehouse)
    (first,) = ingestion.run_pending()

    kafka_broker.add_partitions(topic, 2)
    kafka_broker.produce(topic, ["b", "c"], partition=1)
    (second,) = ingestion.run_pending()
    assert (second.data_range.start, second.data_range.end, second.rows_read) == (
        f'{{"{topic}":{{"0":1}}}}', f'{{"{topic}":{{"0":1,"1":2}}}}', 2)
    assert table_rows(spark, plane, warehouse) == [(0, 0, "a"), (1, 0, "b"), (1, 1, "c")]


def test_a_range_whose_start_retention_deleted_fails_naming_the_lost_offsets_and_commits_nothing(
        kafka_broker, spark, sqlite_url, warehouse):
    topic = kafka_broker.new_topic("expiring")
    kafka_broker.produce(topic, ["a", "b"])
    plane = connect(sqlite_url)
    ingestion = RangeIngestion(spark, plane, kafka_job(kafka_broker.bootstrap_servers, topic), warehouse)
    (first,) = ingestion.run_pending()
    kafka_broker.produce(topic, ["c", "d", "e"])  # offsets 2, 3, 4
    kafka_broker.delete_records_before(topic, 0, 4)  # retention: 2 and 3 are gone

    with pytest.raises(IngestionError) as failed:
        ingestion.run_pending()
    lost = (f"Kafka topic '{topic}' partition 0: the range starts at offset 2 but the partition now "
            f"starts at offset 4; offsets 2..3 were deleted (retention) before they were ingested")
    assert lost in str(failed.value)
    assert logged(plane) == [("{}", first.data_range.end, "SUCCESS", 1),
                             (first.data_range.end, None, "FAILURE", 1)]
    assert lost in JobLog(plane).history("raw_messages")[1].error
    assert table_rows(spark, plane, warehouse) == [(0, 0, "a"), (0, 1, "b")]


def test_a_broker_stopped_mid_range_fails_the_range_and_the_retry_commits_it_exactly_once(
        kafka_broker, spark, sqlite_url, warehouse):
    topic = kafka_broker.new_topic("outage", partitions=2)
    kafka_broker.produce(topic, ["a", "b"], partition=0)
    kafka_broker.produce(topic, ["c"], partition=1)

    plane = connect(sqlite_url)
    job = kafka_job(kafka_broker.bootstrap_servers, topic, timeout_s=2.0,
                    source_type=BrokerStoppedAfterPlanning, broker=kafka_broker)
    ingestion = RangeIngestion(spark, plane, job, warehouse)
    try:
        with pytest.raises(IngestionError) as failed:
            ingestion.run_pending()
        # Raised in an executor's Python worker (whichever slice's task failed first):
        # the range fails with the source's own error, chained to Spark's.
        assert isinstance(failed.value.__cause__, SourceError)
        assert re.match(
            rf"Kafka at {kafka_broker.bootstrap_servers}, topic '{topic}' partition [01] "
            rf"offsets 0\.\.[12]: nothing read for 2 s at offset 0", str(failed.value.__cause__))
        assert isinstance(failed.value.__cause__.__cause__, PythonException)
        # The end was recorded before a message was read: the retry reads this same slice.
        assert logged(plane) == [("{}", f'{{"{topic}":{{"0":2,"1":1}}}}', "FAILURE", 1)]
        # job_log keeps the worker's own error, not "An exception was thrown from the Python worker".
        assert re.fullmatch(rf".*SourceError: Kafka at {kafka_broker.bootstrap_servers}, topic '{topic}' "
                            rf"partition [01] offsets 0\.\.[12]: nothing read for 2 s at offset 0.*",
                            JobLog(plane).history("raw_messages")[0].error)
        assert table_rows(spark, plane, warehouse) == []
    finally:
        kafka_broker.start()

    (retry,) = ingestion.run_pending()
    assert (retry.attempt, retry.rows_read, retry.data_range.end) == (
        2, 3, f'{{"{topic}":{{"0":2,"1":1}}}}')
    assert logged(plane) == [("{}", retry.data_range.end, "SUCCESS", 2)]
    assert table_rows(spark, plane, warehouse) == [(0, 0, "a"), (0, 1, "b"), (1, 0, "c")]
    assert ingestion.run_pending() == []


def test_secret_consumer_settings_appear_in_no_plan_option_repr_or_error_of_a_range(
        kafka_broker, spark, sqlite_url, warehouse):
    topic = kafka_broker.new_topic("secret")
    kafka_broker.produce(topic, ["a"])
    secrets = {"sasl.password": "pw-4711-never-shown", "ssl.key.password": "kp-4712-never-shown"}

    def shows_a_secret(text: str) -> bool:
        # The whole values: a plan's JSON holds the JVM's random id, where "4712" can occur.
        return any(secret in text for secret in secrets.values())

    plane = connect(sqlite_url)
    job = kafka_job(kafka_broker.bootstrap_servers, topic, consumer_config=secrets)
    (first,) = RangeIngestion(spark, plane, job, warehouse).run_pending()
    assert first.rows_read == 1 and not shows_a_secret(repr(job))
    source = job.source
    slices, _end = source.plan(DataRange(RangeKind.KAFKA_OFFSET, "{}", None))
    reader = slices_frame(spark, slices, source._config(), source.timeout_s)._jdf.queryExecution()
    assert "MapInArrow" in reader.toString()  # the plan read above
    assert not shows_a_secret(reader.toString()) and not shows_a_secret(reader.analyzed().toJSON())
    assert not shows_a_secret(reader.executedPlan().toJSON())

    kafka_broker.produce(topic, ["b"])
    failing = kafka_job(kafka_broker.bootstrap_servers, topic, consumer_config=secrets, timeout_s=2.0,
                        source_type=BrokerStoppedAfterPlanning, broker=kafka_broker)
    try:
        with pytest.raises(IngestionError) as failed:
            RangeIngestion(spark, plane, failing, warehouse).run_pending()
    finally:
        kafka_broker.start()
    assert "nothing read for 2 s at offset 1" in str(failed.value.__cause__)
    assert not shows_a_secret(str(failed.value)) and not shows_a_secret(str(failed.value.__cause__))
    assert not any(shows_a_secret(record.error or "") for record in JobLog(plane).history("raw_messages"))
    assert table_rows(spark, plane, warehouse) == [(0, 0, "a")]


def test_a_topic_that_does_not_exist_is_one_clear_error_and_nothing_is_logged(
        kafka_broker, spark, sqlite_url, warehouse):
    plane = connect(sqlite_url)
    job = kafka_job(kafka_broker.bootstrap_servers, "no-such-topic")
    with pytest.raises(SourceError) as missing:
        RangeIngestion(spark, plane, job, warehouse).run_pending()
    assert str(missing.value) == f"Kafka topic 'no-such-topic' not found at {kafka_broker.bootstrap_servers}"
    assert logged(plane) == []


def test_a_missing_topic_among_existing_ones_is_named_and_nothing_of_the_others_is_committed(
        kafka_broker, spark, sqlite_url, warehouse):
    topic = kafka_broker.new_topic("present")
    kafka_broker.produce(topic, ["a"])
    plane = connect(sqlite_url)
    job = kafka_job(kafka_broker.bootstrap_servers, topic, topics=[topic, "absent-topic"])
    ingestion = RangeIngestion(spark, plane, job, warehouse)

    with pytest.raises(SourceError) as planned:
        ingestion.run_pending()
    # Run as an explicit range (a Dagster partition's run): claimed, then FAILURE.
    with pytest.raises(IngestionError) as explicit:
        ingestion.refresh([DataRange(RangeKind.KAFKA_OFFSET, "{}", None)])
    missing = f"Kafka topic 'absent-topic' not found at {kafka_broker.bootstrap_servers}"
    assert str(planned.value) == missing and str(explicit.value).endswith(f"SourceError: {missing}")
    assert logged(plane) == [("{}", None, "FAILURE", 1)]
    assert JobLog(plane).history("raw_messages")[0].error == f"SourceError: {missing}"
    assert table_rows(spark, plane, warehouse) == []


@pytest.mark.kafka  # needs confluent-kafka, not the broker
def test_a_broker_that_refuses_connections_is_one_clear_error_and_nothing_is_logged(
        spark, sqlite_url, warehouse):
    nobody = f"127.0.0.1:{free_port()}"
    plane = connect(sqlite_url)
    job = kafka_job(nobody, "orders", timeout_s=1.0)
    with pytest.raises(SourceError, match=rf"^Kafka at {nobody} \(topics \['orders'\]\): no broker "
                                          rf"answered within 1 s \(.+\)$"):
        RangeIngestion(spark, plane, job, warehouse).run_pending()
    assert logged(plane) == []


@pytest.mark.kafka  # needs confluent-kafka, not the broker
def test_a_broker_that_accepts_connections_but_never_answers_is_one_clear_error_and_nothing_is_logged(
        spark, sqlite_url, warehouse):
    with socket.socket() as silent:  # listens, never reads nor writes
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        address = f"127.0.0.1:{silent.getsockname()[1]}"
        plane = connect(sqlite_url)
        job = kafka_job(address, "orders", timeout_s=1.0)
        with pytest.raises(SourceError, match=rf"^Kafka at {address} \(topics \['orders'\]\): no broker "
                                              rf"answered within 1 s \(.+\)$"):
            RangeIngestion(spark, plane, job, warehouse).run_pending()
    assert logged(plane) == []
