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
from offset_assets.engine.loading import KeyValues
from offset_assets.versioned.table import VersionedTable

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
