from pyspark.sql import DataFrame


def enriched_orders(orders: DataFrame, customers: DataFrame) -> DataFrame:
    """Each order with its customer's current country."""
    countries = customers.select("customer_id", "country")
    return orders.join(countries, on="customer_id", how="left").select(
        "order_id", "customer_id", "country", "amount_cents"
    )
