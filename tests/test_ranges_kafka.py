"""Kafka range reading without a broker: a fake partition reader stands in for the consumer."""

import importlib.util

import pytest
from pyspark.sql import types as T

from offset_assets.ranges.errors import SourceError
from offset_assets.ranges.kafka import (
    KafkaMessage,
    KafkaSource,
    describe_offsets,
    messages_frame,
    offsets_from_description,
    read_range_messages,
)
from offset_assets.ranges.planners import DataRange, RangeKind


class FakeTopic:
    """Messages per (topic, partition) at given offsets; gaps are compacted/marker offsets."""

    def __init__(self, log: dict[tuple[str, int], dict[int, str]]) -> None:
        self.log = log
        self.reads: list[tuple[str, int, int, int]] = []

    def read(self, topic, partition, start, stop):
        self.reads.append((topic, partition, start, stop))
        for offset, value in sorted(self.log.get((topic, partition), {}).items()):
            if start <= offset < stop:
                yield KafkaMessage(topic, partition, offset, None, value)


def test_range_reads_from_committed_offsets_to_the_high_watermark():
    fake = FakeTopic({("orders", 0): {5: "a", 6: "b", 7: "c"}, ("orders", 1): {3: "x"}})
    start = {"orders": {"0": 6, "1": 4}}
    latest = {"orders": {"0": 8, "1": 4}}
    messages, end = read_range_messages(fake, start, {}, latest)
    assert [(m.partition, m.offset) for m in messages] == [(0, 6), (0, 7)]
    # Partition 1 had nothing new: it keeps offset 4 in the end JSON.
    assert end == '{"orders":{"0":8,"1":4}}'


def test_first_range_starts_at_earliest_and_new_partitions_join():
    fake = FakeTopic({("orders", 0): {10: "a", 11: "b"}, ("orders", 2): {0: "n"}})
    earliest = {"orders": {"0": 10, "2": 0}}
    latest = {"orders": {"0": 12, "2": 1}}
    messages, end = read_range_messages(fake, {}, earliest, latest)
    assert [(m.partition, m.offset) for m in messages] == [(0, 10), (0, 11), (2, 0)]
    assert end == '{"orders":{"0":12,"2":1}}'


def test_end_is_consumed_plus_one_when_the_last_offsets_are_not_messages():
    fake = FakeTopic({("t", 0): {0: "a", 1: "b"}})  # offset 2 is a transaction marker
    messages, end = read_range_messages(fake, {}, {}, {"t": {"0": 3}})
    assert len(messages) == 2 and end == '{"t":{"0":2}}'


def test_max_messages_per_partition_bounds_a_range():
    fake = FakeTopic({("t", 0): {i: str(i) for i in range(10)}})
    messages, end = read_range_messages(fake, {"t": {"0": 2}}, {}, {"t": {"0": 10}}, 3)
    assert [m.offset for m in messages] == [2, 3, 4] and end == '{"t":{"0":5}}'


def test_messages_become_rows_with_json_values_expanded(spark):
    messages = [KafkaMessage("orders", 0, 7, "k1", '{"id": 1, "total": 2.5}', 1000)]
    schema = T.StructType([T.StructField("id", T.LongType()),
                           T.StructField("total", T.DoubleType())])
    (row,) = messages_frame(spark, messages, schema).collect()
    assert (row.id, row.total, row.kafka_offset, row.key) == (1, 2.5, 7, "k1")
    (raw,) = messages_frame(spark, messages, None).collect()
    assert raw.value == '{"id": 1, "total": 2.5}'


def test_offsets_have_a_readable_description_and_back():
    text = '{"orders-v1":{"0":120,"1":98}}'
    assert describe_offsets(text) == "orders-v1/0@120,orders-v1/1@98"
    assert offsets_from_description("orders-v1/0@120,orders-v1/1@98") == text
    assert describe_offsets("{}") == "earliest" and offsets_from_description("earliest") == "{}"
    with pytest.raises(SourceError):
        offsets_from_description("orders")


@pytest.mark.skipif(importlib.util.find_spec("confluent_kafka") is not None,
                    reason="confluent-kafka is installed")
def test_without_the_extra_a_kafka_source_says_what_to_install(spark):
    source = KafkaSource("localhost:9092", ["orders"])
    with pytest.raises(SourceError, match=r"offset-assets\[kafka\]"):
        source.read_range(spark, DataRange(RangeKind.KAFKA_OFFSET, "{}", None))
