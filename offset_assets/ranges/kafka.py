"""Kafka topics as a range source (optional extra: `pip install offset-assets[kafka]`).

A Kafka range starts at the committed end offsets of the previous range (Spark-style
JSON, see planners) and ends where this run stopped reading: last consumed offset + 1
per partition, up to the high watermark seen when the run started. Offsets live in
job_log, committed with the data; the consumer group's own commits are not used, so a
range is replayed exactly when its data did not commit.

`confluent_kafka` is imported only when a broker is contacted; everything else here
(the reading loop, the end offsets, the rows) works without it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from offset_assets.ranges.errors import SourceError
from offset_assets.ranges.planners import (
    DataRange,
    kafka_offsets_json,
    kafka_range_end,
    parse_kafka_offsets,
)
from offset_assets.ranges.sources import SourceBatch

Offsets = dict[str, dict[str, int]]

MESSAGE_SCHEMA = T.StructType([
    T.StructField("kafka_topic", T.StringType(), False),
    T.StructField("kafka_partition", T.IntegerType(), False),
    T.StructField("kafka_offset", T.LongType(), False),
    T.StructField("kafka_timestamp_ms", T.LongType(), True),
    T.StructField("key", T.StringType(), True),
    T.StructField("value", T.StringType(), True),
])


@dataclass(frozen=True)
class KafkaMessage:
    topic: str
    partition: int
    offset: int
    key: str | None
    value: str | None
    timestamp_ms: int | None = None


class PartitionReader(Protocol):
    """Reads one partition from `start` up to (not including) `stop`."""

    def read(self, topic: str, partition: int, start: int, stop: int) -> Iterable[KafkaMessage]: ...


def read_range_messages(
    reader: PartitionReader,
    start: Mapping[str, Mapping[str, int]],
    earliest: Mapping[str, Mapping[str, int]],
    latest: Mapping[str, Mapping[str, int]],
    max_messages_per_partition: int | None = None,
) -> tuple[list[KafkaMessage], str]:
    """Messages of every partition from its range start (else earliest) to the high
    watermark seen now, and the range end (consumed + 1; idle partitions keep theirs)."""
    messages: list[KafkaMessage] = []
    consumed: Offsets = {}
    for topic, partitions in sorted(latest.items()):
        for partition, high in sorted(partitions.items(), key=lambda kv: int(kv[0])):
            low = earliest.get(topic, {}).get(partition, 0)
            begin = max(start.get(topic, {}).get(partition, low), low)
            stop = int(high)
            if max_messages_per_partition is not None:
                stop = min(stop, begin + max_messages_per_partition)
            last = None
            for message in reader.read(topic, int(partition), begin, stop):
                messages.append(message)
                last = message.offset
            if last is not None:
                consumed.setdefault(topic, {})[partition] = last
    return messages, kafka_range_end(start, consumed)


def messages_frame(
    spark: SparkSession, messages: Sequence[KafkaMessage], value_schema: T.StructType | None
) -> DataFrame:
    """The messages as rows; with `value_schema`, JSON values expanded into its columns."""
    rows = [(m.topic, m.partition, m.offset, m.timestamp_ms, m.key, m.value) for m in messages]
    df = spark.createDataFrame(rows, MESSAGE_SCHEMA)
    if value_schema is None:
        return df
    parsed = df.withColumn("_value", F.from_json("value", value_schema))
    return parsed.select(
        *[F.col(f"_value.{f.name}").alias(f.name) for f in value_schema.fields],
        *[c for c in MESSAGE_SCHEMA.fieldNames() if c not in value_schema.fieldNames()],
    )


def _confluent() -> Any:
    try:
        import confluent_kafka
    except ImportError:
        raise SourceError(
            "Kafka sources need confluent-kafka: pip install 'offset-assets[kafka]'"
        ) from None
    return confluent_kafka


def _text(raw: bytes | str | None) -> str | None:
    return raw.decode("utf-8", errors="replace") if isinstance(raw, bytes) else raw


@dataclass
class _ConfluentReader:
    consumer: Any
    poll_timeout_s: float

    def read(self, topic: str, partition: int, start: int, stop: int) -> Iterable[KafkaMessage]:
        if start >= stop:
            return
        kafka = _confluent()
        self.consumer.assign([kafka.TopicPartition(topic, partition, start)])
        position = start
        while position < stop:
            message = self.consumer.poll(self.poll_timeout_s)
            if message is None:
                # Offsets up to the watermark may be transaction markers: nothing to read.
                return
            if message.error():
                raise SourceError(
                    f"Kafka {topic}[{partition}] at offset {position}: {message.error()}"
                )
            if message.offset() >= stop:
                return
            position = message.offset() + 1
            _kind, timestamp_ms = message.timestamp()
            yield KafkaMessage(topic, partition, message.offset(), _text(message.key()),
                               _text(message.value()), timestamp_ms)


@dataclass(frozen=True)
class KafkaSource:
    """Topics of one Kafka cluster, read range by range through confluent-kafka."""

    bootstrap_servers: str
    topics: Sequence[str]
    consumer_config: Mapping[str, Any] = field(default_factory=dict)
    value_schema: T.StructType | None = None
    max_messages_per_partition: int | None = None
    timeout_s: float = 10.0
    source_type: str = field(default="kafka", init=False)

    def _consumer(self) -> Any:
        config = {
            "bootstrap.servers": self.bootstrap_servers,
            "group.id": "offset-assets",
            "enable.auto.commit": False,
            "enable.partition.eof": False,
            **self.consumer_config,
        }
        return _confluent().Consumer(config)

    def watermarks(self, consumer: Any | None = None) -> tuple[Offsets, Offsets]:
        """(earliest, latest) offsets of every partition of the topics, now."""
        kafka = _confluent()
        own = consumer is None
        consumer = consumer or self._consumer()
        earliest: Offsets = {}
        latest: Offsets = {}
        try:
            for topic in self.topics:
                metadata = consumer.list_topics(topic, timeout=self.timeout_s)
                if topic not in metadata.topics or metadata.topics[topic].error is not None:
                    raise SourceError(
                        f"Kafka topic {topic!r} not found at {self.bootstrap_servers}"
                    )
                for partition in metadata.topics[topic].partitions:
                    low, high = consumer.get_watermark_offsets(
                        kafka.TopicPartition(topic, partition), timeout=self.timeout_s)
                    earliest.setdefault(topic, {})[str(partition)] = int(low)
                    latest.setdefault(topic, {})[str(partition)] = int(high)
        except kafka.KafkaException as exc:
            raise SourceError(f"Kafka at {self.bootstrap_servers}: {exc}") from None
        finally:
            if own:
                consumer.close()
        return earliest, latest

    def latest_offsets(self) -> Offsets:
        return self.watermarks()[1]

    def read_range(self, spark: SparkSession, data_range: DataRange) -> SourceBatch:
        start = parse_kafka_offsets(data_range.start)
        consumer = self._consumer()
        try:
            earliest, latest = self.watermarks(consumer)
            reader = _ConfluentReader(consumer, poll_timeout_s=self.timeout_s)
            messages, end = read_range_messages(
                reader, start, earliest, latest, self.max_messages_per_partition)
        finally:
            consumer.close()
        return SourceBatch(messages_frame(spark, messages, self.value_schema), end, len(messages))


def describe_offsets(text: str) -> str:
    """Offsets JSON as `topic/partition@offset,...` (`earliest` when empty), for keys and logs."""
    offsets = parse_kafka_offsets(text)
    parts = [f"{t}/{p}@{o}" for t, ps in offsets.items() for p, o in ps.items()]
    return ",".join(parts) or "earliest"


def offsets_from_description(text: str) -> str:
    """Inverse of `describe_offsets`."""
    offsets: Offsets = {}
    if text != "earliest":
        for item in text.split(","):
            topic_partition, _, offset = item.rpartition("@")
            topic, _, partition = topic_partition.rpartition("/")
            if not topic or not partition.isdigit() or not offset.lstrip("-").isdigit():
                raise SourceError(f"{text!r} is not topic/partition@offset,...")
            offsets.setdefault(topic, {})[partition] = int(offset)
    return kafka_offsets_json(offsets)
