"""Kafka range planning without a broker: offsets in, slices and range ends out.
(Reading against a real broker: tests/test_ingestion_kafka.py.)"""

import sys

import pytest
from pyspark.sql import types as T

from offset_assets.ranges.errors import SourceError
from offset_assets.ranges.planners import DataRange, RangeKind
from offset_assets.ranges.sources.kafka import (
    KafkaSource,
    describe_offsets,
    offsets_from_description,
    plan_slices,
    slices_end,
)
from offset_assets.ranges.sources.kafka_message_rows import with_values_expanded
from offset_assets.ranges.sources.kafka_read import (
    MESSAGE_SCHEMA,
    MESSAGES_PER_TASK,
    REDACTED,
    OffsetSlice,
    SliceReading,
    redacted,
    task_pieces,
)


def test_a_range_slices_each_partition_from_its_committed_offset_to_the_latest():
    start = {"orders": {"0": 6, "1": 4}}
    slices = plan_slices(start, {}, {"orders": {"0": 8, "1": 4}})
    assert slices == [OffsetSlice("orders", 0, 6, 8), OffsetSlice("orders", 1, 4, 4)]
    # Partition 1 had nothing new: it keeps offset 4 in the end JSON.
    assert slices_end(start, slices) == '{"orders":{"0":8,"1":4}}'


def test_the_first_range_and_new_partitions_start_at_their_earliest_offset():
    earliest = {"orders": {"0": 10, "1": 0, "2": 0}}
    latest = {"orders": {"0": 12, "1": 3, "2": 1}}
    assert plan_slices({}, earliest, latest) == [
        OffsetSlice("orders", 0, 10, 12), OffsetSlice("orders", 1, 0, 3), OffsetSlice("orders", 2, 0, 1)]
    start = {"orders": {"0": 12, "1": 3}}  # partition 2 was added after this range's start
    assert plan_slices(start, earliest, latest)[2] == OffsetSlice("orders", 2, 0, 1)


def test_the_end_is_the_latest_offset_even_when_the_last_offsets_are_transaction_markers():
    # Offsets 0-1 are messages, 2 a commit marker: the end is 3, past the marker.
    slices = plan_slices({}, {"t": {"0": 0}}, {"t": {"0": 3}})
    assert slices_end({}, slices) == '{"t":{"0":3}}'


def test_max_messages_per_partition_bounds_a_range():
    slices = plan_slices({"t": {"0": 2}}, {}, {"t": {"0": 10}}, 3)
    assert slices == [OffsetSlice("t", 0, 2, 5)] and slices_end({"t": {"0": 2}}, slices) == '{"t":{"0":5}}'


def test_a_start_deleted_by_retention_is_refused_naming_topic_partition_and_offsets():
    with pytest.raises(SourceError) as refused:
        plan_slices({"orders": {"0": 3}}, {"orders": {"0": 7}}, {"orders": {"0": 9}})
    assert str(refused.value) == (
        "Kafka topic 'orders' partition 0: the range starts at offset 3 but the partition now "
        "starts at offset 7; offsets 3..6 were deleted (retention) before they were ingested")


def test_a_start_beyond_the_partitions_end_is_refused():
    with pytest.raises(SourceError, match=r"'orders' partition 1: the range starts at offset 9 but the "
                                          r"partition ends at offset 4"):
        plan_slices({"orders": {"1": 9}}, {}, {"orders": {"1": 4}})


def test_message_values_in_json_are_expanded_into_columns(spark):
    messages = spark.createDataFrame([("orders", 0, 7, 1000, "k1", '{"id": 1, "total": 2.5}')],
                                     MESSAGE_SCHEMA)
    schema = T.StructType([T.StructField("id", T.LongType()),
                           T.StructField("total", T.DoubleType())])
    (row,) = with_values_expanded(messages, schema).collect()
    assert (row.id, row.total, row.kafka_offset, row.key) == (1, 2.5, 7, "k1")
    (raw,) = with_values_expanded(messages, None).collect()
    assert raw.value == '{"id": 1, "total": 2.5}'


def test_offsets_have_a_readable_description_and_back():
    text = '{"orders-v1":{"0":120,"1":98}}'
    assert describe_offsets(text) == "orders-v1/0@120,orders-v1/1@98"
    assert offsets_from_description("orders-v1/0@120,orders-v1/1@98") == text
    assert describe_offsets("{}") == "earliest" and offsets_from_description("earliest") == "{}"
    with pytest.raises(SourceError):
        offsets_from_description("orders")


def test_without_the_extra_a_kafka_source_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "confluent_kafka", None)  # as if not installed: import fails
    source = KafkaSource("localhost:9092", ["orders"])
    with pytest.raises(SourceError, match=r"offset-assets\[kafka\]"):
        source.plan(DataRange(RangeKind.KAFKA_OFFSET, "{}", None))


def test_a_kafka_source_shows_its_secret_settings_redacted():
    source = KafkaSource("broker:9093", ["orders"], consumer_config={
        "security.protocol": "SASL_SSL", "sasl.username": "ingest", "sasl.password": "pw-4711",
        "ssl.key.password": "kp-4712", "sasl.oauthbearer.client.secret": "cs-4713"})
    shown = repr(source)
    assert not any(secret in shown for secret in ("pw-4711", "kp-4712", "cs-4713"))
    assert redacted(source.consumer_config) == {
        "security.protocol": "SASL_SSL", "sasl.username": "ingest", "sasl.password": REDACTED,
        "ssl.key.password": REDACTED, "sasl.oauthbearer.client.secret": REDACTED}
    assert "'sasl.password': '*********(redacted)'" in shown and "'sasl.username': 'ingest'" in shown
    # What the executors' tasks get (inside the function they run) shows them redacted too.
    reading = SliceReading((OffsetSlice("orders", 0, 0, 5),), source.consumer_config, 5.0)
    assert reading.consumer_config["sasl.password"] == "pw-4711"
    assert "pw-4711" not in repr(reading) and "'sasl.password': '*********(redacted)'" in repr(reading)


def test_large_slices_are_cut_into_even_pieces_in_whole_waves_over_the_cores():
    three = [OffsetSlice("t", p, 0, 333_334 if p == 0 else 333_333) for p in range(3)]
    pieces = task_pieces(three, 2)
    # Three partitions on two cores: six halves, three full waves, not two tasks then one.
    assert [(s.partition, s.start, s.stop) for s in pieces] == [
        (0, 0, 166_667), (0, 166_667, 333_334), (1, 0, 166_666), (1, 166_666, 333_333),
        (2, 0, 166_666), (2, 166_666, 333_333)]
    backlog = task_pieces([OffsetSlice("t", p, 0, 1_666_667) for p in range(3)], 2)
    assert len(backlog) == 12 and max(s.stop - s.start for s in backlog) <= MESSAGES_PER_TASK
    # Small slices stay whole: a piece is never below the minimum.
    increment = [OffsetSlice("t", p, 100_000, 103_334) for p in range(3)]
    assert task_pieces(increment, 2) == tuple(increment)
    assert task_pieces([OffsetSlice("t", 0, 0, 1_000_000)], 1) == (
        OffsetSlice("t", 0, 0, 500_000), OffsetSlice("t", 0, 500_000, 1_000_000))
