"""A requested reset or key list always runs, even when what is upstream in the same run
had nothing to do; a run without such work still stops the cascade at the idle asset.

The story: `posts` and `profiles` are written outside Dagster; `enriched_posts` ->
`user_post_stats` -> `post_report` are incremental assets. An operator asks from the shell
for `post_report` to be reprocessed, then materializes the three together, as
`dagster asset materialize --select ...` does (the code location's implicit asset job,
subset to the selection): the two upstream assets have nothing to do, and Dagster would
skip what is downstream of a step that yields no output.
"""

import dagster as dg
import pytest
from click.testing import CliRunner
from pyspark.sql import DataFrame

from bench.posts_world import ENRICHED, POSTS, PROFILES, STATS, count_posts, enrich, rows_of
from offset_assets.cli import main
from offset_assets.control_plane.offset_resets import OffsetResets
from offset_assets.control_plane.reprocess import ReprocessRequests
from offset_assets.dagster_adapter import OffsetStore, incremental_asset
from offset_assets.dagster_adapter.incremental.run_report import iso_utc
from offset_assets.spark_jobs import count_spark_jobs
from tests.dagster_resources import engine_resources, three_posts


@pytest.fixture
def world(spark, sqlite_url, warehouse):
    return three_posts(spark, sqlite_url, warehouse)


@pytest.fixture
def resources(sqlite_url, warehouse):
    return engine_resources(OffsetStore(db_url=sqlite_url), warehouse)


def chain() -> list[dg.AssetsDefinition]:
    """enriched_posts -> user_post_stats -> post_report (the same counts, one level further)."""
    enriched = incremental_asset(name="enriched_posts", transform_keys=["post_id"], primary_key=["post_id"],
                                 schema=ENRICHED, join_keys={"profiles": {"user_id": "id"}})(enrich)

    def user_post_stats(enriched_posts: DataFrame) -> DataFrame:
        return count_posts(enriched_posts)

    def post_report(user_post_stats: DataFrame) -> DataFrame:
        return user_post_stats

    stats, report = (incremental_asset(transform_keys=["user_id"], primary_key=["user_id"], schema=STATS)(fn)
                     for fn in (user_post_stats, post_report))
    return [enriched, stats, report]


def events(result: dg.ExecuteInProcessResult, kind: str, key: str) -> list[dict]:
    """The metadata of each materialization or observation of `key` in the run."""
    data = [e.event_specific_data for e in result.all_events if e.event_type_value == kind]
    found = [getattr(d, "materialization", None) or d.asset_observation for d in data]
    return [{name: value.value for name, value in event.metadata.items()}
            for event in found if event.asset_key == dg.AssetKey(key)]


def skipped_steps(result: dg.ExecuteInProcessResult) -> list[str]:
    return [e.step_key for e in result.all_events if e.event_type_value == "STEP_SKIPPED"]


def cli(sqlite_url: str, *args: str) -> None:
    ran = CliRunner().invoke(main, ["--db-url", sqlite_url, *args])
    assert ran.exit_code == 0, ran.output


def test_a_reprocess_request_two_levels_below_idle_assets_runs_when_the_run_selects_them_all(
        spark, world, resources, sqlite_url):
    assets = chain()
    assert dg.materialize(assets, resources=resources).success
    offsets = resources["offset_store"].get_offsets_for_transformation("post_report")
    cli(sqlite_url, "reprocess", "post_report", "--yes")
    requested = ReprocessRequests(world.posts.plane).pending_request("post_report")
    reason = f"reprocess request of {iso_utc(requested.requested_at, 'seconds')}"

    ran = dg.materialize(assets, resources=resources)

    assert ran.success and skipped_steps(ran) == []
    # The idle assets materialize (no Spark, nothing processed) and say for whom.
    [enriched] = events(ran, "ASSET_MATERIALIZATION", "enriched_posts")
    [stats] = events(ran, "ASSET_MATERIALIZATION", "user_post_stats")
    assert (enriched["changed_keys"], stats["changed_keys"]) == (0, 0)
    assert enriched["downstream_work"] == stats["downstream_work"] == f"- post_report: {reason}"
    assert "profile" not in enriched and enriched["dagster/row_count"] == 3
    assert f"materialized so that Dagster runs what waits downstream in this run: post_report: {reason}." \
        in stats["summary"]
    # The request ran, said why, and which offsets the shell's request had reset.
    [report] = events(ran, "ASSET_MATERIALIZATION", "post_report")
    assert (report["mode"], report["reset_reason"], report["processed_keys"]) == ("reprocess", reason, 2)
    assert report["offsets_reset"] == {"user_post_stats": iso_utc(offsets["user_post_stats"])}
    assert ReprocessRequests(world.posts.plane).pending("post_report") is None
    assert OffsetResets(world.posts.plane).recorded("post_report") is None

    # Nothing waits any more: the first idle asset stops the cascade again, without Spark.
    with count_spark_jobs(spark) as jobs:
        quiet = dg.materialize(assets, resources=resources)
    assert quiet.success and jobs.count == 0, jobs.describe()
    [observed] = events(quiet, "ASSET_OBSERVATION", "enriched_posts")
    assert "downstream_work" not in observed
    assert events(quiet, "ASSET_MATERIALIZATION", "enriched_posts") == []
    assert sorted(skipped_steps(quiet)) == ["post_report", "user_post_stats"]


def test_a_rescan_or_a_key_list_below_an_idle_asset_run_when_the_run_selects_both(
        world, resources, sqlite_url):
    enriched, stats, _ = chain()
    pair = [enriched, stats]
    assert dg.materialize(pair, resources=resources).success
    offsets = resources["offset_store"].get_offsets_for_transformation("user_post_stats")

    cli(sqlite_url, "rescan", "user_post_stats", "--yes")
    rescan = dg.materialize(pair, resources=resources)
    [upstream] = events(rescan, "ASSET_MATERIALIZATION", "enriched_posts")
    assert upstream["downstream_work"] == "- user_post_stats: offsets reset, re-reads enriched_posts"
    [rescanned] = (events(rescan, "ASSET_OBSERVATION", "user_post_stats")
                   + events(rescan, "ASSET_MATERIALIZATION", "user_post_stats"))
    recorded_at = rescanned["reset_reason"].removeprefix("rescan of ")
    assert rescanned["mode"] == "incremental" and recorded_at <= iso_utc(rescanned["run_started_at"], "seconds")
    assert rescanned["offsets_reset"] == {"enriched_posts": iso_utc(offsets["enriched_posts"])}

    listed = dg.materialize(pair, resources=resources, run_config={
        "ops": {"user_post_stats": {"config": {"changelist": [{"user_id": 2}]}}}})
    [upstream] = events(listed, "ASSET_MATERIALIZATION", "enriched_posts")
    assert upstream["downstream_work"] == "- user_post_stats: a changelist of 1 key(s)"
    [changelist] = events(listed, "ASSET_MATERIALIZATION", "user_post_stats")
    assert (changelist["mode"], changelist["processed_keys"]) == ("changelist", 1)
    assert "offsets_reset" not in changelist and "reset_reason" not in changelist


@pytest.mark.quick
def test_the_job_the_shell_runs_for_a_selection_runs_a_reprocess_request_below_an_idle_asset(
        world, resources, sqlite_url):
    assets = chain()
    pair = [asset.key for asset in assets[:2]]
    assert dg.materialize(assets[:2], resources=resources).success
    offsets = resources["offset_store"].get_offsets_for_transformation("user_post_stats")
    cli(sqlite_url, "reprocess", "user_post_stats", "--yes")
    # What `dagster asset materialize --select enriched_posts,user_post_stats` runs: the
    # code location's implicit asset job, subset to the selection (post_report left out).
    repository = dg.Definitions(assets=assets, resources=resources).get_repository_def()
    job = repository.get_implicit_job_def_for_assets(pair)

    ran = job.execute_in_process(asset_selection=pair, instance=dg.DagsterInstance.ephemeral())

    assert ran.success and skipped_steps(ran) == []
    [upstream] = events(ran, "ASSET_MATERIALIZATION", "enriched_posts")
    assert upstream["changed_keys"] == 0 and upstream["downstream_work"].startswith(
        "- user_post_stats: reprocess request of ")
    [stats] = events(ran, "ASSET_MATERIALIZATION", "user_post_stats")
    assert (stats["mode"], stats["processed_keys"]) == ("reprocess", 2)
    assert stats["reset_reason"] == upstream["downstream_work"].removeprefix("- user_post_stats: ")
    assert stats["offsets_reset"] == {"enriched_posts": iso_utc(offsets["enriched_posts"])}
    assert events(ran, "ASSET_MATERIALIZATION", "post_report") == []


def split_and_gathered() -> list[dg.AssetsDefinition]:
    """posts -> even_posts, odd_posts (each the posts of its parity of post_id), profiles ->
    authors; all_posts gathers the two halves and joins their authors (a fan-in of three
    branches). A change to an odd post is processed by even_posts too, which keeps none of
    it; authors has nothing to do."""
    def even_posts(posts: DataFrame) -> DataFrame:
        return posts.where("post_id % 2 = 0")

    def odd_posts(posts: DataFrame) -> DataFrame:
        return posts.where("post_id % 2 = 1")

    def authors(profiles: DataFrame) -> DataFrame:
        return profiles

    def all_posts(even_posts: DataFrame, odd_posts: DataFrame, authors: DataFrame) -> DataFrame:
        return enrich(even_posts.unionByName(odd_posts), authors)

    halves = [incremental_asset(transform_keys=["post_id"], primary_key=["post_id"], schema=POSTS)(fn)
              for fn in (even_posts, odd_posts)]
    names = incremental_asset(transform_keys=["id"], primary_key=["id"], schema=PROFILES)(authors)
    gathered = incremental_asset(transform_keys=["post_id"], primary_key=["post_id"], schema=ENRICHED,
                                 join_keys={"authors": {"user_id": "id"}})(all_posts)
    return [*halves, names, gathered]


def test_a_fan_in_runs_when_one_branch_changed_whatever_its_other_branches_did(world, resources):
    """Dagster skips a step downstream of an output that was not yielded. even_posts
    processes the edited odd post 11 and changes no row, authors has nothing to do: both
    are materialized all the same (authors without Spark), because all_posts, downstream of
    them, gets odd_posts' commit in this run, whatever order the steps run in."""
    assets = split_and_gathered()
    assert dg.materialize(assets, resources=resources).success
    world.write_posts([(11, 1, "b, edited")])

    ran = dg.materialize(assets, resources=resources)

    assert ran.success and skipped_steps(ran) == []
    [even] = events(ran, "ASSET_MATERIALIZATION", "even_posts")
    assert (even["processed_keys"], even["rows_written.even_posts"], even["rows_deleted.even_posts"]) == (1, 0, 0)
    [idle] = events(ran, "ASSET_MATERIALIZATION", "authors")
    assert idle["changed_keys"] == 0 and "profile" not in idle
    # Which words depend on the order the steps ran in: an idle step that asks before the
    # halves ran finds both with work and names the first.
    for waiting in (even["downstream_work"], idle["downstream_work"]):
        assert waiting in ("- all_posts: input commits beyond its offsets",
                           "- all_posts: even_posts upstream of it has work in this run",
                           "- all_posts: odd_posts upstream of it has work in this run"), waiting
    [gathered] = events(ran, "ASSET_MATERIALIZATION", "all_posts")
    assert (gathered["processed_keys"], gathered["rows_written.all_posts"]) == (1, 1)
    assert rows_of(resources["incremental_engine"].read_table("all_posts")) == world.expected_enriched()

    # Nothing waits any more: every branch is idle and the fan-in is skipped, without Spark.
    quiet = dg.materialize(assets, resources=resources)
    assert quiet.success and sorted(skipped_steps(quiet)) == ["all_posts"]
