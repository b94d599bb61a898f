"""Kafka topics as a range source (optional extra: `pip install offset-assets[kafka]`).

A Kafka range starts at the committed end offsets of the previous range (Spark-style
JSON, see planners) and, per partition, ends at the last stable offset seen when the
range first ran (capped by `max_messages_per_partition`): the next offset to read, which
lies past any transaction markers and aborted messages before it. That end is recorded
in job_log when the range is claimed, before a message is read (`range_end`), and every
later run of the range reads exactly to it (`plan_fixed_slices`). Offsets live in
job_log, committed with the data; the consumer group's own commits are not used, so a
range is replayed exactly when its data did not commit.

The driver only plans: it reads the partitions' offsets and turns the range into one
`OffsetSlice` per topic-partition. The executors read the slices (`kafka_read.py`), in
read-committed mode, once per range: the range's count and its write read the executors'
copy. `confluent_kafka` is imported only when a broker is contacted.

`consumer_config` may hold secrets (`sasl.password`, `ssl.key.password`): they reach
the executors outside the query's plan, and the source's repr shows them redacted.

What the messages mean, with `value_schema` (`kafka_message_rows.py`):
- the order of a key's messages is its partition's offsets: of several messages of one
  key in a range, the last gives the key's state (`order_by` declares a value column
  that orders them across partitions instead);
- a message with a key and a null value is a tombstone: it deletes its key (`sys_op` 1),
  whose columns come from the message key (`message_key`); `tombstones=False` skips
  null values instead;
- a value that does not fit `value_schema` (`"price": "abc"` for a double) is never read
  as a null: it marks its message (`MALFORMED`), and the job fails or quarantines it.
  A JSON null, or a missing field, is a null.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import types as T

from offset_assets.ranges.errors import SourceError
from offset_assets.ranges.planners import DataRange, kafka_offsets_json, parse_kafka_offsets
from offset_assets.ranges.sources.batch import MALFORMED, SourceBatch
from offset_assets.ranges.sources.kafka_message_rows import with_values_expanded
from offset_assets.ranges.sources.kafka_read import (
    MESSAGE_SCHEMA,
    READ_SETTINGS,
    OffsetSlice,
    confluent,
    redacted,
    slices_frame,
)
from offset_assets.ranges.sources.slice_tasks import read_once
from offset_assets.versioned.layout import SYS_OP
from offset_assets.versioned.writes import StateOrder

Offsets = dict[str, dict[str, int]]
# How a range's messages are ordered, without a declared `order_by`: offsets, within a
# partition, where no two messages share one.
OFFSET_ORDER = StateOrder("kafka_offset", within="kafka_partition", unique=True)


def plan_slices(
    start: Mapping[str, Mapping[str, int]],
    earliest: Mapping[str, Mapping[str, int]],
    latest: Mapping[str, Mapping[str, int]],
    max_messages_per_partition: int | None = None,
) -> list[OffsetSlice]:
    """One slice per partition of `latest`: from the range start (a partition the start
    does not list, one added since, from its earliest offset) to its latest offset.

    A start the broker no longer holds (retention deleted it) or does not hold yet (the
    topic was recreated) is an error: reading on from elsewhere would lose or repeat
    messages without a word."""
    slices = []
    for topic, partitions in sorted(latest.items()):
        for partition, high in sorted(partitions.items(), key=lambda kv: int(kv[0])):
            low = earliest.get(topic, {}).get(partition, 0)
            begin = start.get(topic, {}).get(partition)
            if begin is None:
                begin = low
            elif begin < low:
                raise SourceError(
                    f"Kafka topic {topic!r} partition {partition}: the range starts at offset "
                    f"{begin} but the partition now starts at offset {low}; offsets {begin}..{low - 1} "
                    f"were deleted (retention) before they were ingested"
                )
            elif begin > high:
                raise SourceError(
                    f"Kafka topic {topic!r} partition {partition}: the range starts at offset "
                    f"{begin} but the partition ends at offset {high} (was the topic recreated?)"
                )
            stop = int(high)
            if max_messages_per_partition is not None:
                stop = min(stop, begin + max_messages_per_partition)
            slices.append(OffsetSlice(topic, int(partition), int(begin), stop))
    return slices


def plan_fixed_slices(
    start: Mapping[str, Mapping[str, int]],
    end: Mapping[str, Mapping[str, int]],
    earliest: Mapping[str, Mapping[str, int]],
    latest: Mapping[str, Mapping[str, int]],
) -> list[OffsetSlice]:
    """One slice per partition of `end`, a range's recorded end: from the range start (a
    partition the start does not list, from its earliest offset) to that end, whatever
    the partitions hold now. Partitions added since are no part of the range.

    Offsets of the range the broker no longer holds (retention) or does not hold (the
    topic was recreated) are an error, as in `plan_slices`."""
    slices = []
    for topic, partitions in sorted(end.items()):
        for partition, stop in sorted(partitions.items(), key=lambda kv: int(kv[0])):
            where = f"Kafka topic {topic!r} partition {partition}"
            low = earliest.get(topic, {}).get(partition)
            high = latest.get(topic, {}).get(partition)
            if low is None or high is None:
                raise SourceError(f"{where}: the range reads it up to offset {stop}, but the topic "
                                  "has no such partition now (was the topic recreated?)")
            begin = start.get(topic, {}).get(partition)
            if begin is None and low > stop:
                raise SourceError(
                    f"{where}: the range reads it from its earliest offset up to offset {stop} but "
                    f"the partition now starts at offset {low}: what the range held of it was "
                    "deleted (retention) before this run"
                )
            begin = low if begin is None else begin
            if begin < low:
                raise SourceError(
                    f"{where}: the range reads offsets {begin}..{stop - 1} but the partition now "
                    f"starts at offset {low}; offsets {begin}..{min(low, stop) - 1} were deleted "
                    "(retention) before this run"
                )
            if stop > high:
                raise SourceError(
                    f"{where}: the range reads it up to offset {stop} but the partition ends at "
                    f"offset {high} (was the topic recreated?)"
                )
            slices.append(OffsetSlice(topic, int(partition), int(begin), int(stop)))
    return slices


def slices_end(start: Mapping[str, Mapping[str, int]], slices: Sequence[OffsetSlice]) -> str:
    """The range end: every slice's stop; partitions the range did not plan keep their
    start (never dropped, or the next range would restart them from the earliest)."""
    end: Offsets = {topic: dict(parts) for topic, parts in start.items()}
    for piece in slices:
        end.setdefault(piece.topic, {})[str(piece.partition)] = piece.stop
    return kafka_offsets_json(end)


@dataclass(frozen=True)
class KafkaSource:
    """Topics of one Kafka cluster, read range by range through confluent-kafka.

    With `value_schema` (JSON values as columns; see the module docstring):
    `message_key` says how a message key maps to the value's columns, for tombstones (a
    key and a null value: a delete of that key): a column name, the key's text is that
    column's value (`"7"` for `event_id` 7); a list of names, the key is a JSON object
    holding them (`{"tenant": "a", "id": 7}`). `tombstones=False` skips messages with a
    null value instead of deleting their key. `order_by`: a column of the value (or
    `kafka_timestamp_ms`) that orders the messages of one key across partitions, where by
    default a partition's offsets order them and a key's different states in several
    partitions of one range refuse it."""

    bootstrap_servers: str
    topics: Sequence[str]
    consumer_config: Mapping[str, Any] = field(default_factory=dict)
    value_schema: T.StructType | None = None
    max_messages_per_partition: int | None = None
    timeout_s: float = 10.0
    message_key: str | Sequence[str] | None = None
    tombstones: bool = True
    order_by: str | None = None
    source_type: str = field(default="kafka", init=False)

    def __post_init__(self) -> None:
        where = f"Kafka source {list(self.topics)}"
        names = self.value_schema.fieldNames() if self.value_schema is not None else []
        if self.message_key is not None:
            if self.value_schema is None:
                raise SourceError(f"{where}: message_key maps the key to value_schema's columns; give value_schema")
            key_columns = [self.message_key] if isinstance(self.message_key, str) else list(self.message_key)
            unknown = [c for c in key_columns if c not in names]
            if unknown or not key_columns:
                raise SourceError(f"{where}: message_key {self.message_key!r} names no column(s) of "
                                  f"value_schema ({names})")
        if self.order_by is not None:
            types = {f.name: f.dataType for f in [*MESSAGE_SCHEMA.fields, *(self.value_schema or [])]}
            if self.order_by not in types:
                raise SourceError(f"{where}: order_by {self.order_by!r} is not a column of value_schema "
                                  f"or of the message ({sorted(types)})")
            if isinstance(types[self.order_by], T.StringType | T.BinaryType | T.BooleanType):
                raise SourceError(f"{where}: order_by column {self.order_by!r} is "
                                  f"{types[self.order_by].simpleString()}; a number, a date or a timestamp orders rows")

    def __repr__(self) -> str:
        return (f"KafkaSource(bootstrap_servers={self.bootstrap_servers!r}, topics={list(self.topics)!r}, "
                f"consumer_config={redacted(self.consumer_config)!r}, value_schema={self.value_schema!r}, "
                f"max_messages_per_partition={self.max_messages_per_partition!r}, timeout_s={self.timeout_s!r}, "
                f"message_key={self.message_key!r}, tombstones={self.tombstones!r}, order_by={self.order_by!r})")

    def _config(self) -> dict[str, Any]:
        """The consumers' settings, the driver's and the executors' (strings, numbers and
        booleans: a callback would not reach the executors' consumers)."""
        config = {"bootstrap.servers": self.bootstrap_servers, "group.id": "offset-assets",
                  **self.consumer_config, **READ_SETTINGS}
        try:
            json.dumps(config)
        except TypeError as exc:
            raise SourceError(
                f"Kafka at {self.bootstrap_servers}: consumer_config values must be strings, "
                f"numbers or booleans ({exc})"
            ) from None
        return config

    def watermarks(self) -> tuple[Offsets, Offsets]:
        """(earliest, latest) offsets of every partition of the topics, now. Latest is the
        last stable offset (read-committed): an open transaction's messages wait."""
        kafka = confluent()
        consumer = kafka.Consumer(self._config())
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
            raise SourceError(self._broker_error(kafka, exc)) from None
        finally:
            consumer.close()
        return earliest, latest

    def _broker_error(self, kafka: Any, exc: Exception) -> str:
        """What went wrong asking the brokers for the topics' offsets, in one line: a
        broker that refused or never answered says so, with librdkafka's own words."""
        error = exc.args[0] if exc.args and isinstance(exc.args[0], kafka.KafkaError) else None
        detail = error.str() if error is not None else str(exc)
        where = f"Kafka at {self.bootstrap_servers} (topics {list(self.topics)})"
        if error is not None and error.code() in (kafka.KafkaError._TRANSPORT, kafka.KafkaError._TIMED_OUT):
            return f"{where}: no broker answered within {self.timeout_s:g} s ({detail})"
        return f"{where}: {detail}"

    def latest_offsets(self) -> Offsets:
        return self.watermarks()[1]

    def plan(self, data_range: DataRange) -> tuple[list[OffsetSlice], str]:
        """The range's slices and its end. A range with an end (recorded when it first
        ran) is read to exactly that end. Without one (the head range, never run), the
        end is the partitions' offsets now: at most the planner's `max_size` and this
        source's `max_messages_per_partition` offsets of each partition, the smaller of
        the two."""
        start = parse_kafka_offsets(data_range.start)
        if data_range.end is not None:
            slices = plan_fixed_slices(start, parse_kafka_offsets(data_range.end), *self.watermarks())
            return slices, slices_end(start, slices)
        caps = [c for c in (data_range.max_size, self.max_messages_per_partition) if c is not None]
        slices = plan_slices(start, *self.watermarks(), min(caps, default=None))
        return slices, slices_end(start, slices)

    def range_end(self, data_range: DataRange) -> str:
        """The end of `data_range`, decided now when it has none (see `plan`): what the
        ingestion records in job_log before a message is read."""
        return data_range.end if data_range.end is not None else self.plan(data_range)[1]

    def read_range(self, spark: SparkSession, data_range: DataRange) -> SourceBatch:
        """The range's messages, read from the brokers now (once: `slice_tasks.read_once`)
        and counted as they were read (transaction markers and aborted messages are not
        rows), with their tombstones and malformed values (`with_values_expanded`)."""
        slices, end = self.plan(data_range)
        order = StateOrder(self.order_by) if self.order_by is not None else OFFSET_ORDER
        messages = slices_frame(spark, slices, self._config(), self.timeout_s)
        if not any(piece.start < piece.stop for piece in slices):
            return SourceBatch(with_values_expanded(messages, self.value_schema, self.message_key, self.tombstones),
                               end, 0, order=order, malformed=None if self.value_schema is None else 0)
        if self.value_schema is None:
            kept, counts = read_once(messages, {"messages": "count(1)"})
            return SourceBatch(kept, end, counts["messages"], order=order)
        # Every message is counted as read, a skipped null value too: the skip follows the copy.
        expanded = with_values_expanded(messages, self.value_schema, self.message_key, tombstones=True)
        kept, counts = read_once(expanded, {
            "messages": "count(1)",
            "malformed": f"count({MALFORMED})" if self.tombstones else f"count_if({MALFORMED} IS NOT NULL "
                                                                       "AND value IS NOT NULL)",
            "deletes": f"count_if({SYS_OP} = 1 AND {MALFORMED} IS NULL)" if self.tombstones else "0",
        })
        if not self.tombstones:
            kept = kept.where("value IS NOT NULL")
        keyed_by = [self.message_key] if isinstance(self.message_key, str) else list(self.message_key or [])
        return SourceBatch(kept, end, counts["messages"], order=order, deletes=counts["deletes"],
                           deletes_keyed_by=(*keyed_by, *MESSAGE_SCHEMA.fieldNames()), malformed=counts["malformed"])


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
