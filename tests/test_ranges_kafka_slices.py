"""Where a Kafka slice's read ends, against a real Kafka-protocol broker (no Spark: one
slice read as an executor's task reads it, `kafka_slices.read_slice`).

A slice that has read the message at its last offset ends there, without waiting for the
end-of-partition signal: that signal needs one more fetch, and a broker gone at that
moment failed the whole range. The tests' consumers postpone every fetch for a minute
once a kilobyte of messages waits in their queue (`fetch.queue.backoff.ms`), and their
messages are a kilobyte each: a read that waited for the signal would time out, as it did
when the broker went away.

The threshold is one of size, not of count (`queued.min.messages`): the queue also holds
the version barrier librdkafka puts there when a partition is assigned, an operation of
no size. Counted, it postponed the first fetch itself whenever the fetcher decided before
the consumer served the barrier, as on a loaded CI machine."""

from __future__ import annotations

from offset_assets.ranges.sources.kafka_read import OffsetSlice, read_slice

# A read that waited for a second fetch after a kilobyte arrived would take a minute,
# three times the timeout. The timeout is not shorter since a consumer's first fetch
# (connection, metadata, fetch) took over 2 s on a loaded CI machine.
TIMEOUT_S = 20.0
POSTPONED = {"queued.max.messages.kbytes": 1, "fetch.queue.backoff.ms": 60_000}
ONE_FETCH = {"max.partition.fetch.bytes": 1, **POSTPONED}


def kib(letter: str) -> str:
    """A message value of one kilobyte: one such message in the queue postpones the next fetch."""
    return letter * 1024


def read(broker, topic, start, stop, **settings) -> list[tuple[int, str]]:
    config = {"bootstrap.servers": broker.bootstrap_servers, "group.id": "slices", **settings}
    return [(row[2], row[5]) for row in read_slice(config, OffsetSlice(topic, 0, start, stop), TIMEOUT_S)]


def test_a_slice_ending_at_a_committed_message_ends_with_it_without_waiting_for_the_partition_end(
        kafka_broker):
    topic = kafka_broker.new_topic("last")
    kafka_broker.produce(topic, [kib("a"), kib("b"), kib("c")])
    assert read(kafka_broker, topic, 0, 3, **ONE_FETCH) == [(0, kib("a")), (1, kib("b")), (2, kib("c"))]
    kafka_broker.transaction(topic, [kib("d")])  # 3, commit marker 4
    assert read(kafka_broker, topic, 3, 4, **ONE_FETCH) == [(3, kib("d"))]  # the marker is past the stop


def test_a_slice_whose_last_offsets_are_markers_or_aborted_messages_ends_where_they_end(
        kafka_broker):
    """Offsets the consumer never delivers: the end of the partition, or the first message
    at or past the stop, tells the slice is whole."""
    topic = kafka_broker.new_topic("markers")
    kafka_broker.transaction(topic, ["a", "b"])               # 0, 1, commit marker 2
    kafka_broker.transaction(topic, ["x"], commit=False)      # 3, abort marker 4
    assert read(kafka_broker, topic, 0, 3) == [(0, "a"), (1, "b")]
    assert read(kafka_broker, topic, 0, 5) == [(0, "a"), (1, "b")]
    assert read(kafka_broker, topic, 2, 5) == []
    kafka_broker.produce(topic, ["c"])                        # 5: a slice that stops before it
    assert read(kafka_broker, topic, 0, 5) == [(0, "a"), (1, "b")]


def test_a_slice_whose_last_offsets_are_markers_ends_at_its_stop_without_the_end_of_partition_fetch(kafka_broker):
    """The markers come with the messages' fetch; the end-of-partition signal needs one
    more, which these consumers postpone for a minute (a broker gone at that moment): the
    slice ends once its position, moved past the markers, reaches the stop."""
    topic = kafka_broker.new_topic("marker-end")
    kafka_broker.transaction(topic, [kib("a"), kib("b")])          # 0, 1, commit marker 2
    kafka_broker.transaction(topic, [kib("x")], commit=False)      # 3, abort marker 4
    assert read(kafka_broker, topic, 0, 5, **POSTPONED) == [(0, kib("a")), (1, kib("b"))]
    assert read(kafka_broker, topic, 0, 3, **POSTPONED) == [(0, kib("a")), (1, kib("b"))]
    assert read(kafka_broker, topic, 2, 5, **POSTPONED) == []


def test_a_fetch_the_client_refuses_fails_the_slice_naming_the_brokers_reason_and_the_setting(kafka_broker):
    """A fetch response larger than the client's `receive.message.max.bytes` drops the
    connection; what the consumer then reports is a consequence (a coordinator look-up
    that failed on it), so the error adds the broker error that says why."""
    import pytest

    from offset_assets.ranges.errors import SourceError

    topic = kafka_broker.new_topic("oversized")
    kafka_broker.produce(topic, [f"{i:03d}" + "x" * 200 for i in range(50)])  # 10 KB, one response
    small = {"receive.message.max.bytes": 2000, "message.max.bytes": 1000, "fetch.max.bytes": 1000,
             "max.partition.fetch.bytes": 500}

    with pytest.raises(SourceError, match=r"partition 0 offsets 0\.\.50: .*\(last broker error: .*Invalid response "
                                          r"size \d+ \(0\.\.2000\): increase receive\.message\.max\.bytes"):
        read(kafka_broker, topic, 0, 50, **small)
