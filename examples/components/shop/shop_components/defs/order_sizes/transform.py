from pyspark.sql import DataFrame
from pyspark.sql import functions as F

LARGE_ORDER_CENTS = 10_000


def order_sizes(orders: DataFrame) -> dict[str, DataFrame]:
    """Orders split by amount: one transformation, two output assets committed together."""
    large = F.col("amount_cents") >= LARGE_ORDER_CENTS
    return {"large_orders": orders.where(large), "small_orders": orders.where(~large)}
