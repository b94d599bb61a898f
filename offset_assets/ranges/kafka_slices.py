"""Reading a Kafka range on the executors: a PySpark Python data source whose input
partitions are topic-partition offset slices.

The driver plans one slice [start, stop) per topic-partition (`kafka.py`) and hands the
slices to this data source; each Spark task opens its own confluent-kafka consumer,
assigns its topic-partition at the slice's start and reads, in read-committed mode, up to
the slice's stop. So the messages go from the brokers to the executors, never through
the driver, and a task retried by Spark reads the same slice again.

A slice's stop is at most the partition's last stable offset when the range was planned:
every offset below it is decided (a committed message, an aborted one, a transaction
marker), so a task reads through to the stop, and the range ends exactly there.

A range is read from the brokers once (`read_slices`): its messages are counted as they
are read (their offsets give no count: transaction markers and aborted messages occupy
offsets too) and kept on the executors' disks, and the write reads that copy.

The consumer settings may hold secrets (`sasl.password`, `ssl.key.password`): they are
not a data source option, which Spark keeps in the query's plan, but an attribute of a
data source class made for them (`_source_for`), which reaches the executors pickled;
reprs show them redacted (`redacted`).
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, ClassVar

from pyspark import StorageLevel
from pyspark.sql import DataFrame, Observation, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from offset_assets.ranges.errors import SourceError

FORMAT = "offset_assets_kafka_slices"

MESSAGE_SCHEMA = T.StructType([
    T.StructField("kafka_topic", T.StringType(), False),
    T.StructField("kafka_partition", T.IntegerType(), False),
    T.StructField("kafka_offset", T.LongType(), False),
    T.StructField("kafka_timestamp_ms", T.LongType(), True),
    T.StructField("key", T.StringType(), True),
    T.StructField("value", T.StringType(), True),
])

# What every consumer of a range reads with, whatever the job's consumer_config says:
# committed messages only; the end of a partition reported (a slice ending at the last
# stable offset ends there); a start offset the broker no longer has is an error, not a
# silent jump to the latest or earliest offset; offsets are kept in job_log, not the group.
READ_SETTINGS = {
    "isolation.level": "read_committed",
    "enable.partition.eof": True,
    "auto.offset.reset": "error",
    "enable.auto.commit": False,
}


# Consumer settings whose values are secrets: passwords, keys, tokens (Spark's own
# redaction pattern, plus librdkafka's PEM keys and OAuth/JAAS configurations).
SECRET_SETTING = re.compile(r"(?i)secret|password|token|access[.]?key|key\.pem|oauthbearer\.config|jaas")
REDACTED = "*********(redacted)"


def redacted(consumer_config: Mapping[str, Any]) -> dict[str, Any]:
    """`consumer_config` with the values of secret settings replaced, for messages and reprs."""
    return {key: REDACTED if SECRET_SETTING.search(key) else value
            for key, value in consumer_config.items()}


@dataclass(frozen=True)
class OffsetSlice:
    """Offsets [start, stop) of one topic-partition: one Spark input partition."""

    topic: str
    partition: int
    start: int
    stop: int

    def __str__(self) -> str:
        return f"topic {self.topic!r} partition {self.partition} offsets {self.start}..{self.stop}"


def confluent() -> Any:
    try:
        import confluent_kafka
    except ImportError:
        raise SourceError(
            "Kafka sources need confluent-kafka: pip install 'offset-assets[kafka]'"
        ) from None
    return confluent_kafka


def _text(raw: bytes | str | None) -> str | None:
    return raw.decode("utf-8", errors="replace") if isinstance(raw, bytes) else raw


def read_slice(consumer_config: Mapping[str, Any], piece: OffsetSlice, timeout_s: float) -> Iterator[tuple]:
    """The committed messages of `piece` as MESSAGE_SCHEMA rows, read to its stop.

    Raises SourceError when the broker gives no message for `timeout_s` before the stop
    is reached (a broker down), when the partition ends before the stop, or on any
    consumer error: a slice is read whole or its task fails."""
    if piece.start >= piece.stop:
        return
    kafka = confluent()
    broker_errors: list[Any] = []
    # Broker errors (a refused connection, retried every few ms) go to the error raised
    # at the timeout, not to the executor's stderr.
    consumer = kafka.Consumer({**consumer_config, **READ_SETTINGS, "log_level": 0,
                               "error_cb": broker_errors.append})
    where = f"Kafka at {consumer_config.get('bootstrap.servers')}, {piece}"
    try:
        consumer.assign([kafka.TopicPartition(piece.topic, piece.partition, piece.start)])
        position = piece.start
        deadline = time.monotonic() + timeout_s
        while True:
            message = consumer.poll(min(1.0, timeout_s))
            if message is None:
                if time.monotonic() > deadline:
                    last = f" (last broker error: {broker_errors[-1]})" if broker_errors else ""
                    raise SourceError(
                        f"{where}: nothing read for {timeout_s:g} s at offset {position}{last}"
                    )
                continue
            error = message.error()
            if error is not None and error.code() == kafka.KafkaError._PARTITION_EOF:
                if message.offset() >= piece.stop:
                    return
                raise SourceError(
                    f"{where}: the partition ends at offset {message.offset()}, before the slice's stop"
                )
            if error is not None:
                raise SourceError(f"{where}: at offset {position}: {error.str()}")
            if message.offset() >= piece.stop:
                return
            position = message.offset() + 1
            deadline = time.monotonic() + timeout_s
            _kind, timestamp_ms = message.timestamp()
            yield (piece.topic, piece.partition, message.offset(), timestamp_ms,
                   _text(message.key()), _text(message.value()))
    finally:
        consumer.close()


class KafkaSliceDataSource(DataSource):
    """Options: `slices` (JSON list of OffsetSlice) and `timeout_s`. The consumer settings
    are the class's `consumer_config`, set on a subclass per settings (`_source_for`)."""

    format_name: ClassVar[str] = FORMAT
    consumer_config: ClassVar[Mapping[str, Any]] = {}

    @classmethod
    def name(cls) -> str:
        return cls.format_name

    def schema(self) -> T.StructType:
        return MESSAGE_SCHEMA

    def reader(self, schema: T.StructType) -> DataSourceReader:
        return KafkaSliceReader(
            [OffsetSlice(**s) for s in json.loads(self.options["slices"])],
            self.consumer_config,
            float(self.options["timeout_s"]),
        )


class KafkaSliceReader(DataSourceReader):
    """One input partition per slice; each task reads its slice with a consumer of its own."""

    def __init__(self, slices: Sequence[OffsetSlice], consumer_config: Mapping[str, Any],
                 timeout_s: float) -> None:
        self.slices = list(slices)
        self.consumer_config = dict(consumer_config)
        self.timeout_s = timeout_s

    def __repr__(self) -> str:
        return f"KafkaSliceReader({self.slices}, {redacted(self.consumer_config)}, {self.timeout_s})"

    def partitions(self) -> list[InputPartition]:
        return [InputPartition(piece) for piece in self.slices]

    def read(self, partition: InputPartition) -> Iterator[tuple]:
        yield from read_slice(self.consumer_config, partition.value, self.timeout_s)


_sources: dict[str, type[KafkaSliceDataSource]] = {}
_sources_lock = threading.Lock()


def _source_for(consumer_config: Mapping[str, Any]) -> type[KafkaSliceDataSource]:
    """The data source class holding `consumer_config`, one per distinct settings in this
    process, each under a format name of its own (a numbered suffix, nothing of the
    settings). Made with `type`, not defined in the module, so that it is pickled with
    its attributes rather than by name."""
    key = json.dumps(dict(consumer_config), sort_keys=True)
    with _sources_lock:
        if key not in _sources:
            name = f"{FORMAT}_{len(_sources) + 1}"
            _sources[key] = type(name, (KafkaSliceDataSource,), {
                "__module__": __name__, "__doc__": KafkaSliceDataSource.__doc__,
                "format_name": name, "consumer_config": dict(consumer_config),
            })
        return _sources[key]


def slices_frame(
    spark: SparkSession, slices: Sequence[OffsetSlice], consumer_config: Mapping[str, Any],
    timeout_s: float,
) -> DataFrame:
    """The messages of `slices` as a lazy DataFrame read by the executors (MESSAGE_SCHEMA);
    empty slices are left out, and no slice at all is an empty frame."""
    to_read = [s for s in slices if s.start < s.stop]
    if not to_read:
        return spark.createDataFrame([], MESSAGE_SCHEMA)
    source = _source_for(consumer_config)
    spark.dataSource.register(source)
    return (
        spark.read.format(source.name())
        .option("slices", json.dumps([asdict(s) for s in to_read]))
        .option("timeout_s", str(timeout_s))
        .load()
    )


def read_slices(
    spark: SparkSession, slices: Sequence[OffsetSlice], consumer_config: Mapping[str, Any],
    timeout_s: float,
) -> tuple[DataFrame, int]:
    """The messages of `slices`, read from the brokers now, once, and their number.

    One Spark job reads the slices, counts the messages as they pass (an observed
    metric; over Spark Connect, a second job counts the copy) and keeps them on the
    executors' disks (a local checkpoint: disk only, as a range may not fit in memory).
    The frame returned reads that copy, so the write that follows does not go back to
    the brokers. A lost executor loses its part of the copy: the range then fails and
    its retry reads the slices again. The copy is dropped once the frame is
    garbage-collected (Spark's context cleaner)."""
    messages = slices_frame(spark, slices, consumer_config, timeout_s)
    if not any(s.start < s.stop for s in slices):
        return messages, 0
    read = Observation()
    kept = messages.observe(read, F.count(F.lit(1)).alias("messages")).localCheckpoint(
        eager=True, storageLevel=StorageLevel.DISK_ONLY)
    observed = read.get.get("messages")
    # A Spark Connect checkpoint reports no observed metric: the copy is counted instead
    # (one more job, reading the executors' copy, not the brokers).
    return kept, int(observed) if observed is not None else kept.count()
