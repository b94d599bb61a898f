"""Transactional reads across several Kafka ranges, with aborted transactions between and
at their bounds: each range ingests what a read-committed consumer gets of its offsets,
and nothing of an aborted transaction (a real Kafka-protocol broker, real Spark).

The test broker's limit (noida-db 0.2.3): a read-committed consumer that starts after an
aborted transaction of a producer gets none of that producer's later committed messages
(abort at offset 0, commits at 2 and 4: reading from offset 2 returns nothing). A broker
that honours read-committed returns them. So every range is checked against what the
broker returns to a plain confluent-kafka consumer over the same offsets, and the range
that meets the limit says so.
"""

from __future__ import annotations

from pyspark.sql import types as T

from offset_assets.control_plane import connect
from offset_assets.ranges.ingestion import IngestionJob, RangeIngestion, TargetTable
from offset_assets.ranges.planners import KafkaOffsetPlanner, parse_kafka_offsets
from offset_assets.ranges.sources.kafka import KafkaSource
from offset_assets.versioned.table import VersionedTable

MESSAGES = T.StructType([
    T.StructField("kafka_partition", T.IntegerType(), False),
    T.StructField("kafka_offset", T.LongType(), False),
    T.StructField("value", T.StringType(), True),
])
KEY = ["kafka_partition", "kafka_offset"]


def test_ranges_with_aborted_transactions_between_them_ingest_exactly_what_read_committed_returns(
        kafka_broker, spark, sqlite_url, warehouse):
    topic = kafka_broker.new_topic("ledger")
    plane = connect(sqlite_url)
    job = IngestionJob("ledger", KafkaSource(kafka_broker.bootstrap_servers, [topic], timeout_s=5.0),
                       KafkaOffsetPlanner(), TargetTable("ledger", KEY, MESSAGES))
    ingestion = RangeIngestion(spark, plane, job, warehouse)
    table = VersionedTable(spark, plane, "ledger", KEY, MESSAGES, warehouse=warehouse)
    ingested: list[tuple[int, str]] = []

    def next_range() -> tuple[int, int, list[tuple[int, str]]]:
        """Run the next range; (start, end, what the broker returns to a plain consumer)."""
        (result,) = ingestion.run_pending()
        start = parse_kafka_offsets(result.data_range.start).get(topic, {}).get("0", 0)
        end = parse_kafka_offsets(result.data_range.end)[topic]["0"]
        plain = kafka_broker.read(topic, 0, start, end)
        rows = sorted((r.kafka_offset, r.value) for r in table.read_actual().collect())
        assert rows == sorted([*ingested, *plain]) and result.rows_read == len(plain)
        ingested.extend(plain)
        return start, end, plain

    kafka_broker.produce(topic, ["a"])                          # 0
    kafka_broker.transaction(topic, ["x", "y"], commit=False)   # 1, 2, abort marker 3
    kafka_broker.transaction(topic, ["b"])                      # 4, commit marker 5
    assert next_range() == (0, 6, [(0, "a"), (4, "b")])

    kafka_broker.transaction(topic, ["z"], commit=False)        # 6, abort marker 7: a range of nothing
    assert next_range() == (6, 8, [])

    kafka_broker.produce(topic, ["c"])                          # 8
    kafka_broker.transaction(topic, ["d"])                      # 9, commit marker 10
    kafka_broker.transaction(topic, ["w"], commit=False)        # 11, abort marker 12
    assert next_range() == (8, 13, [(8, "c"), (9, "d")])

    # One producer: an aborted transaction that ends a range, then commits in the next.
    producer = kafka_broker.transactional_producer()
    producer.send(topic, ["u"], commit=False)                   # 13, abort marker 14
    kafka_broker.produce(topic, ["e"])                          # 15
    assert next_range() == (13, 16, [(15, "e")])
    producer.send(topic, ["v"])                                 # 16, commit marker 17
    producer.send(topic, ["t"])                                 # 18, commit marker 19
    # The broker's limit: a read-committed read starting after that producer's abort gets
    # none of its committed messages; the range gets what the broker returns, no more.
    assert kafka_broker.read(topic, 0, 16, 20, isolation="read_uncommitted") == [(16, "v"), (18, "t")]
    assert next_range() == (16, 20, [])

    assert ingestion.run_pending() == []
    assert sorted(ingested) == [(0, "a"), (4, "b"), (8, "c"), (9, "d"), (15, "e")]



def test_a_partition_read_in_pieces_by_several_tasks_yields_exactly_the_messages_one_task_reads(
        kafka_broker, spark):
    """A large slice is cut into offset pieces that tasks read side by side
    (`kafka_read.task_pieces`); the cuts fall inside an aborted transaction, on markers and
    between a key's messages, and the rows are the same as one task's read of each partition."""
    from confluent_kafka import Consumer, TopicPartition

    from offset_assets.ranges.sources.kafka_read import OffsetSlice, slices_frame, task_pieces

    topic = kafka_broker.new_topic("pieces", partitions=2)
    kafka_broker.send(topic, [(f"k{i % 3}", f"v{i}") for i in range(7)])      # 0-6, keys repeat
    kafka_broker.transaction(topic, ["x1", "x2"], commit=False)                # 7-8 aborted, marker 9
    kafka_broker.transaction(topic, ["c1", "c2", "c3"])                        # 10-12, marker 13
    kafka_broker.send(topic, [("k1", None), ("k8", "v8")])                     # 14 a tombstone, 15
    kafka_broker.send(topic, [(f"p{i}", f"w{i}") for i in range(5)], partition=1)
    consumer = Consumer({"bootstrap.servers": kafka_broker.bootstrap_servers, "group.id": "watermarks"})
    try:
        ends = [consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in (0, 1)]
    finally:
        consumer.close()
    assert ends == [16, 5]
    slices = [OffsetSlice(topic, 0, 0, 16), OffsetSlice(topic, 1, 0, 5)]
    config = {"bootstrap.servers": kafka_broker.bootstrap_servers, "group.id": "offset-assets",
              "isolation.level": "read_committed", "enable.partition.eof": True,
              "auto.offset.reset": "error", "enable.auto.commit": False}

    def rows(min_per_task: int) -> tuple[int, list[tuple]]:
        frame = slices_frame(spark, slices, config, 20.0, min_per_task=min_per_task)
        read = frame.select("kafka_partition", "kafka_offset", "key", "value").collect()
        return frame.rdd.getNumPartitions(), sorted(tuple(row) for row in read)

    tasks, whole = rows(min_per_task=1_000)
    cut_tasks, cut = rows(min_per_task=3)

    assert tasks == 2
    assert cut_tasks == len(task_pieces(slices, spark.sparkContext.defaultParallelism, min_per_task=3)) > 2
    assert whole == [
        *[(0, i, f"k{i % 3}", f"v{i}") for i in range(7)],
        *[(0, 10 + i, value, value) for i, value in enumerate(["c1", "c2", "c3"])],
        (0, 14, "k1", None), (0, 15, "k8", "v8"),
        *[(1, i, f"p{i}", f"w{i}") for i in range(5)],
    ]
    assert cut == whole
