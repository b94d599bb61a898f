"""What an incremental asset says of its inputs is checked against the other assets of its
definitions when they load (`validate_definitions`), one line per mistake, before any
Spark session: an input that names no asset, a transform key or a join key that is not a
column of its input, a resource something needs and the definitions lack (Dagster's own
`Definitions.validate_loadable` refuses a missing `offset_store` too). A run checks its
own asset again at its start, still without Spark.

The story: a shop's `orders` are ingested from a SQL table, `products` is a table written
outside Dagster and declared with its columns; `revenue_by_product` joins them.
"""

from __future__ import annotations

import dagster as dg
import pytest
from pyspark.sql import DataFrame
from pyspark.sql.types import LongType, StringType, StructField, StructType

from offset_assets.dagster_adapter import (
    AutoIncrementIdPlanner,
    IngestionJob,
    OffsetStore,
    SqlTableSource,
    TargetTable,
    build_ingestion_sensor,
    incremental_asset,
    ingestion_asset,
    table_metadata,
    validate_definitions,
)
from offset_assets.dagster_adapter.asset_spec import column_schema, schema_json
from tests.dagster_resources import engine_resources

ORDERS = StructType([StructField("order_id", LongType(), False), StructField("product_id", LongType(), True),
                     StructField("amount_cents", LongType(), True)])
PRODUCTS = StructType([StructField("product_id", LongType(), False), StructField("name", StringType(), True)])
REVENUE = StructType([StructField("order_id", LongType(), False), StructField("product", StringType(), True),
                      StructField("amount_cents", LongType(), True)])


def orders_asset() -> dg.AssetsDefinition:
    return ingestion_asset(IngestionJob(
        name="orders", source=SqlTableSource("sqlite:///shop.db", "orders", id_column="order_id"),
        planner=AutoIncrementIdPlanner(), target=TargetTable("orders", ["order_id"], ORDERS)))


def products_spec(**metadata) -> dg.AssetSpec:
    """A table written outside Dagster, declared with its columns (or without)."""
    columns = {"dagster/column_schema": column_schema(schema_json(PRODUCTS))}
    return dg.AssetSpec("products", metadata=metadata or columns)


def revenue_asset(transform_keys=("order_id",), join_keys=None):
    join_keys = join_keys or {"products": {"product_id": "product_id"}}

    @incremental_asset(transform_keys=list(transform_keys), primary_key=list(transform_keys), schema=REVENUE,
                       join_keys=join_keys)
    def revenue_by_product(orders: DataFrame, products: DataFrame) -> DataFrame:
        return orders.join(products, "product_id").select("order_id", "name", "amount_cents")

    return revenue_by_product


def resources() -> dict:
    """What the definitions' assets, checks and sensors need (nothing here connects)."""
    return engine_resources(OffsetStore())


def refused(*assets) -> list[str]:
    with pytest.raises(dg.DagsterInvalidDefinitionError) as raised:
        validate_definitions(dg.Definitions(assets=list(assets), resources=resources()))
    return str(raised.value).splitlines()


def test_a_parameter_that_names_no_asset_is_refused_when_the_definitions_load():
    @incremental_asset(transform_keys=["order_id"], primary_key=["order_id"], schema=REVENUE)
    def revenue_by_product(orders: DataFrame, product: DataFrame) -> DataFrame:
        return orders

    assert refused(orders_asset(), products_spec(), revenue_by_product) == [
        "incremental asset 'revenue_by_product': input 'product' names no asset of these definitions "
        "(did you mean 'products'?); declare a table written outside Dagster as dg.AssetSpec('product')"]


def test_a_join_key_that_is_no_column_of_the_reference_table_is_refused_when_the_definitions_load():
    assert refused(orders_asset(), products_spec(), revenue_asset(join_keys={"products": {"product_id": "id"}})) == [
        "incremental asset 'revenue_by_product': join_keys of 'products' name column 'id', not among the "
        "columns of input 'products': ['product_id', 'name']"]


def test_a_join_key_that_no_primary_input_has_is_refused_when_the_definitions_load():
    assert refused(orders_asset(), products_spec(),
                   revenue_asset(join_keys={"products": {"sku": "product_id"}})) == [
        "incremental asset 'revenue_by_product': join_keys of 'products' name column 'sku', which no input "
        "without join_keys has (input 'orders')"]


def test_a_transform_key_that_is_no_column_of_an_ingested_input_is_refused_when_the_definitions_load():
    # The output has the column; the ingestion asset's target table does not.
    assert refused(orders_asset(), products_spec(), revenue_asset(transform_keys=["order_id", "product"])) == [
        "incremental asset 'revenue_by_product': transform key(s) ['product'] not among the columns of "
        "input 'orders': ['order_id', 'product_id', 'amount_cents']"]


def test_every_mistake_is_its_own_line():
    @incremental_asset(transform_keys=["product_id"], primary_key=["product_id"], schema=PRODUCTS,
                       ins={"orders": "order"}, join_keys={"products": {"product_id": "sku"}})
    def summary(orders: DataFrame, products: DataFrame) -> DataFrame:
        return orders

    assert refused(orders_asset(), products_spec(), summary) == [
        "incremental asset 'summary': input 'orders' (asset order) names no asset of these definitions "
        "(did you mean 'orders'?); declare a table written outside Dagster as dg.AssetSpec('order')",
        "incremental asset 'summary': join_keys of 'products' name column 'sku', not among the columns of "
        "input 'products': ['product_id', 'name']",
    ]


def test_an_input_that_declares_no_columns_is_checked_for_its_name_only():
    plain_products = products_spec(owner="shop")
    defs = dg.Definitions(assets=[orders_asset(), plain_products, revenue_asset(join_keys={"products": {
        "product_id": "not_checked"}})], resources=resources())
    assert validate_definitions(defs) is defs


def test_a_plain_asset_written_by_the_io_manager_declares_its_columns_too():
    @dg.asset(metadata=table_metadata(primary_key=["product_id"], schema=PRODUCTS))
    def products() -> DataFrame: ...

    assert refused(orders_asset(), products, revenue_asset(join_keys={"products": {"product_id": "id"}}))[0].endswith(
        "join_keys of 'products' name column 'id', not among the columns of input 'products': ['product_id', 'name']")


def test_valid_definitions_load_unchanged():
    defs = dg.Definitions(assets=[orders_asset(), products_spec(), revenue_asset()], resources=resources())
    assert validate_definitions(defs) is defs


def test_a_missing_offset_store_is_refused_when_the_definitions_load_by_both_loaders():
    """The shop's orders with their range sensor, and revenue: resources without the
    control plane the sensor reads. Without the check the definitions would load, and the
    sensor's first tick in the daemon would be the first to say so."""
    orders = orders_asset()
    job = IngestionJob(name="orders", source=SqlTableSource("sqlite:///shop.db", "orders", id_column="order_id"),
                       planner=AutoIncrementIdPlanner(), target=TargetTable("orders", ["order_id"], ORDERS))
    without_store = {key: value for key, value in resources().items() if key != "offset_store"}
    defs = dg.Definitions(assets=[orders, products_spec(), revenue_asset()],
                          sensors=[build_ingestion_sensor(job, orders)], resources=without_store)

    with pytest.raises(dg.DagsterInvalidDefinitionError) as raised:
        validate_definitions(defs)
    assert str(raised.value).splitlines() == [
        "resource 'offset_store' is needed by asset 'orders', asset 'revenue_by_product' and sensor "
        "'orders_ranges_sensor'; these definitions provide none (they provide ['incremental_engine', "
        "'io_manager']); pass the engine's control plane: resources={'offset_store': engine.offset_store, ...}"]
    with pytest.raises(dg.DagsterInvalidDefinitionError,
                       match="resource with key 'offset_store' required by op 'orders' was not provided"):
        dg.Definitions.validate_loadable(defs)


def test_a_missing_engine_resource_is_named_with_what_needs_it_and_how_to_provide_it():
    defs = dg.Definitions(assets=[orders_asset(), products_spec(), revenue_asset()],
                          resources={"offset_store": OffsetStore()})
    with pytest.raises(dg.DagsterInvalidDefinitionError) as raised:
        validate_definitions(defs)
    assert str(raised.value).splitlines() == [
        "resource 'incremental_engine' is needed by asset 'orders' and asset 'revenue_by_product'; these "
        "definitions provide none (they provide ['offset_store']); pass resources={'incremental_engine': "
        "IncrementalEngineResource(offset_store=..., spark=...), ...}"]


def test_a_run_of_definitions_never_validated_names_a_mistyped_input_at_its_start(
        sqlite_url, warehouse):
    @incremental_asset(transform_keys=["order_id"], primary_key=["order_id"], schema=REVENUE)
    def revenue_by_product(orders: DataFrame, product: DataFrame) -> DataFrame:
        return orders

    @dg.asset(metadata=table_metadata(primary_key=["product_id"], schema=PRODUCTS))
    def products() -> DataFrame: ...

    ran = dg.materialize([orders_asset(), products, revenue_by_product], selection=[revenue_by_product.key],
                         resources=engine_resources(OffsetStore(db_url=sqlite_url), warehouse), raise_on_error=False)

    [failure] = ran.get_step_failure_events()
    assert failure.step_failure_data.user_failure_data.description.splitlines() == [
        "incremental asset 'revenue_by_product': input 'orders' has no versioned table 'orders' in the delta "
        "catalog yet: materialize orders first",
        "incremental asset 'revenue_by_product': input 'product' names 'product', which no asset of this code "
        "location materializes (did you mean 'products'?), and the delta catalog has no table 'product'",
    ]
