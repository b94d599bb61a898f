"""What a materialization reports when it reprocesses because of a request made outside
Dagster, and what it says when a batch fails (real Dagster `materialize`, real Spark).

The story: `posts` and `profiles` are written outside Dagster; `enriched_posts` is an
`incremental_asset`, `user_post_stats` a plain asset made incremental by its metadata
(the IO manager's path). An operator runs `offset-assets reprocess`; the next plain
materialization must say that it reprocessed, and why. A typo in a column name, or a
function that refuses a batch holding a deletion, must be said in one line.
"""

import logging

import dagster as dg
import pytest
from click.testing import CliRunner
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from bench.posts_world import ENRICHED, STATS, count_posts, enrich, rows_of
from offset_assets.cli import main
from offset_assets.control_plane.reprocess import ReprocessRequests
from offset_assets.dagster_adapter import OffsetStore, incremental_asset, incremental_metadata
from offset_assets.dagster_adapter.incremental.run_report import iso_utc
from offset_assets.engine import IncrementalEngine
from offset_assets.engine.meta import meta_table
from offset_assets.engine.vocabulary import RunMode
from tests.dagster_resources import engine_resources, three_posts


@pytest.fixture
def world(spark, sqlite_url, warehouse):
    return three_posts(spark, sqlite_url, warehouse)


@pytest.fixture
def resources(sqlite_url, warehouse):
    return engine_resources(OffsetStore(db_url=sqlite_url), warehouse)


def enriched_asset(func):
    return incremental_asset(name="enriched_posts", transform_keys=["post_id"], primary_key=["post_id"],
                             schema=ENRICHED, join_keys={"profiles": {"user_id": "id"}})(func)


def user_post_stats_asset():
    @dg.asset(metadata=incremental_metadata(transform_keys=["user_id"], primary_key=["user_id"], schema=STATS))
    def user_post_stats(enriched_posts: DataFrame) -> DataFrame:
        return count_posts(enriched_posts)

    return user_post_stats


def metadata_of(event) -> dict:
    return {name: value.value for name, value in event.metadata.items()}


def test_a_run_after_a_cli_reprocess_request_is_reported_as_a_reprocess_naming_the_request(
        world, resources, sqlite_url):
    chain = [enriched_asset(enrich), user_post_stats_asset()]
    assert dg.materialize(chain, resources=resources).success
    offsets = resources["offset_store"].get_offsets_for_transformation("enriched_posts")
    for transformation in ("enriched_posts", "user_post_stats"):
        ran = CliRunner().invoke(main, ["--db-url", sqlite_url, "reprocess", transformation, "--yes"])
        assert ran.exit_code == 0, ran.output
    requested = ReprocessRequests(world.posts.plane).pending_request("enriched_posts")

    instance = dg.DagsterInstance.ephemeral()
    again = dg.materialize(chain, resources=resources, instance=instance)  # no tag: a plain run

    # Every key was processed again and each output left as it was; still a materialization
    # (an explicit request, like a backfill), labelled with the request that caused it.
    [enriched] = again.asset_materializations_for_node("enriched_posts")
    meta = metadata_of(enriched)
    reason = f"reprocess request of {iso_utc(requested.requested_at, 'seconds')}"
    assert (meta["mode"], meta["reset_reason"]) == ("reprocess", reason)
    assert (meta["processed_keys"], meta["rows_written.enriched_posts"]) == (3, 0)
    # The request deleted the offsets when it was made; the run names what they were.
    assert meta["offsets_reset"] == {name: iso_utc(ts) for name, ts in offsets.items()}
    assert f"Offsets reset by {reason}: " in meta["summary"]
    [stats] = again.asset_materializations_for_node("user_post_stats")  # the IO manager's path
    assert (metadata_of(stats)["mode"], metadata_of(stats)["processed_keys"]) == ("reprocess", 2)
    assert metadata_of(stats)["reset_reason"].startswith("reprocess request of ")
    tags = instance.get_run_by_id(again.run_id).tags
    assert tags["offset_assets/offsets_reset.enriched_posts"] == reason
    assert ReprocessRequests(world.posts.plane).pending("enriched_posts") is None

    quiet = dg.materialize(chain[:1], resources=resources)  # the request is done: nothing to do
    [observed] = quiet.asset_observations_for_node("enriched_posts")
    assert (metadata_of(observed)["mode"], "reset_reason" in metadata_of(observed)) == ("incremental", False)


def test_a_typo_in_a_column_name_is_said_in_one_line_without_the_query_plan(world, resources, caplog):
    def enrich_with_a_typo(posts: DataFrame, profiles: DataFrame) -> DataFrame:
        return posts.select("post_id", "user_id", "txet", F.lit(None).cast("string").alias("author"))

    with caplog.at_level(logging.DEBUG, logger="offset_assets.engine.run"):
        failed = dg.materialize([enriched_asset(enrich_with_a_typo)], resources=resources,
                                raise_on_error=False)

    [failure] = failed.get_step_failure_events()
    description = failure.step_failure_data.user_failure_data.description
    assert description.startswith("enriched_posts: 3 key(s) failed in 1 batch(es); they are retried by "
                                  "the next run: batch 0: AnalysisException: [UNRESOLVED_COLUMN")
    assert "`txet` cannot be resolved" in description and "Did you mean" in description
    assert "\n" not in description and "Project [" not in description
    [error] = {row.error for row in meta_table(world.spark, world.posts.plane,
                                               _transformation(world)).read_actual().collect()}
    assert error.startswith("AnalysisException: [UNRESOLVED_COLUMN") and "\n" not in error  # no plan kept
    [logged] = [r for r in caplog.records if r.levelno == logging.ERROR and r.name == "offset_assets.engine.run"]
    assert "`txet` cannot be resolved" in logged.getMessage() and "\n" not in logged.getMessage()
    [whole] = [r for r in caplog.records if r.levelno == logging.DEBUG and "failed:" in r.getMessage()]
    assert "Project [" in whole.getMessage()  # the plan: only at debug level


def _transformation(world):
    return world.enriched_transformation(transformation_id="enriched_posts")


def test_a_failed_batch_counts_its_deletions_apart_from_its_failed_keys(world):
    engine = IncrementalEngine(world.spark, world.posts.plane)
    refusing = {"on": False}

    def enrich_or_refuse(posts: DataFrame, profiles: DataFrame) -> DataFrame:
        if refusing["on"]:
            raise ValueError("enrichment service down")
        return enrich(posts, profiles)

    t = world.enriched_transformation(func=enrich_or_refuse)
    assert engine.run_full(t).processed_keys == 3
    world.write_posts([(10, 1, "a2"), (11, 1, "b2")], deletes=[12])
    refusing["on"] = True

    failed = engine.run_full(t)

    # The function failed for posts 10 and 11; post 12's deletion is in the same batch, so
    # it is not applied either: it waits with them, and is retried with them.
    assert (failed.changed_keys, failed.failed_keys, failed.deletions_waiting) == (3, 2, 1)
    assert not failed.succeeded and failed.mode == RunMode.incremental
    assert failed.failure_text() == (
        "enrich_posts: 2 key(s) failed in 1 batch(es), and 1 deletion(s) of the same batches wait "
        "with them; they are retried by the next run: batch 0: ValueError: enrichment service down")
    assert (12, 2, "c", "bob") in rows_of(world.enriched.read_actual())
    refusing["on"] = False
    retried = engine.run_full(t)
    assert (retried.processed_keys, retried.failed_keys, retried.rows_deleted["enriched_posts"]) == (3, 0, 1)
    assert rows_of(world.enriched.read_actual()) == world.expected_enriched()
