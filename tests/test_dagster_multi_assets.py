"""One transformation, several output assets: `incremental_multi_asset`.

The story: `posts` is a versioned table written outside Dagster (by the test);
`moderated_posts` splits it into `accepted_posts` and `rejected_posts` (a post mentioning
"spam" is rejected); `rejected_per_user` counts rejected posts per user, downstream of
one output only.
"""

import dagster as dg
import pytest
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from bench.posts_world import POSTS, STATS, count_posts, make_world, rows_of
from offset_assets.control_plane import connect
from offset_assets.control_plane.delta_catalog import DeltaCatalog
from offset_assets.dagster_adapter import (
    IncrementalOut,
    OffsetStore,
    build_offset_checks,
    build_offset_sensor,
    evaluate_offset_sensor,
    incremental_asset,
    incremental_multi_asset,
    resolve_incremental,
)
from offset_assets.spark_jobs import count_spark_jobs
from tests.dagster_resources import engine_resources
from tests.test_dagster_idle_runs import events

OUTPUTS = ("accepted_posts", "rejected_posts")


def split(posts: DataFrame) -> dict[str, DataFrame]:
    spam = F.col("text").contains("spam")
    return {"accepted_posts": posts.where(~spam), "rejected_posts": posts.where(spam)}


def moderation_asset(func=split, **options) -> dg.AssetsDefinition:
    def moderated_posts(posts: DataFrame) -> dict[str, DataFrame]:
        return func(posts)

    return incremental_multi_asset(
        outs={name: IncrementalOut(primary_key=["post_id"], schema=POSTS) for name in OUTPUTS},
        transform_keys=["post_id"], **options)(moderated_posts)


def rejected_per_user() -> dg.AssetsDefinition:
    def rejected_per_user(rejected_posts: DataFrame) -> DataFrame:
        return count_posts(rejected_posts)

    return incremental_asset(transform_keys=["user_id"], primary_key=["user_id"], schema=STATS)(rejected_per_user)


@pytest.fixture
def world(spark, sqlite_url, warehouse):
    world = make_world(spark, connect(sqlite_url), warehouse)
    world.write_posts([(10, 1, "hello"), (11, 1, "spam offer"), (12, 2, "news")])
    return world


@pytest.fixture
def resources(sqlite_url, warehouse):
    return engine_resources(OffsetStore(db_url=sqlite_url), warehouse)


def actual(resources, name: str) -> set[tuple]:
    return rows_of(resources["incremental_engine"].table(dg.AssetKey(name)).read_actual())


def from_scratch(world) -> dict[str, set[tuple]]:
    return {name: rows_of(frame) for name, frame in split(world.posts.read_actual()).items()}


def test_each_output_materializes_with_its_own_metadata_and_equals_a_from_scratch_split(world, resources):
    result = dg.materialize([moderation_asset()], resources=resources)

    assert result.success
    [accepted] = events(result, "ASSET_MATERIALIZATION", "accepted_posts")
    [rejected] = events(result, "ASSET_MATERIALIZATION", "rejected_posts")
    assert (accepted["rows_written.accepted_posts"], accepted["dagster/row_count"],
            accepted["delta.accepted_posts"]) == (2, 2, 1)
    assert (rejected["rows_written.rejected_posts"], rejected["dagster/row_count"],
            rejected["delta.rejected_posts"]) == (1, 1, 1)
    # Each asset reports its own table, not its sibling's.
    assert "rows_written.rejected_posts" not in accepted and "delta.rejected_posts" not in accepted
    for metadata in (accepted, rejected):
        assert metadata["processed_keys"] == 3 and metadata["rows_read.posts"] == 3
        assert metadata["delta._meta__moderated_posts"] == 1
    assert {name: actual(resources, name) for name in OUTPUTS} == from_scratch(world) == {
        "accepted_posts": {(10, 1, "hello"), (12, 2, "news")},
        "rejected_posts": {(11, 1, "spam offer")}}
    offsets = resources["offset_store"].get_offsets_for_transformation("moderated_posts")
    assert offsets == {"posts": world.posts.last_committed().commit_ts}


def test_an_edit_moving_a_post_deletes_and_writes_it_in_one_commit_and_only_changed_outputs_materialize(
        world, resources):
    assets = [moderation_asset(), rejected_per_user()]
    assert dg.materialize(assets, resources=resources).success

    world.write_posts([(10, 1, "hello spam")])  # accepted -> rejected
    moved = dg.materialize(assets, resources=resources)

    [accepted] = events(moved, "ASSET_MATERIALIZATION", "accepted_posts")
    [rejected] = events(moved, "ASSET_MATERIALIZATION", "rejected_posts")
    assert (accepted["rows_written.accepted_posts"], accepted["rows_deleted.accepted_posts"]) == (0, 1)
    assert (rejected["rows_written.rejected_posts"], rejected["rows_deleted.rejected_posts"]) == (1, 0)
    catalog = DeltaCatalog(world.posts.plane)
    deltas = {name: catalog.by_num(name, 2) for name in (*OUTPUTS, "_meta__moderated_posts")}
    # One control-plane transaction stamps one commit_ts on every delta it commits.
    assert len({delta.commit_ts for delta in deltas.values()}) == 1
    assert {name: actual(resources, name) for name in OUTPUTS} == from_scratch(world)
    assert actual(resources, "rejected_per_user") == {(1, 2)}

    world.write_posts([(12, 2, "news, edited")])  # stays accepted: rejected_posts keeps every row
    edited = dg.materialize(assets, resources=resources)

    [accepted] = events(edited, "ASSET_MATERIALIZATION", "accepted_posts")
    assert accepted["rows_written.accepted_posts"] == 1 and accepted["delta.accepted_posts"] == 3
    assert events(edited, "ASSET_MATERIALIZATION", "rejected_posts") == []
    [observed] = events(edited, "ASSET_OBSERVATION", "rejected_posts")
    assert observed["rows_written.rejected_posts"] == 0 and observed["deltas_committed.rejected_posts"] == 0
    assert catalog.last_committed("rejected_posts").delta_num == 2
    [skipped] = [e for e in edited.all_events if e.event_type_value == "STEP_SKIPPED"]
    assert skipped.step_key == "rejected_per_user"
    assert {name: actual(resources, name) for name in OUTPUTS} == from_scratch(world)


def test_a_run_with_nothing_to_do_starts_no_spark_job_and_observes_each_output(spark, world, resources):
    moderation = moderation_asset()
    assert dg.materialize([moderation], resources=resources).success

    with count_spark_jobs(spark) as jobs:
        idle = dg.materialize([moderation], resources=resources)

    assert idle.success
    assert jobs.count == 0, jobs.describe()
    assert [e for e in idle.all_events if e.event_type_value == "ASSET_MATERIALIZATION"] == []
    for name in OUTPUTS:
        [observed] = events(idle, "ASSET_OBSERVATION", name)
        assert observed["changed_keys"] == 0 and observed["engine_run_id"] == idle.run_id
        assert observed[f"rows_written.{name}"] == 0 and "dagster/row_count" not in observed


def test_a_failing_function_commits_neither_output_and_the_next_run_writes_both(world, resources):
    assert dg.materialize([moderation_asset()], resources=resources).success
    world.write_posts([(10, 1, "hello spam"), (13, 2, "fresh")])

    def broken(posts: DataFrame) -> dict[str, DataFrame]:
        raise RuntimeError("moderation service down")

    failed = dg.materialize([moderation_asset(broken)], resources=resources, raise_on_error=False)

    assert not failed.success
    catalog = DeltaCatalog(world.posts.plane)
    assert [catalog.last_committed(name).delta_num for name in OUTPUTS] == [1, 1]
    assert [e for e in failed.all_events if e.event_type_value == "ASSET_MATERIALIZATION"] == []

    half = dg.materialize([moderation_asset(lambda posts: {"accepted_posts": posts})],
                          resources=resources, raise_on_error=False)

    assert not half.success  # an output missing from the mapping fails the batch too
    assert [catalog.last_committed(name).delta_num for name in OUTPUTS] == [1, 1]

    retried = dg.materialize([moderation_asset()], resources=resources)

    assert retried.success
    assert {name: actual(resources, name) for name in OUTPUTS} == from_scratch(world) == {
        "accepted_posts": {(12, 2, "news"), (13, 2, "fresh")},
        "rejected_posts": {(10, 1, "hello spam"), (11, 1, "spam offer")}}


def test_checks_and_the_sensor_of_a_multi_asset_watch_its_one_transformation(world, resources):
    moderation = moderation_asset(name="moderation")
    checks = build_offset_checks(moderation)
    sensor = build_offset_sensor(moderation)
    asset = resolve_incremental(moderation)
    plane = world.posts.plane

    assert sorted((c.check_key.asset_key.to_user_string(), c.check_key.name) for c in checks) == [
        (name, check) for name in OUTPUTS for check in ("offset_age", "offset_backlog")]
    assert asset.transformation_id == "moderation" and asset.output_tables == list(OUTPUTS)
    assert (sensor.name, sensor.job_name) == ("moderation_inputs_changed", "moderation_job")
    assert isinstance(evaluate_offset_sensor(plane, asset, None), dg.SensorResult)  # never run

    defs = dg.Definitions(assets=[moderation], asset_checks=checks, sensors=[sensor], resources=resources)
    result = defs.resolve_job_def("moderation_job").execute_in_process()

    assert result.success
    assert {e.asset_key.to_user_string() for e in result.get_asset_materialization_events()} == set(OUTPUTS)
    assert isinstance(evaluate_offset_sensor(plane, asset, None), dg.SkipReason)
    evaluations = {(e.asset_key.to_user_string(), e.check_name): e.passed
                   for e in result.get_asset_check_evaluations()}
    assert evaluations == {(name, check): True for name in OUTPUTS for check in ("offset_age", "offset_backlog")}
    world.write_posts([(12, 2, "news, edited")])
    request = evaluate_offset_sensor(plane, asset, None)
    assert [r.run_key.split(":")[0] for r in request.run_requests] == ["moderation"]
