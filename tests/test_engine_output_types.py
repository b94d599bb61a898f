"""An output column of the wrong type fails its batch, naming the transformation, the
table, the column, the declared and the returned type; no output delta is committed
(real Spark, through the engine). Conversions that lose no value stay accepted.
"""

from __future__ import annotations

import pytest
from pyspark.sql import functions as F
from pyspark.sql.types import DoubleType, LongType, StringType, StructField, StructType

from offset_assets.control_plane import connect
from offset_assets.control_plane.delta_catalog import DeltaCatalog
from offset_assets.engine import IncrementalEngine
from offset_assets.engine.transformation import Transformation, TransformInput
from offset_assets.versioned import VersionedTable

ORDERS = StructType([StructField("order_id", LongType(), False), StructField("amount", StringType(), True),
                     StructField("quantity", LongType(), True)])
REVENUE = StructType([StructField("order_id", LongType(), False), StructField("revenue", DoubleType(), True),
                      StructField("units", LongType(), True)])


def revenue_transformation(source: VersionedTable, target: VersionedTable, **columns) -> Transformation:
    return Transformation(
        transformation_id="order_revenue",
        inputs=[TransformInput(source)],
        transform_keys=["order_id"],
        outputs=[target],
        func=lambda orders: orders.select("order_id", *[c.alias(name) for name, c in columns.items()]),
    )


@pytest.fixture
def tables(spark, sqlite_url, warehouse):
    plane = connect(sqlite_url)
    orders = VersionedTable(spark, plane, "orders", ["order_id"], ORDERS, warehouse=warehouse)
    revenue = VersionedTable(spark, plane, "revenue", ["order_id"], REVENUE, warehouse=warehouse)
    orders.write_delta(spark.createDataFrame([(1, "10.5", 2), (2, "20.25", 3)], ORDERS))
    return orders, revenue


def test_a_string_column_declared_double_fails_the_batch_and_commits_no_output(spark, tables):
    # Before the fix, the string met the typed tombstones in a union, which (ANSI rules)
    # converted it to double first: the run stored 10.5 and 20.25 as doubles.
    orders, revenue = tables
    result = IncrementalEngine(spark, orders.plane).run_full(
        revenue_transformation(orders, revenue, revenue=F.col("amount"), units=F.col("quantity")))
    assert (result.processed_keys, result.failed_keys) == (0, 2)
    assert len(result.errors) == 1
    assert ("transformation 'order_revenue': output 'revenue' returned column(s) of the wrong type "
            "['revenue: string (declared double)']; only conversions that lose no value are made") in result.errors[0]
    assert DeltaCatalog(orders.plane).last_committed("revenue") is None
    assert result.rows_written.get("revenue", 0) == 0


def test_every_wrong_column_is_named_with_both_types(spark, tables):
    orders, revenue = tables
    result = IncrementalEngine(spark, orders.plane).run_full(
        revenue_transformation(orders, revenue, revenue=F.col("quantity"), units=F.col("amount")))
    assert "['revenue: bigint (declared double)', 'units: string (declared bigint)']" in result.errors[0]
    assert DeltaCatalog(orders.plane).last_committed("revenue") is None


def test_widenings_that_lose_no_value_are_accepted_and_stored_in_the_declared_types(spark, tables):
    orders, revenue = tables
    result = IncrementalEngine(spark, orders.plane).run_full(revenue_transformation(
        orders, revenue,
        revenue=F.col("quantity").cast("int") * F.lit(2),  # int -> double
        units=F.col("quantity").cast("short"),  # smallint -> bigint
    ))
    assert (result.processed_keys, result.failed_keys, result.errors) == (2, 0, [])
    stored = revenue.read_actual().select("order_id", "revenue", "units")
    assert [f.dataType.simpleString() for f in stored.schema.fields] == ["bigint", "double", "bigint"]
    assert sorted(tuple(r) for r in stored.collect()) == [(1, 4.0, 2), (2, 6.0, 3)]
