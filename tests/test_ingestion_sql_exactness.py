"""Exactness of ingestion from a SQL source: what a SQLite change log holds, range after
range, equals a plain Python model of it.

Generated histories (a hypothesis state machine against a real SQLite file and real
Spark) append rows to `readings(change_id, reading_id, qty INTEGER, level NUMERIC(10, 2),
ok BOOLEAN, sys_op)` and ingest a range after each append: several rows of one key in a
range (the last by `change_id`, the source's `order_by`, wins), deletes (`sys_op` 1), NULL
reading ids (a key of their own), and values SQLite keeps but their column's type cannot
hold, among values that fit, anywhere in a range: a REAL in the INTEGER column (2.5, 1e30;
3.0 and the text '7' SQLite stores as integers, and they fit), text in it, a REAL beyond
the NUMERIC's scale, a 2 in the BOOLEAN. A history's job fails on malformed rows or
quarantines them; a failed range is retried quarantining them. After every range the
target table and the quarantine table equal the model's, and the range's counts the
model's: a malformed value is never read as another value, nor as a null. A history's
ranges are read and written by the driver (`held_rows_limit`, as small ranges are by
default; a range with records to quarantine goes to Spark) or by Spark, and its values
are drawn among all, or among those that fit only (ranges the driver writes whole).

`make test` runs a few histories (`EXACTNESS_HISTORIES`, scaled down as the Kafka
histories of `tests/test_ingestion_exactness.py` are); `make exactness` runs many.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from decimal import Decimal

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, Phase, seed, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, rule, run_state_machine_as_test
from pyspark.sql import types as T

from offset_assets.control_plane import connect, database
from offset_assets.ranges.errors import IngestionError, MalformedValueError
from offset_assets.ranges.ingestion import QUARANTINE_KEY, QUARANTINE_SCHEMA, IngestionJob, RangeIngestion, TargetTable
from offset_assets.ranges.planners import AutoIncrementIdPlanner
from offset_assets.ranges.sources import SqlTableSource
from offset_assets.spark import get_spark_session
from offset_assets.spark_jobs import count_spark_jobs
from offset_assets.versioned.held_files import DEFAULT_HELD_ROWS_LIMIT
from offset_assets.versioned.table import VersionedTable

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

READINGS = T.StructType(
    [
        T.StructField("reading_id", T.LongType(), True),
        T.StructField("qty", T.LongType(), True),
        T.StructField("level", T.DecimalType(10, 2), True),
        T.StructField("ok", T.BooleanType(), True),
    ]
)
COLUMNS = ["change_id", "reading_id", "qty", "level", "ok", "sys_op"]

KEYS = st.one_of(st.none(), st.integers(min_value=1, max_value=4))
# Each column's values: (as inserted, as read, or None when the value does not fit).
QTY_VALUES = [(None, None), (5, 5), (3.0, 3), ("7", 7), (2.5, None), (1e30, None), ("many", None)]
LEVEL_VALUES = [(None, None), (1.25, Decimal("1.25")), (3, Decimal("3.00")), (2.555, None)]
OK_VALUES = [(0, False), (1, True), (2, None)]
QTYS, LEVELS, OKS = (st.sampled_from(values) for values in (QTY_VALUES, LEVEL_VALUES, OK_VALUES))
# Only values that fit (held as None, or read as something): a range of them is the driver's
# to write, where one malformed record sends a range to Spark.
FITTING = tuple(st.sampled_from([(held, read) for held, read in values if held is None or read is not None])
                for values in (QTY_VALUES, LEVEL_VALUES, OK_VALUES))
CHECKED = [("qty", "bigint"), ("level", "decimal(10,2)"), ("ok", "boolean")]


@dataclass(frozen=True)
class Row:
    """One row as appended: its change id, key, what SQLite holds and what the model makes of it."""

    change_id: int
    reading_id: int | None
    inserted: dict  # column -> the value inserted
    held: dict  # column -> the value SQLite holds (as sqlite3 reads it back)
    state: tuple | None  # (qty, level, ok) of the key, or None: a delete
    reason: str | None = None  # why it does not fit, as the range reports it

    @property
    def source_key(self) -> str:
        return json.dumps({"change_id": self.change_id})


@dataclass
class SqlModel:
    readings: dict = field(default_factory=dict)
    quarantine: dict = field(default_factory=dict)  # source key -> (raw value, reason, job_id)


class SqlIngestionExactness(RuleBasedStateMachine):
    """One history: a change log, a job and its model."""

    workdir = ""
    seen: Counter[str] = Counter()

    def __init__(self) -> None:
        super().__init__()
        self.spark = get_spark_session()

    @initialize(quarantines=st.booleans(), by_driver=st.booleans(), fitting=st.booleans())
    def start(self, quarantines: bool, by_driver: bool, fitting: bool) -> None:
        name = uuid.uuid4().hex[:10]
        self.db_url = f"sqlite:///{self.workdir}/{name}.db"
        self.source_url = f"sqlite:///{self.workdir}/{name}_source.db"
        self.warehouse = f"{self.workdir}/{name}"
        self.plane = connect(self.db_url)
        self.engine = sa.create_engine(self.source_url)
        with self.engine.begin() as conn:
            conn.exec_driver_sql(
                "CREATE TABLE readings (change_id INTEGER PRIMARY KEY AUTOINCREMENT, reading_id INTEGER, "
                "qty INTEGER, level NUMERIC(10, 2), ok BOOLEAN, sys_op INTEGER)"
            )
        self.on_malformed = "quarantine" if quarantines else "fail"
        # Ranges this small are read and written by the driver, unless its limit is 0 (Spark).
        self.held_rows_limit = DEFAULT_HELD_ROWS_LIMIT if by_driver else 0
        self.values = FITTING if fitting else (QTYS, LEVELS, OKS)
        self.change_id = 0
        self.model = SqlModel()

    def teardown(self) -> None:
        if hasattr(self, "db_url"):
            database.forget(self.db_url)
            self.engine.dispose()

    def job(self) -> IngestionJob:
        source = SqlTableSource(self.source_url, "readings", id_column="change_id", order_by="change_id")
        return IngestionJob(
            "readings",
            source,
            AutoIncrementIdPlanner(),
            TargetTable("readings", ["reading_id"], READINGS),
            on_malformed=self.on_malformed,
        )

    def row(self, data: st.DataObject) -> Row:
        self.change_id += 1
        key = data.draw(KEYS)
        if data.draw(st.integers(0, 4)) == 0:
            held = {"change_id": self.change_id, "reading_id": key, "qty": None, "level": None, "ok": None, "sys_op": 1}
            return Row(self.change_id, key, held, held, None)
        (qty, qty_read), (level, level_read), (ok, ok_read) = (data.draw(values) for values in self.values)
        # What sqlite3 reads back: INTEGER and NUMERIC affinity store 3.0 and '7' as integers.
        held_qty = int(qty) if isinstance(qty, float) and qty.is_integer() and abs(qty) < 2**63 else qty
        held_qty = int(held_qty) if isinstance(held_qty, str) and held_qty.isdigit() else held_qty
        inserted = {"change_id": self.change_id, "reading_id": key, "qty": qty, "level": level, "ok": ok, "sys_op": 0}
        held = inserted | {"qty": held_qty}
        read = {"qty": qty_read, "level": level_read, "ok": ok_read}
        for column, type_name in CHECKED:
            if held[column] is not None and read[column] is None:
                reason = (
                    f"row {json.dumps({'change_id': self.change_id})}: column {column!r} holds "
                    f"{held[column]!r}, which is not {type_name}"
                )
                return Row(self.change_id, key, inserted, held, None, reason)
        return Row(self.change_id, key, inserted, held, (qty_read, level_read, ok_read))

    @rule(data=st.data(), count=st.integers(min_value=0, max_value=7))
    def append_and_ingest_a_range(self, data: st.DataObject, count: int) -> None:
        rows = [self.row(data) for _ in range(count)]
        if rows:
            with self.engine.begin() as conn:
                conn.execute(
                    sa.text("INSERT INTO readings VALUES (:change_id, :reading_id, :qty, :level, :ok, :sys_op)"),
                    [row.inserted for row in rows],
                )
        self.ingest(rows)

    def ingest(self, rows: list[Row]) -> None:
        malformed = [r for r in rows if r.reason is not None]
        valid = [r for r in rows if r.reason is None]
        while True:
            ingestion = RangeIngestion(self.spark, self.plane, self.job(), self.warehouse,
                                       held_rows_limit=self.held_rows_limit)
            if not (malformed and self.on_malformed == "fail"):
                with count_spark_jobs(self.spark) as jobs:
                    results = ingestion.run_pending()
                break
            with pytest.raises(IngestionError) as refused:
                ingestion.run_pending()
            assert isinstance(refused.value.__cause__, MalformedValueError)
            where = f"SQL source 'readings' at {self.source_url}"
            assert str(refused.value).endswith(f"MalformedValueError: {where}: {malformed[0].reason}"), refused.value
            self.seen["ranges refused"] += 1
            self.on_malformed = "quarantine"
            self.check_tables()  # a failed range commits nothing
        if not rows:
            assert results == []
            return
        (result,) = results
        last: dict = {}
        for row in valid:  # in change_id order: the last row of a key wins
            last[row.reading_id] = row
        for key, row in last.items():
            if row.state is None:
                self.model.readings.pop(key, None)
            else:
                self.model.readings[key] = row.state
        for row in malformed:
            raw = json.dumps({c: row.held[c] for c in COLUMNS}, default=str)
            self.model.quarantine[row.source_key] = (raw, f"SQL source 'readings' {row.reason}", result.job_id)
        assert (result.rows_read, result.keys_written, result.superseded_in_range, result.rows_quarantined) == (
            len(rows),
            len(last),
            len(valid) - len(last),
            len(malformed),
        )
        for happened, what in [
            (malformed, "rows quarantined"),
            (any(isinstance(r.held["qty"], float) for r in malformed), "a REAL in the INTEGER column"),
            (len(valid) > len(last), "a key's rows superseded in a range"),
            (None in last, "a NULL reading id written"),
            (jobs.count == 0, "a range read and written by the driver"),
        ]:
            if happened:
                self.seen[what] += 1
        self.check_tables()

    def check_tables(self) -> None:
        table = VersionedTable(self.spark, self.plane, "readings", ["reading_id"], READINGS, warehouse=self.warehouse)
        actual = {r.reading_id: (r.qty, r.level, r.ok) for r in table.read_actual().collect()}
        assert actual == self.model.readings
        quarantine = VersionedTable(
            self.spark, self.plane, "readings__quarantine", QUARANTINE_KEY, QUARANTINE_SCHEMA, warehouse=self.warehouse
        )
        held = {r.source_key: (r.raw_value, r.reason, r.job_id) for r in quarantine.read_actual().collect()}
        assert held == self.model.quarantine


@pytest.fixture(scope="module")
def history_workdir(tmp_path_factory) -> str:
    return str(tmp_path_factory.mktemp("sql_ingestion_exactness"))


@pytest.mark.parametrize("shard", range(SHARDS))
def test_ingested_ranges_equal_the_model_of_what_the_change_log_held(spark, history_workdir, shard):
    SqlIngestionExactness.workdir = history_workdir
    SqlIngestionExactness.seen = Counter()
    started = time.monotonic()
    run_state_machine_as_test(seed(20261201 + shard)(lambda: SqlIngestionExactness()), settings=SHARD_SETTINGS)
    print(
        f"SQL ingestion exactness shard {shard}: {time.monotonic() - started:.0f} s; {dict(SqlIngestionExactness.seen)}"
    )
