"""The pipeline: a Kafka topic of JSON order events ingested into the versioned table
`order_events`, and `customer_totals` computed from it for the customers whose events
changed. One `Definitions` (`defs`); the broker and topic come from the environment.

Each ingestion range is a partition of `order_events` (`kafka:<topic>/<partition>@<offset>,...`,
the offsets it starts at): the sensor plans the next range from the committed offsets in
job_log, and the run reads up to the partitions' last stable offsets, in read-committed
mode, on the Spark executors. The offsets reached are committed with the rows.

The topic is keyed by order id, as a compacted topic is: an order sent again replaces its
row (the last message of an order in a range wins, by offset), and a message with the
order's key and no value (a tombstone) deletes it. A value that does not fit is set aside
in `order_events__quarantine`, unless more than half of a range does not: then the range
fails, naming the column and the value.
"""

import os

import dagster as dg
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from offset_assets.dagster_adapter import (
    IncrementalEngineResource,
    IngestionJob,
    KafkaOffsetPlanner,
    KafkaSource,
    OffsetIOManager,
    OffsetStore,
    SparkSessionResource,
    TargetTable,
    build_ingestion_sensor,
    incremental_asset,
    ingestion_asset,
)

# A message's value, e.g. {"order_id": 1, "customer_id": 7, "amount_cents": 1200}, its key
# the order id ("1"): the source expands it into these columns (beside kafka_topic,
# kafka_partition, kafka_offset, ...).
ORDER_EVENT = T.StructType([
    T.StructField("order_id", T.LongType(), False),
    T.StructField("customer_id", T.LongType(), True),
    T.StructField("amount_cents", T.LongType(), True),
])
CUSTOMER_TOTALS = T.StructType([
    T.StructField("customer_id", T.LongType(), False),
    T.StructField("orders", T.LongType(), False),
    T.StructField("amount_cents", T.LongType(), False),
])


def order_events_job(bootstrap_servers: str, topic: str) -> IngestionJob:
    """The topic's messages, keyed by order: an order sent again replaces its row, a
    tombstone (the order's key, no value) deletes it, and a message whose value does not
    fit goes to the quarantine table."""
    return IngestionJob(
        name="order_events",
        source=KafkaSource(bootstrap_servers, [topic], value_schema=ORDER_EVENT, message_key="order_id"),
        # At most 10,000 offsets of each partition per range: a backlog becomes several ranges.
        planner=KafkaOffsetPlanner(max_offsets_per_partition=10_000),
        target=TargetTable("order_events", ["order_id"], ORDER_EVENT),
        on_malformed="quarantine",
    )


@incremental_asset(transform_keys=["customer_id"], primary_key=["customer_id"], schema=CUSTOMER_TOTALS)
def customer_totals(order_events: DataFrame) -> DataFrame:
    """Orders and amount per customer (only the customers with new events are recomputed)."""
    return order_events.groupBy("customer_id").agg(
        F.count("*").alias("orders"), F.sum("amount_cents").alias("amount_cents"))


def local_resources() -> dict[str, object]:
    """Control plane and warehouse under ./state (OFFSET_ASSETS_HOME), Spark local[*]."""
    offset_store = OffsetStore()
    engine = IncrementalEngineResource(offset_store=offset_store, spark=SparkSessionResource())
    return {"offset_store": offset_store, "incremental_engine": engine,
            "io_manager": OffsetIOManager(engine=engine)}


def build_definitions(bootstrap_servers: str, topic: str) -> dg.Definitions:
    """The ingestion asset with its sensor, and the transformation, for one topic."""
    job = order_events_job(bootstrap_servers, topic)
    order_events = ingestion_asset(job)
    return dg.Definitions(
        assets=[order_events, customer_totals],
        sensors=[build_ingestion_sensor(job, order_events)],
        resources=local_resources(),
        executor=dg.in_process_executor,
    )


defs = build_definitions(os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "localhost:9092"),
                         os.environ.get("ORDER_EVENTS_TOPIC", "order-events"))
