"""Dagster runs whose cost follows the changes: no Spark for no work, no materialization
without a committed output version, so nothing downstream wakes up for nothing.

The story: `posts` and `profiles` are versioned tables written outside Dagster (by the
test); `enriched_posts` and `user_post_stats` are incremental assets over them.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest
from pyspark.sql import DataFrame

from bench.posts_world import ENRICHED, STATS, count_posts, enrich
from offset_assets.dagster_adapter import OffsetStore, incremental_asset, on_input_commits
from offset_assets.engine import IncrementalEngine
from offset_assets.engine.pending import PendingWork, pending_work
from offset_assets.engine.vocabulary import WorkReason
from offset_assets.spark_jobs import count_spark_jobs
from tests.dagster_resources import engine_resources, three_posts

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def world(spark, sqlite_url, warehouse):
    return three_posts(spark, sqlite_url, warehouse)


@pytest.fixture
def resources(sqlite_url, warehouse):
    return engine_resources(OffsetStore(db_url=sqlite_url), warehouse)


def enriched_asset(**options) -> dg.AssetsDefinition:
    return incremental_asset(name="enriched_posts", transform_keys=["post_id"], primary_key=["post_id"],
                             schema=ENRICHED, join_keys={"profiles": {"user_id": "id"}}, **options)(enrich)


def stats_asset(upstream: str = "enriched_posts", name: str = "user_post_stats",
                **options) -> dg.AssetsDefinition:
    """Posts per user, over `upstream` (a post's text does not change the counts)."""

    def user_post_stats(posts: DataFrame) -> DataFrame:
        return count_posts(posts)

    return incremental_asset(name=name, transform_keys=["user_id"], primary_key=["user_id"],
                             schema=STATS, ins={"posts": upstream}, **options)(user_post_stats)


def events(result: dg.ExecuteInProcessResult, kind: str, key: str) -> list[dict]:
    """The metadata of each materialization or observation of `key` in the run."""
    data = [e.event_specific_data for e in result.all_events if e.event_type_value == kind]
    found = [getattr(d, "materialization", None) or d.asset_observation for d in data]
    return [{name: value.value for name, value in event.metadata.items()}
            for event in found if event.asset_key == dg.AssetKey(key)]


def test_a_run_with_nothing_to_do_is_an_observation_and_its_downstream_step_is_skipped(
        spark, world, resources):
    chain = [enriched_asset(), stats_asset()]
    assert dg.materialize(chain, resources=resources).success
    offsets = resources["offset_store"].get_offsets_for_transformation("enriched_posts")

    with count_spark_jobs(spark) as jobs:
        idle = dg.materialize(chain, resources=resources)

    assert idle.success
    assert jobs.count == 0, jobs.describe()
    assert events(idle, "ASSET_MATERIALIZATION", "enriched_posts") == []
    [observed] = events(idle, "ASSET_OBSERVATION", "enriched_posts")
    assert observed["changed_keys"] == 0 and observed["processed_keys"] == 0
    assert observed["offset_after.posts"] == offsets["posts"]
    assert observed["offset_after.profiles"] == offsets["profiles"]
    assert "dagster/row_count" not in observed  # counting rows would need Spark
    assert observed["inputs_committed_up_to"] <= observed["run_started_at"] <= observed["run_finished_at"]
    [skipped] = [e for e in idle.all_events if e.event_type_value == "STEP_SKIPPED"]
    assert skipped.step_key == "user_post_stats"
    assert events(idle, "ASSET_MATERIALIZATION", "user_post_stats") == []


def test_the_control_plane_answer_is_the_result_an_engine_run_would_report_but_commits_nothing(
        world, sqlite_url):
    engine = IncrementalEngine(world.spark, world.posts.plane)
    t = world.enriched_transformation(transformation_id="enriched_posts")
    names = ["posts", "profiles"]

    def work() -> PendingWork:
        return pending_work(world.posts.plane, "enriched_posts", names, ["enriched_posts"])

    assert (work().reason, work().request) == (WorkReason.first_run, None)
    engine.run_full(t)
    world.write_profiles([(2, "bob")])  # leaves the row as it is: no version, no work
    answer = work()
    answered = answer.idle_result(world.posts.plane, "r1")

    ran = engine.run_full(t, run_id="r1")

    assert answer.is_idle and ran.changed_keys == 0
    for field in ("process_ts", "snapshot_deltas", "offsets_before", "changed_keys", "processed_keys",
                  "rows_read", "rows_written", "deltas", "change_detection", "mode", "run_id"):
        assert getattr(answered, field) == getattr(ran, field), field
    # The run moved the profiles offset over the empty delta; the answer commits nothing.
    assert answered.offsets_after == answered.offsets_before
    assert ran.offsets_after == {**ran.offsets_before, "profiles": world.profiles.last_committed().commit_ts}
    world.write_posts([(12, 2, "c2")])
    assert work().reason == WorkReason.new_commits
    engine.request_reprocess(t)
    requested = work()
    assert (requested.reason, requested.reprocess_requested_at is not None) == (WorkReason.reprocess_requested, True)
    engine.run_full(t)
    assert work().is_idle
    engine.reset_offsets(t, "profiles")
    reset = work()
    assert (reset.reason, reset.reset_inputs) == (WorkReason.offsets_reset, ("profiles",))


def test_a_run_whose_output_kept_every_row_is_an_observation_and_wakes_no_automation(world, resources):
    # user_post_stats counts posts: an edit of a post's text changes no count.
    stats = stats_asset("posts", automation_condition=on_input_commits())
    report = stats_asset("user_post_stats", automation_condition=on_input_commits(), name="report")
    sources = [dg.AssetSpec("posts"), dg.AssetSpec("profiles")]
    instance = dg.DagsterInstance.ephemeral()
    assert dg.materialize([*sources, stats, report], resources=resources, instance=instance,
                          selection=[stats.key, report.key]).success
    defs = dg.Definitions(assets=[*sources, stats, report], resources=resources)
    cursor = dg.evaluate_automation_conditions(defs, instance).cursor

    world.write_posts([(11, 1, "b, edited")])
    unchanged = dg.materialize([*sources, stats], resources=resources, instance=instance,
                               selection=[stats.key])

    [observed] = events(unchanged, "ASSET_OBSERVATION", "user_post_stats")
    assert observed["changed_keys"] == 1 and observed["processed_keys"] == 1
    assert observed["rows_written.user_post_stats"] == 0 and observed["rows_deleted.user_post_stats"] == 0
    assert events(unchanged, "ASSET_MATERIALIZATION", "user_post_stats") == []
    assert "dagster/row_count" not in observed  # the table as it was: not counted again
    evaluation = dg.evaluate_automation_conditions(defs, instance, cursor=cursor)
    assert evaluation.get_num_requested(report.key) == 0

    world.write_posts([(13, 1, "new")])
    changed = dg.materialize([*sources, stats], resources=resources, instance=instance, selection=[stats.key])
    [materialized] = events(changed, "ASSET_MATERIALIZATION", "user_post_stats")
    assert materialized["rows_written.user_post_stats"] == 1
    assert materialized["dagster/row_count"] == 2  # users 1 and 2
    evaluation = dg.evaluate_automation_conditions(defs, instance, cursor=evaluation.cursor)
    assert evaluation.get_num_requested(report.key) == 1


def test_explicit_requests_materialize_even_when_no_output_row_changed(world, resources):
    enriched = enriched_asset()
    dg.materialize([enriched], resources=resources)

    listed = dg.materialize([enriched], resources=resources,
                            run_config={"ops": {"enriched_posts": {"config": {"changelist": [{"post_id": 10}]}}}})
    backfill = dg.materialize([enriched], resources=resources, tags={"dagster/backfill": "bf1"})

    [listed_meta] = events(listed, "ASSET_MATERIALIZATION", "enriched_posts")
    [backfill_meta] = events(backfill, "ASSET_MATERIALIZATION", "enriched_posts")
    assert listed_meta["processed_keys"] == 1 and listed_meta["rows_written.enriched_posts"] == 0
    assert backfill_meta["processed_keys"] == 3 and backfill_meta["rows_written.enriched_posts"] == 0


IDLE_RUN_IN_A_FRESH_PROCESS = """
import json, sys
import dagster as dg
from pyspark import SparkContext
from offset_assets.dagster_adapter import OffsetStore
from tests.dagster_resources import engine_resources
from tests.test_dagster_idle_runs import enriched_asset

db_url, warehouse = sys.argv[1:]
result = dg.materialize([enriched_asset()], resources=engine_resources(OffsetStore(db_url=db_url), warehouse))
print(json.dumps({
    "success": result.success,
    "observations": len([e for e in result.all_events if e.event_type_value == "ASSET_OBSERVATION"]),
    "materializations": len(result.asset_materializations_for_node("enriched_posts")),
    "jvm": SparkContext._gateway is not None,
}))
"""


def test_a_run_with_nothing_to_do_in_a_fresh_process_starts_no_jvm(world, resources, sqlite_url, warehouse):
    assert dg.materialize([enriched_asset()], resources=resources).success

    child = subprocess.run([sys.executable, "-c", IDLE_RUN_IN_A_FRESH_PROCESS, sqlite_url, warehouse],
                           cwd=ROOT, capture_output=True, text=True, timeout=300,
                           env={**os.environ, "PYTHONPATH": str(ROOT)})

    assert child.returncode == 0, child.stderr[-3000:]
    assert json.loads(child.stdout.strip().splitlines()[-1]) == {
        "success": True, "observations": 1, "materializations": 0, "jvm": False}
