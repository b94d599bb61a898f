"""Definition mistakes that need no Spark are refused when the asset is declared (the
module loads), with `DagsterInvalidDefinitionError` naming the asset, the key and the
schema's columns, not after a run's Spark session started. No Spark here."""

from __future__ import annotations

import dagster as dg
import pytest
from pyspark.sql.types import ArrayType, LongType, MapType, StringType, StructField, StructType

from offset_assets.dagster_adapter import (
    IncrementalOut,
    OnFailedKeys,
    incremental_asset,
    incremental_metadata,
    incremental_multi_asset,
)
from offset_assets.dagster_adapter.asset_spec import IncrementalSpec

ENRICHED = StructType([StructField("post_id", LongType(), False), StructField("text", StringType(), True)])


def declare(**options):
    settings = {"transform_keys": ["post_id"], "primary_key": ["post_id"], "schema": ENRICHED, **options}

    @incremental_asset(**settings)
    def enriched_posts(posts):
        return posts

    return enriched_posts


def test_a_transform_key_missing_from_the_output_schema_is_refused_at_declaration():
    with pytest.raises(dg.DagsterInvalidDefinitionError,
                       match=r"transform key column\(s\) \['user_id'\] not in the output schema's columns "
                             r"\['post_id', 'text'\]"):
        declare(transform_keys=["post_id", "user_id"])


def test_a_primary_key_missing_from_the_output_schema_is_refused_at_declaration():
    with pytest.raises(dg.DagsterInvalidDefinitionError,
                       match=r"primary key column\(s\) \['id'\] not in the output schema's columns "
                             r"\['post_id', 'text'\]"):
        declare(primary_key=["id"])


def test_an_empty_primary_key_or_transform_key_list_is_refused():
    with pytest.raises(dg.DagsterInvalidDefinitionError, match="the output primary key names no column"):
        declare(primary_key=[])
    with pytest.raises(dg.DagsterInvalidDefinitionError, match="the output transform key names no column"):
        declare(transform_keys=[])


@pytest.mark.parametrize(
    ("schema", "refused"),
    [
        (StructType([StructField("post_id", LongType()), StructField("post_id", StringType())]),
         r"duplicate column\(s\) \['post_id'\] in the schema \['post_id', 'post_id'\]"),
        (StructType([StructField("post_id", LongType()), StructField("sys_from", LongType())]),
         r"column\(s\) \['sys_from'\] are reserved for version metadata"),
        (StructType([StructField("post_id", LongType()), StructField("${hivevar:x}", StringType())]),
         r"column name\(s\) \['\$\{hivevar:x\}'\] hold '\$\{'"),
        (StructType([StructField("post_id", LongType()),
                     StructField("tags", ArrayType(MapType(StringType(), StringType())))]),
         r"column\(s\) \['tags'\] hold maps, which cannot be compared"),
        ('{"type": "long"}', r"the schema is not a Spark StructType: \{\"type\": \"long\"\}"),
    ],
    ids=["duplicate-column", "reserved-column", "variable-in-column-name", "map-column", "not-a-struct"],
)
def test_a_schema_the_table_would_refuse_is_refused_at_declaration(schema, refused):
    with pytest.raises(dg.DagsterInvalidDefinitionError, match=refused):
        declare(schema=schema)


@pytest.mark.parametrize(
    ("options", "refused"),
    [
        ({"batch_size": 0}, "batch_size must be an integer >= 1, got 0"),
        ({"commit_mode": "sometimes"}, r"commit_mode must be one of \('end', 'batch'\), got 'sometimes'"),
        ({"change_detection": "v3"}, r"change_detection must be one of \('v2', 'v1'\), got 'v3'"),
        ({"on_failed_keys": "ignore"}, r"on_failed_keys must be one of \('raise', 'warn'\), got 'ignore'"),
    ],
    ids=["batch-size", "commit-mode", "change-detection", "on-failed-keys"],
)
def test_an_engine_option_outside_its_values_is_refused_at_declaration(options, refused):
    with pytest.raises(dg.DagsterInvalidDefinitionError, match=refused):
        declare(**options)


def test_every_mistake_of_a_definition_is_named_in_one_error():
    with pytest.raises(dg.DagsterInvalidDefinitionError) as refused:
        declare(transform_keys=["user_id"], primary_key=["id"], batch_size=0)
    message = str(refused.value)
    assert "batch_size must be" in message
    assert "primary key column(s) ['id']" in message and "transform key column(s) ['user_id']" in message


def test_a_multi_asset_output_missing_a_transform_key_is_refused_naming_the_transformation():
    with pytest.raises(dg.DagsterInvalidDefinitionError,
                       match=r"incremental asset 'rejected' \(an output of 'moderated_posts'\): transform key "
                             r"column\(s\) \['post_id'\] "
                             r"not in the output schema's columns \['id', 'text'\]"):
        @incremental_multi_asset(
            outs={"accepted": IncrementalOut(["post_id"], ENRICHED),
                  "rejected": IncrementalOut(["id"], StructType([StructField("id", LongType()),
                                                                 StructField("text", StringType())]))},
            transform_keys=["post_id"])
        def moderated_posts(posts):
            return {"accepted": posts, "rejected": posts}


CATEGORY_REVENUE = StructType([StructField("customer_id", LongType(), False),
                               StructField("category", StringType(), True), StructField("revenue", LongType())])
NARROWER = (
    "primary_key ['customer_id'] is narrower than transform_keys ['customer_id', 'category']: the rows of "
    "transform keys that differ only in 'category' would share a primary key (two states of one row in one "
    "write); a run replaces each processed key's output rows, so an output's primary key must tell which "
    "transform key a row belongs to: declare primary_key ['customer_id', 'category'] (or one with a column "
    "that tells it)")


def test_a_primary_key_narrower_than_the_transform_keys_is_refused_at_declaration_naming_the_asset():
    """Revenue per (customer, category) keyed by customer alone: every run would write two
    states of a customer's row and fail, leaving the keys failed for ever."""
    with pytest.raises(dg.DagsterInvalidDefinitionError) as refused:
        @incremental_asset(transform_keys=["customer_id", "category"], primary_key=["customer_id"],
                           schema=CATEGORY_REVENUE)
        def category_revenue(orders):
            return orders
    assert str(refused.value) == f"incremental asset 'category_revenue': {NARROWER}"

    with pytest.raises(dg.DagsterInvalidDefinitionError) as refused:
        @incremental_multi_asset(
            outs={"by_category": IncrementalOut(["customer_id", "category"], CATEGORY_REVENUE),
                  "by_customer": IncrementalOut(["customer_id"], CATEGORY_REVENUE, key=["shop", "by_customer"])},
            transform_keys=["customer_id", "category"])
        def revenue_split(orders):
            return {"by_category": orders, "by_customer": orders}
    assert str(refused.value) == f"incremental asset 'shop/by_customer' (an output of 'revenue_split'): {NARROWER}"


def test_a_primary_key_wider_than_the_transform_keys_or_beside_them_is_accepted():
    # A post's rows keyed by (post, text); rows keyed by a column beside the transform key.
    assert declare(transform_keys=["post_id"], primary_key=["post_id", "text"]).key == dg.AssetKey("enriched_posts")
    assert declare(transform_keys=["post_id"], primary_key=["text"]).key == dg.AssetKey("enriched_posts")


def test_a_plain_asset_made_incremental_by_metadata_is_checked_the_same_way():
    with pytest.raises(dg.DagsterInvalidDefinitionError, match=r"transform key column\(s\) \['user_id'\]"):
        incremental_metadata(transform_keys=["user_id"], primary_key=["post_id"], schema=ENRICHED)


def test_the_error_names_the_asset_it_is_given():
    with pytest.raises(dg.DagsterInvalidDefinitionError,
                       match=r"incremental asset 'enriched_posts': primary key column\(s\) \['id'\]"):
        IncrementalSpec(transform_keys=("post_id",), primary_key=("id",), schema_json=ENRICHED.json(),
                        asset="enriched_posts")


def test_a_valid_definition_is_declared():
    assert declare().key == dg.AssetKey("enriched_posts")


def test_the_failed_keys_policy_is_its_enum_or_the_string_users_write_and_is_stored_as_the_string():
    key = dg.AssetKey("enriched_posts")
    stored = [declare(on_failed_keys=policy).metadata_by_key[key]["offset_assets/incremental"]
              for policy in (OnFailedKeys.WARN, "warn")]

    assert [(type(raw["on_failed_keys"]), raw["on_failed_keys"]) for raw in stored] == [(str, "warn"), (str, "warn")]
    assert IncrementalSpec.from_metadata({"offset_assets/incremental": stored[0]}).on_failed_keys == OnFailedKeys.WARN


def test_a_single_asset_missing_its_primary_key_is_refused_naming_the_asset():
    with pytest.raises(dg.DagsterInvalidDefinitionError,
                       match=r"incremental asset 'enriched_orders': primary key column\(s\) \['order_id'\]"):
        @incremental_asset(transform_keys=["id"], primary_key=["order_id"], schema=ENRICHED)
        def enriched_orders(posts):
            return posts
