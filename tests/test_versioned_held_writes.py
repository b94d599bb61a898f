"""A write of rows the driver holds, classified and written by the driver
(`HotDelta.write_held`), does exactly what the same write does through Spark
(`HotDelta.write`): the same versions (tombstones with the deleted data), the same
unchanged rows, the same counts, the same refusal naming the same keys, and the same
tables read by Spark afterwards.

Generated histories of two writes into one hot delta over a committed state, each row an
upsert or a delete of one of a few keys, the states drawn from few values (so that rows
repeat, collide and equal the committed version): NULL, NaN and -0.0 among the doubles,
a NULL in a column declared not nullable, a row the caller refuses, and writes that
replace a set of keys (`HeldReplacement`, `Replacement`).
"""

from __future__ import annotations

import datetime
import itertools
import re
from decimal import Decimal

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from pyspark.sql.types import (
    BooleanType,
    DecimalType,
    DoubleType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from offset_assets.control_plane import connect
from offset_assets.local_frames import local_frame
from offset_assets.versioned.errors import VersionedTableError
from offset_assets.versioned.held_files import arrow_schema
from offset_assets.versioned.held_writes import HeldReplacement
from offset_assets.versioned.in_filter import in_values
from offset_assets.versioned.table import VersionedTable
from offset_assets.versioned.writes import Refusal, Replacement

SCHEMA = StructType(
    [
        StructField("k", LongType(), False),
        StructField("g", StringType(), True),
        StructField("v", DoubleType(), True),
        StructField("n", LongType(), False),
        StructField("at", TimestampType(), True),
        StructField("d", DecimalType(10, 2), True),
    ]
)
FLAG = "__refused"
EXAMPLES = itertools.count()  # each example's tables have names of their own
# The rows Spark is given: every column nullable, so that a NULL where the table allows
# none reaches the write (which refuses it), as the driver's rows do.
WITH_FLAG = StructType(
    [
        *[StructField(f.name, f.dataType, True) for f in SCHEMA.fields],
        StructField("sys_op", LongType(), True),
        StructField(FLAG, BooleanType(), True),
    ]
)
AT = datetime.datetime(2024, 3, 31, 1, 30, tzinfo=datetime.UTC)

KEYS = st.integers(min_value=1, max_value=5)
VALUES = st.tuples(
    st.sampled_from(["a", "b", None]),
    st.sampled_from([0.0, -0.0, float("nan"), 1.5, None]),
    st.sampled_from([1, 2, None]),  # NULL in a column declared not nullable: refused
    st.sampled_from([AT, None]),
    st.sampled_from([Decimal("1.10"), Decimal("2.00"), None]),
)
ROW = st.tuples(KEYS, VALUES, st.sampled_from([0, 0, 0, 1]), st.just(False))
ROWS = st.lists(ROW, max_size=5)
REFUSED_ROW = st.tuples(KEYS, VALUES, st.just(0), st.just(True))
WRITE = st.tuples(
    st.one_of(ROWS, st.lists(st.one_of(ROW, REFUSED_ROW), max_size=4)),
    st.one_of(st.none(), st.frozensets(KEYS, max_size=3)),
)


def rows_with_flag(rows: list[tuple]) -> list[tuple]:
    """(k, g, v, n, at, d, sys_op, refused) tuples of generated rows."""
    return [(k, *values, op, refused) for k, values, op, refused in rows]


def arrow_rows(rows: list[tuple]) -> pa.Table:
    schema = (
        arrow_schema(SCHEMA, with_system=False)
        .append(pa.field("sys_op", pa.int64()))
        .append(pa.field(FLAG, pa.bool_()))
    )
    columns = list(zip(*rows_with_flag(rows), strict=True)) if rows else [[] for _ in schema]
    return pa.Table.from_arrays(
        [pa.array(list(c), f.type) for c, f in zip(columns, schema, strict=True)], schema=schema
    )


def refusal() -> Refusal:
    return Refusal(FLAG, ["k"], lambda example: ValueError(f"refused row for {example}"))


def outcome(table: VersionedTable, writes: list, held: bool, base: list[tuple]) -> dict:
    """Write `base` and commit it, then `writes` into one hot delta (by the driver or by
    Spark), commit what was written; what happened, comparably."""
    spark = table.spark
    if base:
        table.write_delta(local_frame(spark, [(k, *values) for k, values, _, _ in base], SCHEMA))
    hot = table.open_delta()
    happened = []
    for number, (rows, replaced) in enumerate(writes, start=1):
        last = number == len(writes)
        try:
            if held:
                replacing = None if replaced is None else HeldReplacement(("k",), frozenset((k,) for k in replaced))
                stats = hot.write_held(arrow_rows(rows), refusal=refusal(), last=last, replacing=replacing)
            else:
                keys = sorted(replaced or ())
                replacing = (
                    None
                    if replaced is None
                    else Replacement(lambda versions, _, keys=keys: versions.where(in_values("k", keys, LongType())))
                )
                stats = hot.write(
                    local_frame(spark, rows_with_flag(rows), WITH_FLAG),
                    refusal=refusal(),
                    last=last,
                    replacing=replacing,
                )
            happened.append(("written", stats))
        except (VersionedTableError, ValueError) as exc:
            happened.append(refused(exc, table.name))
    hot.commit()
    state = {tuple(_comparable(v) for v in row) for row in table.read_actual().drop("update_ts").collect()}
    history = {
        tuple(_comparable(v) for v in row)
        for row in table.read_started_in(1, 10).unionByName(table.read_finished_in(1, 10)).drop("update_ts").collect()
    }
    return {"happened": happened, "state": state, "history": history}


def refused(exc: Exception, table: str) -> tuple:
    """A refusal, comparably: its kind, its text without the table's name and the keys it
    names, and the keys it names (every key at fault: at most five keys are written; a
    refused row names one example, which either way may be any)."""
    text = str(exc).replace(f"table {table!r}", "table")
    keys = sorted(set(re.findall(r"\{'k': (\d+)\}", text)))
    example_only = isinstance(exc, ValueError)
    return (
        type(exc).__name__,
        re.sub(r"\[?\{'k': \d+\}(, \{'k': \d+\})*\]?", "<keys>", text),
        [] if example_only else keys,
    )


def _comparable(value: object) -> object:
    """NaN as a value that equals itself (rows are compared as sets)."""
    return "NaN" if isinstance(value, float) and value != value else value


@pytest.fixture
def plane(sqlite_url):
    return connect(sqlite_url)


# No shrinking: a failing example's writes are printed, and shrinking Spark writes takes long.
@settings(
    max_examples=20,
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
    phases=[Phase.explicit, Phase.generate],
)
@given(base=ROWS, writes=st.lists(WRITE, min_size=1, max_size=2))
def test_a_write_held_by_the_driver_does_what_the_same_write_does_through_spark(
    spark, plane, tmp_path_factory, base, writes
):
    warehouse = str(tmp_path_factory.mktemp("held"))
    name = f"t{next(EXAMPLES)}"
    by_spark = VersionedTable(spark, plane, f"{name}_spark", ["k"], SCHEMA, warehouse=warehouse)
    by_driver = VersionedTable(spark, plane, f"{name}_driver", ["k"], SCHEMA, warehouse=warehouse)
    # The committed state: upserts only, one row per key, no NULL where none is allowed.
    committed = list({k: (k, values, 0, False) for k, values, _, _ in base if values[2] is not None}.values())

    assert outcome(by_driver, writes, True, committed) == outcome(by_spark, writes, False, committed)
