"""The pipeline: ingestion from the shop's database, three incremental transformations,
their offset checks, a sensor and a schedule, wired in one `Definitions` (`defs`)."""

import os
from datetime import UTC, datetime, timedelta

import dagster as dg
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from offset_assets.dagster_adapter import (
    AutoIncrementIdPlanner,
    IncrementalEngineResource,
    IncrementalOut,
    IngestionJob,
    OffsetIOManager,
    OffsetStore,
    SparkSessionResource,
    SqlTableSource,
    TargetTable,
    TimeWindowPlanner,
    build_ingestion_schedule,
    build_ingestion_sensor,
    build_offset_checks,
    incremental_asset,
    incremental_multi_asset,
    ingestion_asset,
    on_input_commits,
    validate_definitions,
)

from .source import SOURCE_URL

# -- ingestion: the source's rows into versioned tables ---------------------------------

CUSTOMERS = T.StructType([
    T.StructField("customer_id", T.LongType(), False),
    T.StructField("name", T.StringType(), True),
    T.StructField("country", T.StringType(), True),
    T.StructField("updated_at", T.DoubleType(), True),
])
ORDERS = T.StructType([
    T.StructField("order_id", T.LongType(), False),
    T.StructField("customer_id", T.LongType(), True),
    T.StructField("amount_cents", T.LongType(), True),
])


def live_since() -> datetime:
    """The first daily window of customers: `SHOP_LIVE_SINCE` (an ISO date, UTC), the day
    the source went live. Without it, today: enough to follow the guide within a day. Pin
    it for anything longer: a start that moves with the clock skips the windows it passes."""
    pinned = os.environ.get("SHOP_LIVE_SINCE")
    if pinned:
        return datetime.fromisoformat(pinned)
    return datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0, tzinfo=None)


def orders_job(source_url: str) -> IngestionJob:
    """New orders by auto-increment id ranges (last id ingested, max id at the source]."""
    return IngestionJob(
        name="orders",
        source=SqlTableSource(source_url, "orders", id_column="order_id"),
        planner=AutoIncrementIdPlanner(),
        target=TargetTable("orders", ["order_id"], ORDERS),
    )


def customers_job(source_url: str, start: datetime) -> IngestionJob:
    """Customers by daily windows of `updated_at`: new customers and changed ones."""
    return IngestionJob(
        name="customers",
        source=SqlTableSource(source_url, "customers", time_column="updated_at"),
        planner=TimeWindowPlanner(start, timedelta(days=1)),
        target=TargetTable("customers", ["customer_id"], CUSTOMERS),
    )


# -- transformations: functions of the changed keys' rows --------------------------------

ENRICHED_ORDERS = T.StructType([
    T.StructField("order_id", T.LongType(), False),
    T.StructField("customer_id", T.LongType(), True),
    T.StructField("country", T.StringType(), True),
    T.StructField("amount_cents", T.LongType(), True),
])
REVENUE = T.StructType([
    T.StructField("country", T.StringType(), False),
    T.StructField("orders", T.LongType(), False),
    T.StructField("revenue_cents", T.LongType(), False),
])
LARGE_ORDER_CENTS = 10_000


@incremental_asset(
    transform_keys=["order_id"],
    primary_key=["order_id"],
    schema=ENRICHED_ORDERS,
    # customers is a reference input: read only for the customers of the orders processed,
    # and a changed customer re-processes every order pointing at it.
    join_keys={"customers": {"customer_id": "customer_id"}},
    automation_condition=on_input_commits(),
)
def enriched_orders(orders: DataFrame, customers: DataFrame) -> DataFrame:
    """Each order with its customer's current country."""
    countries = customers.select("customer_id", "country")
    return orders.join(countries, on="customer_id", how="left").select(
        "order_id", "customer_id", "country", "amount_cents")


@incremental_asset(
    transform_keys=["country"],
    primary_key=["country"],
    schema=REVENUE,
    automation_condition=on_input_commits(),
)
def revenue_by_country(enriched_orders: DataFrame) -> DataFrame:
    """Orders and revenue per country (only the countries whose orders changed are recomputed)."""
    return enriched_orders.groupBy("country").agg(
        F.count("*").alias("orders"), F.sum("amount_cents").alias("revenue_cents"))


@incremental_multi_asset(
    outs={
        "large_orders": IncrementalOut(primary_key=["order_id"], schema=ORDERS,
                                       description=f"Orders of {LARGE_ORDER_CENTS} cents or more."),
        "small_orders": IncrementalOut(primary_key=["order_id"], schema=ORDERS,
                                       description=f"Orders under {LARGE_ORDER_CENTS} cents."),
    },
    transform_keys=["order_id"],
    automation_condition=on_input_commits(),
)
def order_sizes(orders: DataFrame) -> dict[str, DataFrame]:
    """Orders split by amount: one transformation, two output assets committed together."""
    large = F.col("amount_cents") >= LARGE_ORDER_CENTS
    return {"large_orders": orders.where(large), "small_orders": orders.where(~large)}


TRANSFORMATIONS = [enriched_orders, revenue_by_country, order_sizes]

# Per transformation and input: offset age (warn after an hour, error after a day) and
# backlog (committed input versions beyond the offset), from the control plane only.
OFFSET_CHECKS = build_offset_checks(TRANSFORMATIONS)


# -- resources and Definitions -----------------------------------------------------------


def local_resources() -> dict[str, object]:
    """Control plane and warehouse under ./state (OFFSET_ASSETS_HOME), Spark local[*]."""
    offset_store = OffsetStore()  # or OffsetStore(db_url="postgresql://...")
    spark = SparkSessionResource(spark_config={"spark.sql.shuffle.partitions": "4"})
    engine = IncrementalEngineResource(offset_store=offset_store, spark=spark)
    return {
        "offset_store": offset_store,  # checks and sensors: the control plane only
        "incremental_engine": engine,  # asset bodies: Spark, tables, offsets
        "io_manager": OffsetIOManager(engine=engine),  # serves each table downstream
    }


def build_definitions(source_url: str, start: datetime) -> dg.Definitions:
    """Everything, for the shop's database at `source_url` and customers' windows from `start`."""
    orders_ingestion, customers_ingestion = orders_job(source_url), customers_job(source_url, start)
    orders = ingestion_asset(orders_ingestion)
    customers = ingestion_asset(customers_ingestion)
    # Refuses an input that names no asset, or a key that is no column of its input.
    return validate_definitions(dg.Definitions(
        assets=[orders, customers, *TRANSFORMATIONS],
        asset_checks=OFFSET_CHECKS,
        sensors=[
            # Plans the next id range of orders, adds it as a partition and runs it.
            build_ingestion_sensor(orders_ingestion, orders),
            # Runs the transformations once their inputs have committed.
            dg.AutomationConditionSensorDefinition(
                "transformations_automation", target=dg.AssetSelection.assets(*TRANSFORMATIONS),
                default_status=dg.DefaultSensorStatus.RUNNING),
        ],
        # Each daily window of customers once it has closed.
        schedules=[build_ingestion_schedule(customers)],
        resources=local_resources(),
        # One Spark driver in the run's process, shared by its steps.
        executor=dg.in_process_executor,
    ))


defs = build_definitions(SOURCE_URL, live_since())
