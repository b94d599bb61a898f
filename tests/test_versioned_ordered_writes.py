"""An ordered write (`StateOrder`: a source's own order of the rows it sends) keeps, of
several rows of one key, the state of the last one, in the same one pass and Spark job
as a write of one row per key; rows it cannot order still refuse the write, naming the
keys."""

from __future__ import annotations

from datetime import date, datetime
from decimal import Decimal

import pytest
from pyspark.sql.types import DoubleType, LongType, StringType, StructField, StructType

from offset_assets.control_plane import connect
from offset_assets.spark_jobs import count_spark_jobs
from offset_assets.versioned import VersionedTable, delta_files, hot_delta
from offset_assets.versioned.errors import ConflictingStatesError, UnorderedStatesError
from offset_assets.versioned.writes import StateOrder, descending

SCHEMA = StructType([
    StructField("id", LongType(), False),
    StructField("name", StringType(), True),
    StructField("score", DoubleType()),
])
# A change log: its sequence orders the rows (not stored), `part` scopes it.
ROWS = "id bigint, name string, score double, sys_op int, seq bigint, part int"


def table(spark, sqlite_url, warehouse, name="ordered"):
    return VersionedTable(spark, connect(sqlite_url), name, ["id"], SCHEMA, warehouse=warehouse)


def actual(table: VersionedTable) -> list[tuple]:
    return sorted(tuple(r) for r in table.read_actual().select(*SCHEMA.fieldNames()).collect())


def write(table: VersionedTable, df, rows: int | None, order: StateOrder | None):
    if order.within is None:
        df = df.drop("part")
    hot = table.open_delta()
    try:
        stats = hot.write(df, rows=rows, last=True, order=order)
    except BaseException:
        hot.rollback()
        raise
    hot.commit()
    return stats


@pytest.mark.parametrize(("counted", "large", "unique"), [
    (True, False, False), (False, False, False), (True, True, False), (False, True, False), (True, False, True),
    (True, True, True)])
def test_the_last_row_of_a_key_by_the_write_order_gives_its_state_and_the_rest_are_counted_superseded(
        spark, sqlite_url, warehouse, monkeypatch, counted, large, unique):
    """One pass or counted first, in one partition or shuffled; an order declared unique
    (no tie looked for: this history's ties are of one state) keeps the same states."""
    if large:
        monkeypatch.setattr(hot_delta, "SMALL_WRITE_ROWS", 0)
        monkeypatch.setattr(delta_files, "ROWS_PER_PARTITION", 1)
    target = table(spark, sqlite_url, warehouse)
    order = StateOrder("seq", unique=unique)
    first = spark.createDataFrame([
        (1, "a", 1.0, 0, 3, 0), (1, "a1", 1.5, 0, 7, 0), (1, "a0", 0.5, 0, 5, 0),  # 7 is last
        (2, "b", 2.0, 0, 1, 0),
        (3, "c", 3.0, 0, 2, 0), (3, None, None, 1, 4, 0),                            # deleted last
        (4, "d", 4.0, 0, 9, 0), (4, "d", 4.0, 0, 9, 0),                              # a duplicate
    ], ROWS)
    stats = write(target, first, 8 if counted else None, order)
    assert (stats.rows_upserted, stats.rows_deleted, stats.rows_unchanged, stats.rows_superseded) == (3, 0, 1, 4)
    assert stats.keys_written == 4
    assert actual(target) == [(1, "a1", 1.5), (2, "b", 2.0), (4, "d", 4.0)]

    # A key deleted and re-inserted within one write; a delete whose later upsert wins.
    second = spark.createDataFrame([
        (1, None, None, 1, 10, 0), (1, "again", 1.0, 0, 11, 0),
        (2, "b2", 2.0, 0, 10, 0), (2, None, None, 1, 12, 0),
        (5, "e", None, 0, None, 0), (5, "e2", None, 0, 1, 0),  # a null order is the lowest
    ], ROWS)
    stats = write(target, second, 6 if counted else None, order)
    assert (stats.rows_upserted, stats.rows_deleted, stats.rows_superseded) == (2, 1, 3)
    assert actual(target) == [(1, "again", 1.0), (4, "d", 4.0), (5, "e2", None)]


def test_an_ordered_write_of_one_row_per_key_runs_in_the_one_spark_job_of_an_unordered_one(
        spark, sqlite_url, warehouse):
    target = table(spark, sqlite_url, warehouse)
    rows = spark.createDataFrame([(i, f"n{i}", None, 0, i, 0) for i in range(20)], ROWS)
    with count_spark_jobs(spark) as jobs:
        stats = write(target, rows, 20, StateOrder("seq", within="part"))
    assert jobs.count == 1, jobs.describe()
    assert (stats.rows_upserted, stats.rows_superseded) == (20, 0)


def test_two_states_of_a_key_at_its_highest_order_are_refused_naming_the_key(spark, sqlite_url, warehouse):
    target = table(spark, sqlite_url, warehouse)
    tie = spark.createDataFrame([(1, "a", 1.0, 0, 3, 0), (1, "b", 1.0, 0, 3, 0), (1, "c", 1.0, 0, 1, 0),
                                 (2, "x", None, 0, 1, 0)], ROWS)
    with pytest.raises(ConflictingStatesError, match=r"key\(s\) \[\{'id': 1\}\] at the same highest 'seq'"):
        write(target, tie, 4, StateOrder("seq"))
    assert actual(target) == [] and target.last_committed() is None


def test_states_of_a_key_in_rows_whose_order_holds_within_different_scopes_are_refused_naming_them(
        spark, sqlite_url, warehouse):
    target = table(spark, sqlite_url, warehouse)
    order = StateOrder("seq", within="part")
    # Key 1 in partitions 0 and 2 with different states: offsets do not compare across them.
    spread = spark.createDataFrame([(1, "a", 1.0, 0, 8, 0), (1, "b", 1.0, 0, 3, 2), (1, "c", 1.0, 0, 5, 1),
                                    (2, "x", None, 0, 1, 0), (2, "y", None, 0, 2, 0)], ROWS)
    with pytest.raises(UnorderedStatesError) as refused:
        write(target, spread, 5, order)
    assert "key(s) {'id': 1} (part 0 and 2) in rows of different 'part'" in str(refused.value)
    assert (refused.value.keys, refused.value.spread) == ([{"id": 1}], [(0, 2)])
    # The same state sent to two partitions is one state.
    same = spark.createDataFrame([(1, "a", 1.0, 0, 8, 0), (1, "a", 1.0, 0, 3, 2)], ROWS)
    stats = write(target, same, 2, order)
    assert (stats.rows_upserted, stats.rows_superseded) == (1, 1)
    assert actual(target) == [(1, "a", 1.0)]


def test_an_order_column_the_table_stores_orders_the_rows_and_is_stored_with_the_last_state(
        spark, sqlite_url, warehouse):
    schema = StructType([StructField("id", LongType(), False), StructField("seq", LongType())])
    stored = VersionedTable(spark, connect(sqlite_url), "stored_order", ["id"], schema, warehouse=warehouse)
    rows = spark.createDataFrame([(1, 4, 0), (1, 9, 0), (1, None, 1)], "id bigint, seq bigint, sys_op int")
    stats = write(stored, rows, 3, StateOrder("seq"))
    assert (stats.rows_upserted, stats.rows_superseded) == (1, 2)
    assert [tuple(r) for r in stored.read_actual().select("id", "seq").collect()] == [(1, 9)]


def test_the_descending_order_mirrors_numbers_dates_and_timestamps_with_nulls_last(spark):
    values = {
        "bigint": [None, -(2**63), -1, 0, 7, 2**63 - 1],
        "double": [None, float("-inf"), -0.5, 0.0, 2.5, float("inf"), float("nan")],
        "decimal(10,2)": [None, Decimal("-3"), Decimal("0"), Decimal("1.25")],
        "date": [None, date(1, 1, 1), date(1970, 1, 1), date(2024, 2, 29)],
        "timestamp": [None, datetime(1900, 1, 1), datetime(2024, 1, 1, 12, 0, 0, 1)],
        "timestamp_ntz": [None, datetime(1900, 1, 1), datetime(2024, 1, 1, 12, 0, 0, 1)],
    }
    for type_name, ordered in values.items():
        frame = spark.createDataFrame([(i, v) for i, v in enumerate(ordered)], f"i int, v {type_name}")
        mirrored = frame.selectExpr("i", f"named_struct({descending('v', frame.schema['v'].dataType)}) AS d")
        by_descending = [r.i for r in mirrored.orderBy("d").collect()]
        # Ascending Spark order: nulls first, then the values; mirrored: the values from
        # the highest down, nulls last.
        assert by_descending == [*range(len(ordered) - 1, 0, -1), 0], type_name
    with pytest.raises(TypeError, match="'v' is string"):
        descending("v", StringType())
