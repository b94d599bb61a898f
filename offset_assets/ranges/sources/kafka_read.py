"""Reading a Kafka range on the executors, one Spark task per topic-partition offset slice.

The driver plans one slice [start, stop) per topic-partition (`kafka.py`); Spark runs
one task per slice (`slice_tasks.py`, as SQL ranges are read). Each task opens
its own confluent-kafka consumer, assigns its topic-partition at the slice's start and
reads, in read-committed mode, up to the slice's stop. So the messages go from the
brokers to the executors, never through the driver, and a task retried by Spark reads
the same slice again.

A slice's stop is at most the partition's last stable offset when the range was planned:
every offset below it is decided (a committed message, an aborted one, a transaction
marker), so a task reads through to the stop, and the range ends exactly there, at the
end recorded for it. A slice whose last offset is a committed message ends as soon as that
message is read. One whose last offsets are transaction markers (which the consumer never
delivers, though they move its position once fetched, and with it past the aborted
messages before an abort marker) ends as soon as that position reaches the stop: the
markers come in the fetch of the messages before them, and the end-of-partition signal,
which needs one more fetch, is not waited for (a broker gone at that moment failed the
range). Any other sign of the stop ends it too: the end of the partition, a message at or
past the stop.

A range is read from the brokers once (`kafka.py`, `slice_tasks.read_once`): its
messages are counted as they are read (their offsets give no count: transaction markers
and aborted messages occupy offsets too) and kept on the executors' disks, and the write
reads that copy.

The consumer settings may hold secrets (`sasl.password`, `ssl.key.password`): they are
no part of the query's plan but of the function the tasks run (`SliceReading`), which
reaches the executors pickled; reprs show them redacted (`redacted`).
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import TYPE_CHECKING, Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T

from offset_assets.ranges.errors import SourceError
from offset_assets.ranges.sources.slice_tasks import session_parallelism, slice_tasks, whole_waves

if TYPE_CHECKING:
    import pyarrow as pa

# Messages per Arrow record batch a task hands to Spark.
BATCH_ROWS = 10_000
# How long one poll waits for a message before the read looks at its position again.
POLL_S = 0.2

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
    """The committed messages of `piece` as MESSAGE_SCHEMA rows, read to its stop (see
    `read_slice_messages`)."""
    for messages in read_slice_messages(consumer_config, piece, timeout_s):
        for message in messages:
            _kind, timestamp_ms = message.timestamp()
            yield (piece.topic, piece.partition, message.offset(), timestamp_ms,
                   _text(message.key()), _text(message.value()))


def read_slice_messages(consumer_config: Mapping[str, Any], piece: OffsetSlice, timeout_s: float
                        ) -> Iterator[list[Any]]:
    """The committed messages of `piece`, read to its stop, in lists of at most
    `BATCH_ROWS` (one `consume` call each: a call per message cost half the read's CPU).

    The message at the slice's last offset ends it at once, and so does a position past the
    transaction markers at its end: no end-of-partition signal is waited for, so a broker
    that goes away after the slice's last offsets were fetched fails nothing. Raises
    SourceError when the broker gives no message for `timeout_s` before the stop is
    reached (a broker down), when the partition ends before the stop, or on any consumer
    error: a slice is read whole or its task fails."""
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
            fetched = consumer.consume(BATCH_ROWS, min(POLL_S, timeout_s))
            if not fetched:
                # The call served the markers fetched (librdkafka stores their offsets as it
                # serves them, delivering nothing): the position says where the read stands.
                (assigned,) = consumer.position([kafka.TopicPartition(piece.topic, piece.partition)])
                if assigned.offset >= piece.stop:
                    return
                if time.monotonic() > deadline:
                    raise SourceError(
                        f"{where}: nothing read for {timeout_s:g} s at offset {position}{_last(broker_errors)}"
                    )
                continue
            messages, ended = [], False
            for message in fetched:
                error = message.error()
                if error is not None and error.code() == kafka.KafkaError._PARTITION_EOF:
                    if message.offset() < piece.stop:
                        raise SourceError(
                            f"{where}: the partition ends at offset {message.offset()}, before the slice's stop"
                        )
                    ended = True
                    break
                if error is not None:
                    # The consumer's error may be a consequence (a coordinator look-up on a
                    # connection the client dropped); the broker error says why.
                    raise SourceError(f"{where}: at offset {position}: {error.str()}{_last(broker_errors)}")
                if message.offset() >= piece.stop:
                    ended = True
                    break
                messages.append(message)
                position = message.offset() + 1
                if position == piece.stop:
                    ended = True
                    break
            deadline = time.monotonic() + timeout_s
            if messages:
                yield messages
            if ended:
                return
    finally:
        consumer.close()


def _last(broker_errors: list[Any]) -> str:
    """The last error librdkafka reported about the brokers (the consumer's `error_cb`),
    if any; "all brokers are down" only when nothing says why."""
    telling = [e for e in broker_errors if e.name() != "_ALL_BROKERS_DOWN"] or broker_errors
    return f" (last broker error: {telling[-1].str()})" if telling else ""


@dataclass(frozen=True)
class SliceReading:
    """What the tasks of one range need: its slices, the consumer settings and the
    timeout. It reaches the executors inside the pickled function the tasks run, never
    in the query's plan; its repr shows the settings redacted."""

    slices: tuple[OffsetSlice, ...]
    consumer_config: Mapping[str, Any]
    timeout_s: float

    def __repr__(self) -> str:
        return f"SliceReading({list(self.slices)}, {redacted(self.consumer_config)}, {self.timeout_s})"

    def read_slice_number(self, index: int) -> Iterator[pa.RecordBatch]:
        """Slice `index`'s messages as Arrow record batches of at most `BATCH_ROWS` (runs on
        an executor), built column by column from each `consume` call's messages."""
        import pyarrow as pa  # on the executors only
        from pyspark.sql.pandas.types import to_arrow_schema

        schema = to_arrow_schema(MESSAGE_SCHEMA)
        piece = self.slices[index]
        for messages in read_slice_messages(self.consumer_config, piece, self.timeout_s):
            count = len(messages)
            yield pa.RecordBatch.from_arrays([
                pa.array([piece.topic] * count, pa.string()),
                pa.array([piece.partition] * count, pa.int32()),
                pa.array([m.offset() for m in messages], pa.int64()),
                pa.array([m.timestamp()[1] for m in messages], pa.int64()),
                _texts([m.key() for m in messages]),
                _texts([m.value() for m in messages]),
            ], schema=schema)


def _texts(raw: list[bytes | str | None]) -> pa.Array:
    """Keys or values as UTF-8 text: Arrow checks the bytes at once; a batch holding bytes
    that are not UTF-8 is decoded value by value, the faulty bytes replaced (`_text`)."""
    import pyarrow as pa

    try:
        return pa.array(raw, pa.binary()).cast(pa.string())
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return pa.array([_text(value) for value in raw], pa.string())


# A partition's slice is read by several tasks when that keeps the cores busy: pieces of
# at least MIN_MESSAGES_PER_TASK offsets, at most MESSAGES_PER_TASK, in whole waves.
MIN_MESSAGES_PER_TASK = 50_000
MESSAGES_PER_TASK = 500_000


def slices_frame(
    spark: SparkSession, slices: Sequence[OffsetSlice], consumer_config: Mapping[str, Any],
    timeout_s: float, min_per_task: int = MIN_MESSAGES_PER_TASK,
) -> DataFrame:
    """The messages of `slices` as a lazy DataFrame read by the executors (MESSAGE_SCHEMA),
    a task per piece of a slice (`task_pieces`, `slice_tasks.py`). Empty slices are left
    out, and no slice at all is an empty frame."""
    to_read = tuple(s for s in slices if s.start < s.stop)
    if not to_read:
        return spark.createDataFrame([], MESSAGE_SCHEMA)
    pieces = task_pieces(to_read, session_parallelism(spark), min_per_task)
    reading = SliceReading(pieces, dict(consumer_config), timeout_s)
    return slice_tasks(spark, len(pieces), reading.read_slice_number, MESSAGE_SCHEMA)


def task_pieces(slices: Sequence[OffsetSlice], parallelism: int, min_per_task: int = MIN_MESSAGES_PER_TASK,
                max_per_task: int = MESSAGES_PER_TASK) -> tuple[OffsetSlice, ...]:
    """`slices` cut into consecutive offset pieces, one task each: three partitions on two
    cores would run as two tasks, then one with a core idle; six halves keep both busy.
    A piece holds at most `max_per_task` offsets and, when cut, at least `min_per_task`;
    the pieces are as even as the slices allow, in whole waves over `parallelism` cores
    where that is possible. A piece's rows are the slice's between its offsets: the
    order of a key's messages is their offsets', whichever task read them."""
    cores = max(parallelism, 1)
    total = sum(s.stop - s.start for s in slices)
    wanted = whole_waves(max(len(slices), math.ceil(total / max_per_task), min(cores, total // min_per_task)), cores)
    first = None
    for target in range(wanted, wanted + 4 * cores + 1):
        size = max(min_per_task, math.ceil(total / target))
        pieces = tuple(piece for s in slices for piece in _cut(s, _piece_count(s, size, min_per_task)))
        first = first or pieces
        if len(pieces) % cores == 0:
            return pieces
        if size == min_per_task:  # no smaller pieces: the waves stay as they are
            break
    return first


def _piece_count(piece: OffsetSlice, size: int, min_per_task: int) -> int:
    """Pieces of about `size` offsets for `piece`, none below `min_per_task`."""
    length = piece.stop - piece.start
    return max(1, min(math.ceil(length / size), length // min_per_task))


def _cut(piece: OffsetSlice, count: int) -> list[OffsetSlice]:
    """`piece` in `count` consecutive pieces of nearly equal offsets."""
    length = piece.stop - piece.start
    bounds = [piece.start + length * i // count for i in range(count + 1)]
    return [OffsetSlice(piece.topic, piece.partition, low, high) for low, high in pairwise(bounds)]
