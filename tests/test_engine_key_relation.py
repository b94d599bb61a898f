"""The relation of a batch's keys held by the driver (`KeyValues.frame`): keys collected
from Spark go to the JVM as one Arrow table, a local relation whose size Spark knows (a
join with it in one partition plans no exchange), and come back exactly as they were,
whatever the column type; keys a caller gave are checked row by row."""

from __future__ import annotations

import datetime
import decimal

import pytest
from pyspark.sql.types import (
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from offset_assets.control_plane import connect
from offset_assets.engine import IncrementalEngine
from offset_assets.engine.loading import KeyValues
from offset_assets.engine.transformation import Transformation, TransformInput
from offset_assets.versioned.table import VersionedTable
from tests.conftest import process_time_zone
from tests.remote_story import REPEATED_HOUR, timestamp_keys_story

KEYS = StructType([
    StructField("a", LongType(), False), StructField("b", IntegerType()), StructField("c", StringType()),
    StructField("d", DateType()), StructField("e", TimestampType()), StructField("f", DecimalType(12, 3)),
    StructField("g", DoubleType()), StructField("h", BooleanType()), StructField("i", FloatType()),
    StructField("j", TimestampNTZType()), StructField("k", BinaryType()), StructField("l", ShortType()),
])


def test_collected_keys_of_every_type_become_a_local_relation_and_come_back_unchanged(spark, sqlite_url, warehouse):
    table = VersionedTable(spark, connect(sqlite_url), "keyed", list(KEYS.fieldNames()), KEYS, warehouse=warehouse)
    source = spark.createDataFrame([
        (1, 2, "x'y\\$", datetime.date(2020, 1, 2), datetime.datetime(2021, 3, 4, 5, 6, 7, 891011),
         decimal.Decimal("123.456"), 1.5, True, 2.25, datetime.datetime(2022, 1, 1, 1, 1, 1), b"\x00\x01", 7),
        (2, None, None, None, None, None, None, None, None, None, None, None),
    ], KEYS)
    rows = tuple(tuple(row) for row in source.collect())

    frame = KeyValues(tuple(KEYS.fieldNames()), rows, typed=True).frame(table)

    assert frame._jdf.queryExecution().optimizedPlan().toString().startswith("LocalRelation")
    assert tuple(tuple(row) for row in frame.collect()) == rows
    assert source.join(frame, on=["a", "c", "e", "f"], how="left_semi").count() == 1  # nulls match nothing


def test_keys_a_caller_gave_are_checked_against_the_columns_types(spark, sqlite_url, warehouse):
    table = VersionedTable(spark, connect(sqlite_url), "keyed", ["a"], StructType([KEYS["a"]]), warehouse=warehouse)

    with pytest.raises(TypeError, match="LongType"):
        KeyValues(("a",), (("not a number",),)).frame(table)


def readings_schema(at_type) -> StructType:
    return StructType([StructField("sensor", LongType(), False), StructField("at", at_type, False),
                       StructField("value", DoubleType())])


@pytest.mark.parametrize("session_zone", ["America/New_York", "UTC"])  # the process's: UTC, New York's
@pytest.mark.parametrize(("keys", "at_type"), [
    (["sensor", "at"], TimestampType()),  # two key columns: a relation of the keys
    (["at"], TimestampType()),  # one: an IN filter
    (["sensor", "at"], TimestampNTZType()),
    (["at"], TimestampNTZType()),
])
def test_timestamp_keys_are_found_when_the_session_time_zone_is_not_the_process_one(
        spark, sqlite_url, warehouse, keys, at_type, session_zone):
    # Collected timestamps are the process's local wall-clock times. Before the fix, their
    # relation read them in the session's time zone (a run found none of its keys' rows,
    # or failed on a time that zone repeats), and an IN filter compared a timestamp
    # without time zone in the session's zone with an instant of the process's.
    spark.conf.set("spark.sql.session.timeZone", session_zone)
    with process_time_zone("UTC" if session_zone != "UTC" else "America/New_York"):
        copy_readings_twice(spark, sqlite_url, warehouse, keys, at_type)


def copy_readings_twice(spark, sqlite_url, warehouse, keys, at_type) -> None:
    plane = connect(sqlite_url)
    schema = readings_schema(at_type)
    readings = VersionedTable(spark, plane, "readings", keys, schema, warehouse=warehouse)
    copied = VersionedTable(spark, plane, "copied", keys, schema, warehouse=warehouse)
    # 01:30:05 on 1 November 2026 happens twice in New York.
    at = [datetime.datetime(2026, 3, 8, 1, 30), datetime.datetime(2026, 11, 1, 1, 30, 5, 250)]
    readings.write_delta(spark.createDataFrame([(1, at[0], 1.0), (2, at[1], 2.0)], schema))
    t = Transformation("copy_readings", [TransformInput(readings)], keys, [copied], lambda readings: readings)
    engine = IncrementalEngine(spark, plane)
    assert engine.run_full(t).processed_keys == 2

    readings.write_delta(spark.createDataFrame([(2, at[1], 2.5)], schema))
    result = engine.run_full(t)

    assert (result.processed_keys, result.failed_keys, result.rows_deleted.get("copied", 0)) == (1, 0, 0)
    assert sorted(tuple(r) for r in copied.read_actual().select(*schema.names).collect()) == [
        (1, at[0], 1.0), (2, at[1], 2.5)]


def test_two_instants_of_the_hour_a_clock_turns_back_stay_two_keys(spark, sqlite_url, warehouse):
    # Collected as the process's naive local times, the two instants were one Python
    # value: a run processed one key of the two (in batches of one key here, so the meta
    # of several batches too). The same story runs over Spark Connect in
    # tests/test_spark_connect.py.
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    with process_time_zone("America/New_York"):
        told = timestamp_keys_story(spark, sqlite_url, warehouse)
    first, second = (int(at.timestamp()) * 10**6 for at in REPEATED_HOUR)
    assert told == {name: {"processed": [2, 1], "errors": [], "stored": [[first, 1.0], [second, 2.5]]}
                    for name in ("sensor_at", "at")}
