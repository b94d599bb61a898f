"""What a keyed Kafka topic sends, ingested against a real broker (tests/kafka_broker.py):
several messages of one key in a range (the last by offset is the key's state),
tombstones (a key and a null value delete the key), and values that do not fit
`value_schema` (never a silent null: the range fails naming the message, or the message
goes to the job's quarantine table in the range's commit)."""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass

import pytest
from pyspark.sql import functions as F
from pyspark.sql import types as T

from offset_assets.control_plane import connect
from offset_assets.control_plane.delta_catalog import DeltaCatalog
from offset_assets.control_plane.job_log import JobLog
from offset_assets.ranges.claims import ClaimPolicy
from offset_assets.ranges.errors import IngestionError
from offset_assets.ranges.ingestion import QUARANTINE_KEY, QUARANTINE_SCHEMA, IngestionJob, RangeIngestion, TargetTable
from offset_assets.ranges.planners import DataRange, KafkaOffsetPlanner, RangeKind
from offset_assets.ranges.sources.kafka import KafkaSource
from offset_assets.spark_jobs import count_spark_jobs
from offset_assets.versioned.errors import ConflictingStatesError, UnorderedStatesError
from offset_assets.versioned.table import VersionedTable

EVENT = T.StructType([
    T.StructField("event_id", T.LongType(), False),
    T.StructField("kind", T.StringType(), True),
    T.StructField("amount", T.DoubleType(), True),
])
# What the topic's values hold: the event, its user and when it happened (ms).
EVENT_VALUE = T.StructType([*EVENT.fields, T.StructField("user_id", T.LongType(), True),
                            T.StructField("ts", T.LongType(), True)])


def event(event_id: int, kind: str | None = None, amount: float | None = None, **more) -> tuple[str, str]:
    """A message keyed by its event id, its value the event as JSON."""
    return str(event_id), json.dumps({"event_id": event_id, "kind": kind, "amount": amount, **more})


def tombstone(event_id: int) -> tuple[str, None]:
    return str(event_id), None


def events_job(kafka_broker, topic: str, transform=None, name: str = "events", **source) -> IngestionJob:
    settings = {"value_schema": EVENT_VALUE, "message_key": "event_id", "timeout_s": 5.0, **source}
    policy = {k: settings.pop(k) for k in ("on_malformed",) if k in settings}
    return IngestionJob(name, KafkaSource(kafka_broker.bootstrap_servers, [topic], **settings), KafkaOffsetPlanner(),
                        TargetTable("events", ["event_id"], EVENT), transform=transform, **policy)


def events(spark, plane, warehouse) -> list[tuple]:
    table = VersionedTable(spark, plane, "events", ["event_id"], EVENT, warehouse=warehouse)
    return sorted(tuple(r) for r in table.read_actual().select(*EVENT.fieldNames()).collect())


def quarantined(spark, plane, warehouse, name: str = "events__quarantine") -> list[tuple]:
    table = VersionedTable(spark, plane, name, QUARANTINE_KEY, QUARANTINE_SCHEMA, warehouse=warehouse)
    return sorted(tuple(r) for r in table.read_actual().select(*QUARANTINE_SCHEMA.fieldNames()).collect())


def logged(plane, job: str = "events") -> list[tuple]:
    return [(r.status, r.attempt) for r in JobLog(plane).history(job)]


def test_several_messages_of_one_key_in_a_range_leave_the_last_by_offset_and_are_counted(
        kafka_broker, spark, sqlite_url, warehouse):
    topic = kafka_broker.new_topic("dup", partitions=1)
    # Event 7 sent twice (a view, then a purchase), event 8 once, then 7 a third time.
    kafka_broker.send(topic, [event(7, "view"), event(7, "purchase", 12.5), event(8, "view"), event(7, "refund", -1.0)])
    plane = connect(sqlite_url)
    ingestion = RangeIngestion(spark, plane, events_job(kafka_broker, topic), warehouse)

    (first,) = ingestion.run_pending()
    assert events(spark, plane, warehouse) == [(7, "refund", -1.0), (8, "view", None)]
    assert (first.rows_read, first.keys_written, first.superseded_in_range, first.rows_upserted) == (4, 2, 2, 2)
    (row,) = JobLog(plane).history("events")
    write = JobLog(plane).steps(row.job_id)[1]
    assert json.loads(write.output)["superseded_in_range"] == 2 and json.loads(write.output)["keys_written"] == 2

    # The next range: 8 sent again as it is (no version) and then changed; 7 unchanged twice.
    kafka_broker.send(topic, [event(8, "view"), event(7, "refund", -1.0), event(8, "purchase", 3.0),
                              event(7, "refund", -1.0)])
    (second,) = ingestion.run_pending()
    assert events(spark, plane, warehouse) == [(7, "refund", -1.0), (8, "purchase", 3.0)]
    assert (second.keys_written, second.superseded_in_range, second.rows_upserted, second.rows_unchanged) == (
        2, 2, 1, 1)


def test_a_range_with_several_messages_of_a_key_is_reduced_in_the_spark_jobs_of_a_range_without(
        kafka_broker, spark, sqlite_url, warehouse):
    plane = connect(sqlite_url)
    jobs = []
    for name, messages in [("distinct", [event(i, "view") for i in range(40)]),
                           ("repeated", [event(i % 10, f"k{i}") for i in range(40)])]:
        topic = kafka_broker.new_topic(name, partitions=1)
        kafka_broker.send(topic, messages)
        job = events_job(kafka_broker, topic, name=name)
        job = IngestionJob(name, job.source, job.planner, TargetTable(name, ["event_id"], EVENT))
        with count_spark_jobs(spark) as counted:
            (result,) = RangeIngestion(spark, plane, job, warehouse).run_pending()
        jobs.append((result.keys_written, result.superseded_in_range, counted.count))
    # One job reads the range from the broker and counts it, one classifies and writes it.
    assert jobs == [(40, 0, 2), (10, 30, 2)]


def test_a_transform_keeping_the_offset_columns_reduces_its_rows_and_one_dropping_them_is_told_to_keep_them(
        kafka_broker, spark, sqlite_url, warehouse):
    topic = kafka_broker.new_topic("shaped", partitions=1)
    kafka_broker.send(topic, [event(7, "view"), event(7, "purchase", 12.5)])
    plane = connect(sqlite_url)

    def shaped(rows):  # the target's columns only: the order is lost
        return rows.select("event_id", F.upper("kind").alias("kind"), "amount")

    with pytest.raises(IngestionError) as refused:
        RangeIngestion(spark, plane, events_job(kafka_broker, topic, shaped), warehouse).run_pending()
    assert isinstance(refused.value.__cause__.__cause__, ConflictingStatesError)
    assert ("SeveralStatesError: table 'events': different states of key(s) [{'event_id': 7}] in one write to delta "
            "1 (1 key(s) in all); nothing written; the transform drops ['kafka_offset', 'kafka_partition'], which "
            "order the rows of a key: keep them in its output") in str(refused.value)
    assert logged(plane) == [("FAILURE", 1)]

    def keeping_the_order(rows):
        return rows.select("event_id", F.upper("kind").alias("kind"), "amount", "kafka_partition", "kafka_offset")

    # The failed range is retried first, now reduced on the transform's output.
    (retried,) = RangeIngestion(spark, plane, events_job(kafka_broker, topic, keeping_the_order),
                                warehouse).run_pending()
    assert (retried.attempt, retried.superseded_in_range) == (2, 1)
    assert events(spark, plane, warehouse) == [(7, "PURCHASE", 12.5)]


def test_one_keys_states_in_two_partitions_are_refused_naming_them_unless_a_declared_column_orders_them(
        kafka_broker, spark, sqlite_url, warehouse):
    topic = kafka_broker.new_topic("spread", partitions=2)
    kafka_broker.send(topic, [event(7, "view", ts=2_000), event(8, "view", ts=1_000)], partition=0)
    kafka_broker.send(topic, [event(7, "purchase", 12.5, ts=1_000), event(8, "view", ts=1_500)], partition=1)
    plane = connect(sqlite_url)

    with pytest.raises(IngestionError) as refused:
        RangeIngestion(spark, plane, events_job(kafka_broker, topic), warehouse).run_pending()
    assert isinstance(refused.value.__cause__.__cause__, UnorderedStatesError)
    # Event 8's one state in both partitions is no conflict; event 7's two states are.
    assert ("different states of key(s) {'event_id': 7} (kafka_partition 0 and 1) in rows of different "
            "'kafka_partition', whose 'kafka_offset' values do not compare") in str(refused.value)
    assert ("'kafka_offset' orders a key's rows within one 'kafka_partition' only: declare "
            "KafkaSource(order_by=<a column that orders them across 'kafka_partition'>)") in str(refused.value)

    # Ordered by the events' own time: the view (ts 2,000) is event 7's last state.
    (retried,) = RangeIngestion(spark, plane, events_job(kafka_broker, topic, order_by="ts"), warehouse).run_pending()
    assert (retried.attempt, retried.keys_written, retried.superseded_in_range) == (2, 2, 2)
    assert events(spark, plane, warehouse) == [(7, "view", None), (8, "view", None)]


def test_a_tombstone_deletes_the_key_its_message_key_names_as_text_or_as_json(
        kafka_broker, spark, sqlite_url, warehouse):
    topic = kafka_broker.new_topic("compacted", partitions=1)
    kafka_broker.send(topic, [event(7, "view"), event(8, "view"), event(9, "view")])
    plane = connect(sqlite_url)
    ingestion = RangeIngestion(spark, plane, events_job(kafka_broker, topic), warehouse)
    ingestion.run_pending()
    # 7 deleted; 8 deleted, then sent again; 10 sent and deleted within the range.
    kafka_broker.send(topic, [tombstone(7), tombstone(8), event(8, "again"), event(10, "new"), tombstone(10)])
    (second,) = ingestion.run_pending()
    assert events(spark, plane, warehouse) == [(8, "again", None), (9, "view", None)]
    assert (second.rows_read, second.rows_deleted, second.rows_upserted, second.rows_unchanged) == (5, 1, 1, 1)
    assert second.superseded_in_range == 2

    # A JSON message key: the columns of a composite key.
    schema = T.StructType([T.StructField("tenant", T.StringType(), False), T.StructField("id", T.LongType(), False),
                           T.StructField("name", T.StringType(), True)])
    keyed = kafka_broker.new_topic("composite", partitions=1)
    kafka_broker.send(keyed, [('{"tenant": "a", "id": 1}', '{"tenant": "a", "id": 1, "name": "x"}'),
                              ('{"tenant": "b", "id": 1}', '{"tenant": "b", "id": 1, "name": "y"}')])
    job = IngestionJob("names", KafkaSource(kafka_broker.bootstrap_servers, [keyed], value_schema=schema,
                                            message_key=["tenant", "id"], timeout_s=5.0),
                       KafkaOffsetPlanner(), TargetTable("names", ["tenant", "id"], schema))
    names = RangeIngestion(spark, plane, job, warehouse)
    names.run_pending()
    kafka_broker.send(keyed, [('{"id": 1, "tenant": "a"}', None)])
    (deleted,) = names.run_pending()
    table = VersionedTable(spark, plane, "names", ["tenant", "id"], schema, warehouse=warehouse)
    assert [tuple(r) for r in table.read_actual().select("tenant", "id", "name").collect()] == [("b", 1, "y")]
    assert deleted.rows_deleted == 1


def test_a_tombstone_whose_key_the_source_does_not_map_fails_the_range_naming_the_options(
        kafka_broker, spark, sqlite_url, warehouse):
    topic = kafka_broker.new_topic("unmapped", partitions=1)
    kafka_broker.send(topic, [event(7, "view"), tombstone(7), event(8, "view")])
    plane = connect(sqlite_url)
    with pytest.raises(IngestionError) as refused:
        RangeIngestion(spark, plane, events_job(kafka_broker, topic, message_key=None), warehouse).run_pending()
    assert str(refused.value).endswith(
        "IngestionError: job 'events': the range holds 1 tombstone(s) (a key, a null value) and the source does not "
        "say which of the target's key column(s) ['event_id'] their message key holds: declare "
        "KafkaSource(message_key=...), or tombstones=False to skip them")
    assert events(spark, plane, warehouse) == []

    # Skipped instead: a null value is no row, and the range reads all three messages.
    (skipped,) = RangeIngestion(spark, plane, events_job(kafka_broker, topic, message_key=None, tombstones=False),
                                warehouse).run_pending()
    assert (skipped.rows_read, skipped.rows_deleted, skipped.keys_written) == (3, 0, 2)
    assert events(spark, plane, warehouse) == [(7, "view", None), (8, "view", None)]


def test_a_transform_that_drops_sys_op_fails_a_range_holding_tombstones(kafka_broker, spark, sqlite_url, warehouse):
    topic = kafka_broker.new_topic("no_sys_op", partitions=1)
    kafka_broker.send(topic, [event(7, "view"), tombstone(7)])
    plane = connect(sqlite_url)

    def without_sys_op(rows):
        return rows.select(*EVENT.fieldNames(), "kafka_partition", "kafka_offset")

    with pytest.raises(IngestionError, match=r"the range holds 1 delete\(s\) \(sys_op 1: Kafka tombstones\) and the "
                                             r"transform's output has no 'sys_op' column: keep it"):
        RangeIngestion(spark, plane, events_job(kafka_broker, topic, without_sys_op), warehouse).run_pending()

    def with_sys_op(rows):
        return rows.select(*EVENT.fieldNames(), "sys_op", "kafka_partition", "kafka_offset")

    (retried,) = RangeIngestion(spark, plane, events_job(kafka_broker, topic, with_sys_op), warehouse).run_pending()
    assert (retried.keys_written, retried.rows_upserted, retried.rows_unchanged) == (1, 0, 1)
    assert events(spark, plane, warehouse) == []


MALFORMED = [
    event(1, "view", 2.5),
    event(2, "view", user_id=None),          # a JSON null: a null, not malformed
    ("3", '{"event_id": 3, "kind": "view"}'),  # a missing field: a null
    ("4", '{"event_id": 4, "amount": "abc"}'),
    ("5", '{"event_id": 5, "ts": "yesterday"}'),
    ("6", '{"event_id": 6, "user_id": "u-7"}'),
]


def test_a_value_that_does_not_fit_the_value_schema_fails_the_range_naming_topic_partition_offset_column_and_value(
        kafka_broker, spark, sqlite_url, warehouse):
    topic = kafka_broker.new_topic("bad", partitions=1)
    kafka_broker.send(topic, MALFORMED)
    plane = connect(sqlite_url)
    with pytest.raises(IngestionError) as refused:
        RangeIngestion(spark, plane, events_job(kafka_broker, topic), warehouse).run_pending()
    assert str(refused.value).endswith(
        f"MalformedValueError: Kafka topic '{topic}' partition 0 offset 3: column 'amount' holds 'abc', which is not "
        "double (3 malformed record(s) in the range; on_malformed='quarantine' would set them aside in "
        "'events__quarantine')")
    assert events(spark, plane, warehouse) == [] and logged(plane) == [("FAILURE", 1)]


def test_values_that_do_not_fit_go_to_the_quarantine_table_in_the_range_commit_and_are_counted(
        kafka_broker, spark, sqlite_url, warehouse):
    topic = kafka_broker.new_topic("quarantined", partitions=1)
    kafka_broker.send(topic, MALFORMED)
    plane = connect(sqlite_url)
    ingestion = RangeIngestion(spark, plane, events_job(kafka_broker, topic, on_malformed="quarantine"), warehouse)
    (result,) = ingestion.run_pending()
    assert events(spark, plane, warehouse) == [(1, "view", 2.5), (2, "view", None), (3, "view", None)]
    assert (result.rows_read, result.keys_written, result.rows_quarantined) == (6, 3, 3)
    (row,) = JobLog(plane).history("events")
    assert quarantined(spark, plane, warehouse) == [
        ("events", f"{topic}/0@3", MALFORMED[3][1],
         f"Kafka topic '{topic}' partition 0 offset 3: column 'amount' holds 'abc', which is not double", row.job_id),
        ("events", f"{topic}/0@4", MALFORMED[4][1],
         f"Kafka topic '{topic}' partition 0 offset 4: column 'ts' holds 'yesterday', which is not bigint", row.job_id),
        ("events", f"{topic}/0@5", MALFORMED[5][1],
         f"Kafka topic '{topic}' partition 0 offset 5: column 'user_id' holds 'u-7', which is not bigint", row.job_id),
    ]
    # Both tables' deltas were committed by the range's one transaction, with its SUCCESS.
    target = VersionedTable(spark, plane, "events", ["event_id"], EVENT, warehouse=warehouse)
    quarantine = VersionedTable(spark, plane, "events__quarantine", QUARANTINE_KEY, QUARANTINE_SCHEMA,
                                warehouse=warehouse)
    assert target.last_committed().commit_ts == quarantine.last_committed().commit_ts == result.commit_ts
    assert result.quarantine_delta_num == quarantine.last_committed().delta_num == 1
    steps = JobLog(plane).steps(row.job_id)
    assert [(s.step_id, s.source_count, s.target_count, s.failure_count) for s in steps] == [
        ("read", 6, None, None), ("write", 6, 3, 3), ("quarantine", 3, 3, 0)]

    # Read again (a refresh), the same records are quarantined already: no delta.
    (again,) = ingestion.refresh([DataRange(RangeKind.KAFKA_OFFSET, "{}", result.data_range.end)])
    assert (again.rows_quarantined, again.quarantine_delta_num, again.delta_num) == (3, None, None)


ORDER = T.StructType([T.StructField("order_id", T.LongType(), False), T.StructField("amount", T.LongType(), True)])


def orders_job(kafka_broker, topic: str, amount: T.DataType, **job) -> IngestionJob:
    """Orders whose `amount` the job declares as `amount`, quarantining what does not fit."""
    schema = T.StructType([ORDER["order_id"], T.StructField("amount", amount, True)])
    source = KafkaSource(kafka_broker.bootstrap_servers, [topic], value_schema=schema, message_key="order_id",
                         timeout_s=5.0)
    return IngestionJob("orders", source, KafkaOffsetPlanner(), TargetTable("orders", ["order_id"], schema),
                        on_malformed="quarantine", **job)


def test_a_range_whose_records_mostly_do_not_fit_fails_naming_column_type_and_value_instead_of_quarantining_all(
        kafka_broker, spark, sqlite_url, warehouse):
    """`amount` declared bigint over amounts like 12.34: every record would go to the
    quarantine and the range would log SUCCESS with nothing ingested. More than half of
    the range not fitting (max_malformed_share, 0.5 by default) fails it instead."""
    topic = kafka_broker.new_topic("amounts", partitions=1)
    kafka_broker.send(topic, [(str(i), json.dumps({"order_id": i, "amount": 12.34 + i})) for i in range(20)])
    plane = connect(sqlite_url)

    with pytest.raises(IngestionError) as refused:
        RangeIngestion(spark, plane, orders_job(kafka_broker, topic, T.LongType()), warehouse).run_pending()
    assert str(refused.value).endswith(
        "MalformedValueError: 20 of 20 record(s) of the range do not fit their declared types (100%, more than "
        "max_malformed_share 0.5), so the declaration is more likely wrong than the records; the first: Kafka "
        f"topic '{topic}' partition 0 offset 0: column 'amount' holds '12.34', which is not bigint. Nothing is set "
        "aside or committed, and the range is retried as it is: fix the declared type (or the source), or raise "
        "max_malformed_share to quarantine them")
    assert logged(plane, "orders") == [("FAILURE", 1)]
    for name in ("orders", "orders__quarantine"):
        assert DeltaCatalog(plane).last_committed(name) is None

    # The declaration fixed, the retry reads the same twenty records and ingests them all.
    (retried,) = RangeIngestion(spark, plane, orders_job(kafka_broker, topic, T.DoubleType()),
                                warehouse).run_pending()
    assert (retried.attempt, retried.rows_read, retried.rows_upserted, retried.rows_quarantined) == (2, 20, 20, 0)


def test_a_range_with_few_records_that_do_not_fit_or_a_job_without_a_threshold_quarantines_them(
        kafka_broker, spark, sqlite_url, warehouse):
    topic = kafka_broker.new_topic("some_bad", partitions=1)
    # 2 of 12 amounts do not fit: under the share, set aside.
    kafka_broker.send(topic, [(str(i), json.dumps({"order_id": i, "amount": i + 0.5 if i % 6 == 0 else i}))
                              for i in range(12)])
    plane = connect(sqlite_url)
    ingestion = RangeIngestion(spark, plane, orders_job(kafka_broker, topic, T.LongType()), warehouse)
    (first,) = ingestion.run_pending()
    assert (first.rows_read, first.rows_upserted, first.rows_quarantined) == (12, 10, 2)

    # All of the next 12 do not fit; a job declaring no threshold sets them aside.
    kafka_broker.send(topic, [(str(i), json.dumps({"order_id": i, "amount": i + 0.5})) for i in range(12, 24)])
    (second,) = RangeIngestion(spark, plane, orders_job(kafka_broker, topic, T.LongType(), max_malformed_share=None),
                               warehouse).run_pending()
    assert (second.rows_read, second.rows_upserted, second.rows_quarantined) == (12, 0, 12)


@dataclass(frozen=True)
class ReadThen(KafkaSource):
    """A Kafka source that calls `after_read(data_range)` once it has read a range."""

    after_read: Callable[[DataRange], None] | None = None

    def read_range(self, spark, data_range):
        batch = super().read_range(spark, data_range)
        if self.after_read is not None:
            self.after_read(data_range)
        return batch


def compacted_job(bootstrap_servers: str, topic: str, after_read=None, claim_policy=None) -> IngestionJob:
    """Events of a compacted topic, at most 10,000 offsets of a partition per range."""
    source = ReadThen(bootstrap_servers, [topic], value_schema=EVENT_VALUE, message_key="event_id", timeout_s=20.0,
                      after_read=after_read)
    return IngestionJob("events", source, KafkaOffsetPlanner(max_offsets_per_partition=10_000),
                        TargetTable("events", ["event_id"], EVENT),
                        **({"claim_policy": claim_policy} if claim_policy else {}))


@pytest.mark.slow
@pytest.mark.sigkill
def test_a_compacted_topic_ingested_in_ranges_with_a_killed_range_leaves_the_last_message_per_key(
        kafka_broker, spark, sqlite_url, warehouse):
    topic = kafka_broker.new_topic("compacted", partitions=3)
    # 100,000 messages over 10,000 keys, each key in its own partition (key % 3), one in
    # ten a tombstone; what a compacted topic keeps: each key's last message, deleted keys absent.
    rng = random.Random(54)
    by_partition: list[list[tuple[str, str | None]]] = [[], [], []]
    last: dict[int, tuple | None] = {}
    for i in range(100_000):
        key = rng.randrange(10_000)
        if rng.random() < 0.1:
            by_partition[key % 3].append(tombstone(key))
            last[key] = None
        else:
            by_partition[key % 3].append(event(key, f"v{i % 7}", float(i)))
            last[key] = (key, f"v{i % 7}", float(i))
    for partition, messages in enumerate(by_partition):
        kafka_broker.send(topic, messages, partition=partition)
    plane = connect(sqlite_url)

    # The child reads its ranges in order and is SIGKILLed once it has read the second.
    child = subprocess.run(
        [sys.executable, "-m", "tests.kafka_compaction_runner", sqlite_url, warehouse,
         kafka_broker.bootstrap_servers, topic, "2"], capture_output=True, text=True, timeout=900)
    assert child.returncode == -signal.SIGKILL, child.stderr[-2000:]
    assert [r.status for r in JobLog(plane).history("events")] == ["SUCCESS", "RUNNING"]

    dead = ClaimPolicy(is_run_dead=lambda run_id: run_id == "child-run")
    ingestion = RangeIngestion(spark, plane, compacted_job(kafka_broker.bootstrap_servers, topic,
                                                           claim_policy=dead), warehouse)
    results = []
    while batch := ingestion.run_pending(run_id="retry"):
        results.extend(batch)
    # The killed range, taken over and read again, then the two after it: all but the first 3 x 10,000.
    assert results[0].took_over_run_id == "child-run" and len(results) == 3
    assert sum(r.rows_read for r in results) == 100_000 - 30_000
    assert [r.status for r in JobLog(plane).history("events")] == ["SUCCESS"] * 4
    assert events(spark, plane, warehouse) == sorted(state for state in last.values() if state is not None)
