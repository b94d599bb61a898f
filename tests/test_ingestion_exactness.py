"""Exactness of ingestion: what a keyed Kafka topic sends, range after range, equals a
plain Python model of it; and a bad load undone by a revert equals a model that never saw it.

Generated histories (a hypothesis state machine against the real broker and real Spark)
send keyed messages to a topic of one or two partitions and ingest a range after each
send: several messages of one key in a range (the last by offset wins), a key's messages
spread over both partitions (refused while offsets alone order them; the history then
declares a value column, `seq`, that orders them everywhere), tombstones (a key and no
value: the key is deleted), NULL event ids (a key of their own), and values that do not
fit `value_schema` (a string for a double or a bigint, a value that is not JSON, a tombstone whose key is no event id, a
message with neither key nor value). A history's job fails on malformed records or
quarantines them; a failed range is retried with the option its error names
(`on_malformed="quarantine"`, `order_by`), without new messages. Some jobs shape the rows
with a transform that keeps the order columns. After every range the target table and
the quarantine table equal the model's, and the range's counts the model's.

A bad range B at a random point of a history is ingested, then undone by a revert of the
target to its delta before B: the target equals the model that never saw B, B's range is
REVERTED, and the ranges after it are planned and read as before (a Kafka range is a fixed
slice of the topic, so B is not loaded again). The same with a SQL source, where a bad
export of one or two daily windows is reverted, the source fixed, and B's windows loaded
again: after every step the target equals a model that saw only the good data.

`make test` runs a few histories (`EXACTNESS_HISTORIES`, as `tests/test_engine_exactness.py`
reads it, scaled down: each step of these is a broker round trip and two Spark jobs; a
tenth for the SQL source's); `make exactness` runs many.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, rule, run_state_machine_as_test
from pyspark.sql import functions as F
from pyspark.sql import types as T

from offset_assets.control_plane import connect, database
from offset_assets.control_plane.job_log import JobLog
from offset_assets.ranges.errors import IngestionError, MalformedValueError
from offset_assets.ranges.ingestion import QUARANTINE_KEY, QUARANTINE_SCHEMA, IngestionJob, RangeIngestion, TargetTable
from offset_assets.ranges.planners import DataRange, KafkaOffsetPlanner, RangeKind, TimeWindowPlanner, format_time
from offset_assets.ranges.sources import SqlTableSource
from offset_assets.ranges.sources.kafka import KafkaSource
from offset_assets.spark import get_spark_session
from offset_assets.versioned import revert_table
from offset_assets.versioned.compaction import compact
from offset_assets.versioned.errors import UnorderedStatesError
from offset_assets.versioned.table import VersionedTable

# A fifth of the engine's histories (each of its steps costs about as much as a whole
# history of these), at least 2; shards of 10 in the long mode.
HISTORIES = max(2, int(os.environ.get("EXACTNESS_HISTORIES", "25")) // 5)
SHARDS = max(1, HISTORIES // 10)
SHARD_SETTINGS = settings(
    max_examples=-(-HISTORIES // SHARDS),
    stateful_step_count=5,
    database=None,
    print_blob=True,
    deadline=None,
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=list(HealthCheck),
)

EVENT = T.StructType([
    T.StructField("event_id", T.LongType(), True),
    T.StructField("kind", T.StringType(), True),
    T.StructField("amount", T.DoubleType(), True),
])
# The values: the event and its sequence number, which the history may declare as the order.
VALUE = T.StructType([*EVENT.fields, T.StructField("seq", T.LongType(), True)])

# A NULL event id is a key too (the target's key column is nullable): sent without a message key.
KEYS = st.one_of(st.none(), st.integers(min_value=1, max_value=4))
KINDS = st.sampled_from(["view", "buy"])  # few values: some messages leave a row unchanged
AMOUNTS = st.sampled_from([None, 1.0, 2.5])
# How a message does not fit: (the value's field, its text) or the whole message.
MALFORMED = st.sampled_from(["amount", "seq", "not_json", "bad_key_tombstone", "no_key_no_value"])


@dataclass(frozen=True)
class Message:
    """One message as sent: its key and value texts (None: none), where it went, and what
    the model makes of it."""

    key: str | None
    value: str | None
    partition: int
    offset: int
    event_id: int | None = None  # the key the message is about (None: malformed)
    state: tuple | None = None  # (kind, amount, sys_op) of the row it gives its key
    seq: int | None = None
    reason: str | None = None  # why it does not fit, as the range reports it

    def source_key(self, topic: str) -> str:
        return f"{topic}/{self.partition}@{self.offset}"


@dataclass
class IngestionModel:
    """The target and the quarantine table in plain Python."""

    topic: str
    events: dict[int, tuple] = field(default_factory=dict)
    quarantine: dict[str, tuple] = field(default_factory=dict)  # source key -> (raw value, reason, job_id)

    def last_states(self, messages: list[Message], order_by_seq: bool) -> dict[int, tuple]:
        """The state each key's messages leave: the last by seq (a tombstone, without one,
        before any message that has one), else the last by offset within its partition."""
        rank = (lambda m: (m.seq is not None, m.seq or 0)) if order_by_seq else (lambda m: m.offset)
        last: dict[int, Message] = {}
        for message in messages:
            if message.event_id not in last or rank(message) > rank(last[message.event_id]):
                last[message.event_id] = message
        return {key: message.state for key, message in last.items()}

    @staticmethod
    def unordered_keys(messages: list[Message]) -> set[int]:
        """Keys with different states in more than one partition: offsets do not order them."""
        by_key: dict[int, list[Message]] = {}
        for message in messages:
            by_key.setdefault(message.event_id, []).append(message)
        return {key for key, sent in by_key.items()
                if len({m.partition for m in sent}) > 1 and len({m.state for m in sent}) > 1}


class IngestionExactness(RuleBasedStateMachine):
    """One history: a topic, a job and its model."""

    broker = None
    workdir = ""
    durations: list[float] = []
    seen: Counter[str] = Counter()  # what the histories of a shard went through

    def __init__(self) -> None:
        super().__init__()
        self.spark = get_spark_session()
        self.started = time.monotonic()

    @initialize(partitions=st.integers(min_value=1, max_value=2), quarantines=st.booleans(),
                transformed=st.booleans())
    def start(self, partitions: int, quarantines: bool, transformed: bool) -> None:
        name = uuid.uuid4().hex[:10]
        self.db_url = f"sqlite:///{self.workdir}/{name}.db"
        self.warehouse = f"{self.workdir}/{name}"
        self.plane = connect(self.db_url)
        self.topic = self.broker.new_topic("history", partitions=partitions)
        self.partitions = partitions
        self.on_malformed = "quarantine" if quarantines else "fail"
        self.order_by_seq = False
        self.transformed = transformed
        self.offsets = [0] * partitions
        self.seq = 0
        self.model = IngestionModel(self.topic)

    def teardown(self) -> None:
        if hasattr(self, "db_url"):
            database.forget(self.db_url)
        self.durations.append(time.monotonic() - self.started)

    def job(self) -> IngestionJob:
        order = ["seq"] if self.order_by_seq else ["kafka_partition", "kafka_offset"]

        def shaped(rows):  # the target's columns, sys_op and the order's columns
            return rows.select("event_id", F.col("kind"), "amount", "sys_op", *order)

        source = KafkaSource(self.broker.bootstrap_servers, [self.topic], value_schema=VALUE, message_key="event_id",
                             order_by="seq" if self.order_by_seq else None, timeout_s=10.0)
        return IngestionJob("events", source, KafkaOffsetPlanner(), TargetTable("events", ["event_id"], EVENT),
                            transform=shaped if self.transformed else None, on_malformed=self.on_malformed)

    # -- what is sent -----------------------------------------------------------------------

    def message(self, data: st.DataObject) -> Message:
        key = data.draw(KEYS)
        text = None if key is None else str(key)  # a NULL key is sent without a message key
        # A keyed producer sends a key to one partition; now and then one sends it elsewhere.
        partition = (key or 0) % self.partitions if data.draw(st.integers(0, 5)) else data.draw(
            st.integers(0, self.partitions - 1))
        offset = self.offsets[partition]
        self.offsets[partition] += 1
        kind = data.draw(st.sampled_from(["upsert", "upsert", "tombstone", "malformed"]))
        where = f"Kafka topic '{self.topic}' partition {partition} offset {offset}: "
        if kind == "tombstone":
            if text is None:  # no key to delete
                return Message(None, None, partition, offset, reason=f"{where}a message with neither a value nor a key")
            return Message(text, None, partition, offset, key, (None, None, 1))
        self.seq += 1
        values = {"event_id": key, "kind": data.draw(KINDS), "amount": data.draw(AMOUNTS), "seq": self.seq}
        if kind == "upsert":
            return Message(text, json.dumps(values), partition, offset, key,
                           (values["kind"], values["amount"], 0), self.seq)
        how = data.draw(MALFORMED)
        if how in ("amount", "seq"):
            values[how] = "x-1"
            shown = "double" if how == "amount" else "bigint"
            return Message(text, json.dumps(values), partition, offset,
                           reason=f"{where}column {how!r} holds 'x-1', which is not {shown}")
        if how == "not_json":
            return Message(text, "not json", partition, offset, reason=f"{where}the value is not a JSON object")
        if how == "bad_key_tombstone":
            return Message(f"k{key}", None, partition, offset,
                           reason=f"{where}the message key 'k{key}' does not fit column(s) event_id")
        return Message(None, None, partition, offset, reason=f"{where}a message with neither a value nor a key")

    @rule(data=st.data(), count=st.integers(min_value=0, max_value=7))
    def send_and_ingest_a_range(self, data: st.DataObject, count: int) -> None:
        sent = [self.message(data) for _ in range(count)]
        for partition in range(self.partitions):
            batch = [(m.key, m.value) for m in sent if m.partition == partition]
            if batch:
                self.broker.send(self.topic, batch, partition=partition)
        self.ingest(sent)

    @rule(data=st.data(), count=st.integers(min_value=1, max_value=5))
    def a_bad_range_ingested_then_reverted(self, data: st.DataObject, count: int) -> None:
        """A range B of whatever was sent, ingested, then undone by a revert of the target to
        its delta before B: the target as if B had never come, B's range REVERTED in job_log,
        and the next ranges read after it (a Kafka range is a fixed slice of the topic: a
        run of B would read the same messages again, so it stays reverted). Its quarantined
        records stay in the quarantine table, which the revert does not touch."""
        events = VersionedTable(self.spark, self.plane, "events", ["event_id"], EVENT, warehouse=self.warehouse)
        before = events.last_committed().delta_num if events.last_committed() else 0
        never_saw_b = dict(self.model.events)
        self.send_and_ingest_a_range(data, count)
        [bad] = [r for r in JobLog(self.plane).history("events") if r.status == "SUCCESS"][-1:]

        reverted = revert_table(events, before)

        self.model.events = never_saw_b
        self.check_tables()
        assert [r.job_id for r in reverted.ranges.reverted] == ([bad.job_id] if bad.target_delta_num else [])
        assert JobLog(self.plane).get(bad.job_id).status == ("REVERTED" if bad.target_delta_num else "SUCCESS")
        if reverted.ranges.reverted:
            self.seen["ranges reverted"] += 1

    # -- a range and what the model says of it ----------------------------------------------

    def ingest(self, sent: list[Message]) -> None:
        """Run the due range (retried with the option its failure names until it succeeds)
        and compare the tables and counts with the model's."""
        malformed = [m for m in sent if m.reason is not None]
        valid = [m for m in sent if m.reason is None]
        while True:
            ingestion = RangeIngestion(self.spark, self.plane, self.job(), self.warehouse)
            expected_failure = self.expected_failure(malformed, valid)
            if expected_failure is None:
                results = ingestion.run_pending()
                break
            with pytest.raises(IngestionError) as refused:
                ingestion.run_pending()
            expected_failure(refused.value)
            self.seen[f"ranges refused: {type(refused.value.__cause__).__name__}"] += 1
            self.check_tables()  # a failed range commits nothing
        if not sent:
            assert results == []
            return
        (result,) = results
        states = self.model.last_states(valid, self.order_by_seq)
        for key, (kind, amount, sys_op) in states.items():
            if sys_op:
                self.model.events.pop(key, None)
            else:
                self.model.events[key] = (kind, amount)
        for message in malformed:
            self.model.quarantine[message.source_key(self.topic)] = (message.value, message.reason, result.job_id)
        assert (result.rows_read, result.keys_written, result.superseded_in_range, result.rows_quarantined) == (
            len(sent), len(states), len(valid) - len(states), len(malformed))
        for happened, what in [(len(valid) > len(states), "a key's rows superseded in a range"),
                               (any(sys_op for _, _, sys_op in states.values()), "a key deleted by a tombstone"),
                               (malformed, "records quarantined"), (self.order_by_seq, "ordered by seq"),
                               (None in states, "a NULL event id written")]:
            if happened:
                self.seen[what] += 1
        self.check_tables()

    def expected_failure(self, malformed: list[Message], valid: list[Message]):
        """What the range must fail with now, as a check of the error (None: it succeeds);
        the job is changed as the error says, for the retry (the one run now was built)."""
        if malformed and self.on_malformed == "fail":
            first = min(malformed, key=lambda m: m.source_key(self.topic))
            self.on_malformed = "quarantine"

            def malformed_record(error: IngestionError) -> None:
                assert isinstance(error.__cause__, MalformedValueError)
                assert f"MalformedValueError: {first.reason} ({len(malformed)} malformed record(s)" in str(error)

            return malformed_record
        unordered = set() if self.order_by_seq else IngestionModel.unordered_keys(valid)
        if unordered:
            self.order_by_seq = True

            def unordered_states(error: IngestionError) -> None:
                refused = error.__cause__.__cause__
                assert isinstance(refused, UnorderedStatesError), error
                assert {key["event_id"] for key in refused.keys} <= unordered
                assert f"({len(unordered)} key(s) in all)" in str(refused)

            return unordered_states
        return None

    def check_tables(self) -> None:
        events = VersionedTable(self.spark, self.plane, "events", ["event_id"], EVENT, warehouse=self.warehouse)
        actual = {r.event_id: (r.kind, r.amount) for r in events.read_actual().collect()}
        assert actual == self.model.events
        quarantine = VersionedTable(self.spark, self.plane, "events__quarantine", QUARANTINE_KEY, QUARANTINE_SCHEMA,
                                    warehouse=self.warehouse)
        held = {r.source_key: (r.raw_value, r.reason, r.job_id) for r in quarantine.read_actual().collect()
                if r.job_name == "events"}
        assert held == self.model.quarantine


@pytest.fixture(scope="module")
def history_workdir(tmp_path_factory) -> str:
    return str(tmp_path_factory.mktemp("ingestion_exactness"))


@pytest.mark.parametrize("shard", range(SHARDS))
def test_ingested_ranges_equal_the_model_of_what_the_topic_sent(spark, kafka_broker, history_workdir, shard):
    IngestionExactness.broker = kafka_broker
    IngestionExactness.workdir = history_workdir
    IngestionExactness.durations = []
    IngestionExactness.seen = Counter()
    started = time.monotonic()
    run_state_machine_as_test(seed(20261129 + shard)(lambda: IngestionExactness()), settings=SHARD_SETTINGS)
    durations = IngestionExactness.durations
    print(f"ingestion exactness shard {shard}: {len(durations)} histories in {time.monotonic() - started:.0f} s; "
          f"{dict(IngestionExactness.seen)}")


# -- a bad load from a SQL source: reverted, the source fixed, its windows loaded again --------

SQL_HISTORIES = max(2, int(os.environ.get("EXACTNESS_HISTORIES", "25")) // 10)
SQL_SETTINGS = settings(SHARD_SETTINGS, max_examples=SQL_HISTORIES)
ITEM = T.StructType([
    T.StructField("id", T.LongType(), False),
    T.StructField("kind", T.StringType(), True),
    T.StructField("amount", T.DoubleType(), True),
])
FIRST_DAY = datetime(2022, 1, 1)
ITEM_IDS = st.integers(min_value=1, max_value=6)
BOGUS_IDS = st.integers(min_value=7, max_value=9)  # rows a bad export made up
# (id, kind, amount, deleted at the source): one window's rows.
ROWS = st.lists(st.tuples(ITEM_IDS, KINDS, AMOUNTS, st.booleans()), min_size=1, max_size=4, unique_by=lambda r: r[0])


def window(day: int) -> DataRange:
    start = FIRST_DAY + timedelta(days=day)
    return DataRange(RangeKind.TIME_WINDOW, format_time(start), format_time(start + timedelta(days=1)))


class SqlSourceHistory:
    """Daily windows of a SQL table (edits and soft deletes) ingested one by one, and one
    or two windows of a bad export (wrong values, made-up rows, wrong deletes) ingested,
    reverted, the source fixed, and those windows run again. After every step the target
    equals a model that saw only the good data, in the order it was meant to arrive."""

    def __init__(self, workdir: str) -> None:
        self.spark = get_spark_session()
        self.workdir = workdir
        name = uuid.uuid4().hex[:10]
        self.db_url = f"sqlite:///{self.workdir}/{name}.db"
        self.source_url = f"sqlite:///{self.workdir}/{name}-source.db"
        self.plane = connect(self.db_url)
        self.source = sa.create_engine(self.source_url)
        with self.source.begin() as conn:
            conn.execute(sa.text("CREATE TABLE items (id INTEGER PRIMARY KEY, kind TEXT, amount REAL, "
                                 "updated_at DATETIME, is_deleted INTEGER)"))
        self.ingestion = RangeIngestion(self.spark, self.plane, self.job(), f"{self.workdir}/{name}")
        self.table = VersionedTable(self.spark, self.plane, "items", ["id"], ITEM, warehouse=f"{self.workdir}/{name}")
        self.day = 0  # the next window
        self.model: dict[int, tuple] = {}  # the target as a pipeline that saw the good data only

    def close(self) -> None:
        database.forget(self.db_url)
        self.source.dispose()

    def job(self) -> IngestionJob:
        def items(rows):  # a soft delete at the source deletes the item
            return rows.select("id", "kind", "amount", F.col("is_deleted").cast("int").alias("sys_op"))

        source = SqlTableSource(self.source_url, "items", time_column="updated_at",
                                columns=["id", "kind", "amount", "is_deleted"])
        return IngestionJob("items", source, TimeWindowPlanner(FIRST_DAY, timedelta(days=1)),
                            TargetTable("items", ["id"], ITEM), transform=items)

    # -- the source --------------------------------------------------------------------------

    def source_rows(self) -> dict[int, tuple]:
        with self.source.connect() as conn:
            return {row[0]: tuple(row[1:]) for row in conn.execute(
                sa.text("SELECT id, kind, amount, updated_at, is_deleted FROM items"))}

    def put(self, rows: list[tuple], day: int) -> None:
        """Rows (id, kind, amount, deleted) written at the source during window `day`."""
        stamp = (FIRST_DAY + timedelta(days=day, hours=9)).strftime("%Y-%m-%d %H:%M:%S.000000")
        with self.source.begin() as conn:
            for item_id, kind, amount, deleted in rows:
                conn.execute(sa.text("INSERT OR REPLACE INTO items VALUES (:i, :k, :a, :t, :d)"),
                             {"i": item_id, "k": kind, "a": amount, "t": stamp, "d": int(deleted)})

    def restore(self, saved: dict[int, tuple], ids: set[int]) -> None:
        """The source rows of `ids` as they were in `saved` (absent there: removed)."""
        with self.source.begin() as conn:
            for item_id in ids:
                conn.execute(sa.text("DELETE FROM items WHERE id = :i"), {"i": item_id})
                if item_id in saved:
                    kind, amount, updated_at, is_deleted = saved[item_id]
                    conn.execute(sa.text("INSERT INTO items VALUES (:i, :k, :a, :t, :d)"),
                                 {"i": item_id, "k": kind, "a": amount, "t": updated_at, "d": is_deleted})

    @staticmethod
    def applied(model: dict[int, tuple], rows: list[tuple]) -> dict[int, tuple]:
        after = dict(model)
        for item_id, kind, amount, deleted in rows:
            if deleted:
                after.pop(item_id, None)
            else:
                after[item_id] = (kind, amount)
        return after

    def check(self, expected: dict[int, tuple]) -> None:
        actual = {r.id: (r.kind, r.amount) for r in self.table.read_actual().collect()}
        assert actual == expected

    def now(self) -> datetime:
        return (FIRST_DAY + timedelta(days=self.day)).replace(tzinfo=UTC)

    # -- what happens ------------------------------------------------------------------------

    def a_good_window(self, rows: list[tuple]) -> None:
        self.put(rows, self.day)
        self.day += 1
        [ran] = self.ingestion.run_pending(now=self.now())
        assert ran.data_range.start == window(self.day - 1).start
        self.model = self.applied(self.model, rows)
        self.check(self.model)

    def a_bad_export_reverted_and_loaded_again_once_fixed(self, data: st.DataObject) -> None:
        windows, compacted = data.draw(st.integers(min_value=1, max_value=2)), data.draw(st.booleans())
        before = self.table.last_committed().delta_num if self.table.last_committed() else 0
        saved = self.source_rows()
        good, bad = [], []
        for _ in range(windows):  # what each window should hold, and what the export sent
            rows = data.draw(ROWS)
            bogus = data.draw(st.lists(BOGUS_IDS, max_size=2, unique=True))
            good.append(rows)
            bad.append([(i, "BAD", -1.0, data.draw(st.booleans())) for i, *_ in rows]
                       + [(i, "BAD", -1.0, False) for i in bogus])
        first = self.day
        for offset, rows in enumerate(bad):
            self.put(rows, first + offset)
        self.day += windows
        self.ingestion.run_pending(now=self.now())
        with_bad = self.model
        for rows in bad:
            with_bad = self.applied(with_bad, rows)
        self.check(with_bad)  # the bad export landed

        if compacted:
            compact(self.table)
        reverted = revert_table(self.table, before)

        self.check(self.model)  # as if it had never come
        undone = {r.data_range_start for r in reverted.ranges.reverted}
        assert undone == {r.data_range_start for r in JobLog(self.plane).history("items") if r.status == "REVERTED"}
        assert undone <= {window(first + i).start for i in range(windows)}
        assert self.ingestion.plan(now=self.now()) == []  # no plan runs them again on its own

        # The source fixed: each window's rows as they should have been, made-up rows gone.
        touched = {i for rows in bad for i, *_ in rows}
        self.restore(saved, touched)
        for offset, rows in enumerate(good):
            self.put(rows, first + offset)
        for offset in range(windows):
            later = {i for rows in good[offset + 1:] for i, *_ in rows}  # at the source in a later window now
            again = window(first + offset)
            if again.start in undone:  # a run of a reverted range loads it again
                self.ingestion.run_range(again, now=self.now())
            else:  # the bad export changed nothing there (its rows moved on): refreshed, as B's other windows
                self.ingestion.refresh([again])
            self.model = self.applied(self.model, [r for r in good[offset] if r[0] not in later])
            self.check(self.model)
        assert all(r.status == "SUCCESS" for r in JobLog(self.plane).history("items"))


@pytest.fixture(scope="module")
def sql_history_workdir(tmp_path_factory) -> str:
    return str(tmp_path_factory.mktemp("sql_revert_exactness"))


@seed(20261201)
@SQL_SETTINGS
@given(history=st.lists(ROWS, max_size=4), at=st.integers(min_value=0, max_value=4), data=st.data())
def test_a_bad_export_reverted_and_loaded_again_equals_a_pipeline_that_saw_only_the_good_data(
        spark, sql_history_workdir, history, at, data):
    """A history H of good windows with a bad export B at a random point: B ingested,
    reverted, the source fixed, B's windows loaded again, then the rest of H."""
    story = SqlSourceHistory(sql_history_workdir)
    try:
        for rows in history[:at]:
            story.a_good_window(rows)
        story.a_bad_export_reverted_and_loaded_again_once_fixed(data)
        for rows in history[at:]:
            story.a_good_window(rows)
    finally:
        story.close()
