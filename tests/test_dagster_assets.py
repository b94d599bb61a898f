"""Incremental assets in real Dagster runs (`materialize`, ephemeral instance, real Spark).

The story: `posts` and `profiles` are versioned tables written by an ingestion outside
Dagster (here by the test). `enriched_posts` is declared with `incremental_asset`
(the engine runs in the asset body); `user_post_stats` is a hand-written `@dg.asset`
made incremental by its metadata, so it reads `enriched_posts` through the
`OffsetIOManager` (load_input / handle_output).
"""

import dagster as dg
import pytest
from pyspark.sql import DataFrame

from offset_assets.control_plane import connect
from offset_assets.dagster_adapter import (
    OffsetIOManager,
    OffsetStore,
    SparkSessionResource,
    incremental_asset,
    incremental_metadata,
)
from tests.engine_story import ENRICHED, STATS, count_posts, enrich, make_world, rows_of


@pytest.fixture
def world(spark, sqlite_url, warehouse):
    return make_world(spark, connect(sqlite_url), warehouse)


@pytest.fixture
def store(sqlite_url):
    return OffsetStore(db_url=sqlite_url)


@pytest.fixture
def resources(store, warehouse):
    return {
        "io_manager": OffsetIOManager(offset_store=store, spark=SparkSessionResource(),
                                      warehouse=warehouse),
        "offset_store": store,
    }


def seed(world):
    world.write_profiles([(1, "ann"), (2, "bob"), (3, "cyd")])
    world.write_posts([(10, 1, "a"), (11, 1, "b"), (12, 2, "c"), (13, 3, "d")])


def enriched_asset(func=enrich, **options):
    """`enriched_posts` (posts joined with the author's profile) via the decorator."""
    return incremental_asset(
        name="enriched_posts",
        transform_keys=["post_id"],
        primary_key=["post_id"],
        schema=ENRICHED,
        join_keys={"profiles": {"user_id": "id"}},
        **options,
    )(func)


def user_post_stats_asset(fail: dict | None = None):
    """A plain Dagster asset, incremental through the IO manager; `fail["now"]` makes
    its body raise."""

    @dg.asset(metadata=incremental_metadata(transform_keys=["user_id"], primary_key=["user_id"],
                                            schema=STATS))
    def user_post_stats(enriched_posts: DataFrame) -> DataFrame:
        if fail and fail["now"]:
            raise RuntimeError("the asset body broke")
        return count_posts(enriched_posts)

    return user_post_stats


def materialization(result, key: str) -> dict:
    [event] = [m for m in result.asset_materializations_for_node(key)]
    return {name: value.value for name, value in event.metadata.items()}


def test_second_materialization_of_a_chain_processes_only_the_changed_posts(
        world, resources, store):
    seed(world)
    enriched, stats_asset = enriched_asset(), user_post_stats_asset()

    first = dg.materialize([enriched, stats_asset], resources=resources)
    assert first.success
    meta = materialization(first, "enriched_posts")
    assert meta["changed_keys"] == 4
    assert meta["rows_read.posts"] == 4 and meta["rows_read.profiles"] == 3
    assert meta["rows_written.enriched_posts"] == 4
    assert meta["offset_before.posts"] is None
    assert meta["offset_after.posts"] == world.posts.last_committed().commit_ts
    assert meta["change_detection"] == "v2" and meta["batches"] == 1
    assert materialization(first, "user_post_stats")["changed_keys"] == 3

    world.write_posts([(11, 1, "b2"), (14, 2, "e")])
    second = dg.materialize([enriched, stats_asset], resources=resources)
    meta = materialization(second, "enriched_posts")
    assert meta["changed_keys"] == 2
    assert meta["rows_read.posts"] == 2
    assert meta["rows_written.enriched_posts"] == 2
    stats_asset_meta = materialization(second, "user_post_stats")
    assert stats_asset_meta["changed_keys"] == 2  # users 1 and 2
    assert stats_asset_meta["rows_read.enriched_posts"] == 4  # all posts of users 1 and 2
    assert rows_of(world.enriched.read_actual()) == world.expected_enriched()
    assert rows_of(world.stats.read_actual()) == world.expected_stats()
    assert store.get_offsets_for_transformation("user_post_stats") == {
        "enriched_posts": world.enriched.last_committed().commit_ts
    }
