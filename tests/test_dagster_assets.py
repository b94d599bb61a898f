"""Incremental assets in real Dagster runs (`materialize`, ephemeral instance, real Spark).

The story: `posts` and `profiles` are versioned tables written by an ingestion outside
Dagster (here by the test). `enriched_posts` is declared with `incremental_asset`
(the engine runs in the asset body); `user_post_stats` is a hand-written `@dg.asset`
made incremental by its metadata, so it reads `enriched_posts` through the
`OffsetIOManager` (load_input / handle_output).
"""

import time

import dagster as dg
import pytest
import sqlalchemy as sa
from pyspark.sql import DataFrame

from bench.posts_world import ENRICHED, POSTS, STATS, count_posts, enrich, make_world, rows_of
from offset_assets.control_plane import connect
from offset_assets.control_plane.delta_catalog import DeltaCatalog
from offset_assets.control_plane.schema import run_lease, table_delta
from offset_assets.dagster_adapter import (
    OffsetStore,
    build_offset_checks,
    incremental_asset,
    incremental_metadata,
    table_metadata,
)
from offset_assets.dagster_adapter.incremental.assets import ChangeDetection, IncrementalRunConfig
from offset_assets.dagster_adapter.incremental.run_report import iso_utc
from offset_assets.spark_jobs import count_spark_jobs
from tests.dagster_resources import engine_resources


@pytest.fixture
def world(spark, sqlite_url, warehouse):
    return make_world(spark, connect(sqlite_url), warehouse)


@pytest.fixture
def store(sqlite_url):
    return OffsetStore(db_url=sqlite_url)


@pytest.fixture
def resources(store, warehouse):
    return engine_resources(store, warehouse)


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


STATS_METADATA = incremental_metadata(transform_keys=["user_id"], primary_key=["user_id"],
                                      schema=STATS)


def user_post_stats_asset():
    """A plain Dagster asset over `enriched_posts`, incremental through the IO manager."""

    @dg.asset(metadata=STATS_METADATA)
    def user_post_stats(enriched_posts: DataFrame) -> DataFrame:
        return count_posts(enriched_posts)

    return user_post_stats


def materialization(result, key: str) -> dict:
    [event] = [m for m in result.asset_materializations_for_node(key)]
    return {name: value.value for name, value in event.metadata.items()}


def valueless(meta: dict) -> list[str]:
    """Entries the UI would show as `null` or `{}`."""
    return sorted(name for name, value in meta.items() if value is None or value == {})


@pytest.mark.quick
def test_second_materialization_of_a_chain_processes_only_the_changed_posts(
        world, resources, store):
    seed(world)
    enriched, stats_asset = enriched_asset(), user_post_stats_asset()

    checks = build_offset_checks([enriched, stats_asset])
    first = dg.materialize([enriched, stats_asset, *checks], resources=resources)
    assert first.success
    evaluations = first.get_asset_check_evaluations()  # the checks ran after materializing
    assert len(evaluations) == 4 and all(e.passed for e in evaluations)
    meta = materialization(first, "enriched_posts")
    assert meta["changed_keys"] == 4
    assert meta["rows_read.posts"] == 4 and meta["rows_read.profiles"] == 3
    assert meta["rows_written.enriched_posts"] == 4
    assert "offset_before.posts" not in meta  # no offset yet: no entry, not a null
    assert meta["offset_after.posts"] == world.posts.last_committed().commit_ts
    assert "offsets_reset" not in meta and "reset_reason" not in meta
    assert valueless(meta) == []
    assert meta["change_detection"] == "v2" and meta["batches"] == 1
    assert meta["mode"] == "incremental"
    assert meta["dagster/row_count"] == 4  # the catalog's row count: actual rows of the table
    assert meta["offset_lag_s.posts"] == 0.0 and meta["offset_lag_s.profiles"] == 0.0
    assert meta["delta.enriched_posts"] == 1 and meta["deltas_committed.enriched_posts"] == 1
    assert "processed 4 of 4 changed key(s)" in meta["summary"]
    assert iso_utc(world.posts.last_committed().commit_ts) in meta["summary"]  # offsets as dates
    stats_meta = materialization(first, "user_post_stats")  # the IO manager path reports the same
    assert stats_meta["changed_keys"] == 3 and stats_meta["dagster/row_count"] == 3
    assert stats_meta["offset_lag_s.enriched_posts"] == 0.0

    world.write_posts([(11, 1, "b2"), (14, 2, "e")])
    second = dg.materialize([enriched, stats_asset], resources=resources)
    meta = materialization(second, "enriched_posts")
    assert meta["changed_keys"] == 2
    assert meta["rows_read.posts"] == 2
    assert meta["rows_written.enriched_posts"] == 2
    assert meta["dagster/row_count"] == 5 and meta["delta.enriched_posts"] == 2
    stats_asset_meta = materialization(second, "user_post_stats")
    assert stats_asset_meta["changed_keys"] == 2  # users 1 and 2
    assert stats_asset_meta["rows_read.enriched_posts"] == 4  # all posts of users 1 and 2
    assert rows_of(world.enriched.read_actual()) == world.expected_enriched()
    assert rows_of(world.stats.read_actual()) == world.expected_stats()
    assert store.get_offsets_for_transformation("user_post_stats") == {
        "enriched_posts": world.enriched.last_committed().commit_ts
    }


def test_profile_change_retriggers_only_the_posts_of_that_author(world, resources):
    seed(world)
    enriched = enriched_asset()
    dg.materialize([enriched], resources=resources)
    world.write_profiles([(1, "ann-renamed")])

    result = dg.materialize([enriched], resources=resources)
    meta = materialization(result, "enriched_posts")
    assert meta["changed_keys"] == 2  # posts 10 and 11 of user 1
    assert meta["rows_read.profiles"] == 1  # filtered join: one profile read
    assert ("ann-renamed",) in rows_of(world.enriched.read_actual(), ["author"])
    assert rows_of(world.enriched.read_actual()) == world.expected_enriched()


def test_run_with_nothing_to_do_names_its_wall_clock_and_its_inputs_commit_time_apart(
        world, resources, store):
    seed(world)
    enriched, stats_asset = enriched_asset(), user_post_stats_asset()
    dg.materialize([enriched, stats_asset], resources=resources)
    offset = store.get_offsets_for_transformation("user_post_stats")["enriched_posts"]
    committed_up_to = DeltaCatalog(world.posts.plane).last_commit_ts()  # the last commit: stats'

    before = time.time()
    quiet = dg.materialize([dg.AssetSpec("enriched_posts"), stats_asset], resources=resources)
    after = time.time()
    meta = materialization(quiet, "user_post_stats")
    assert meta["changed_keys"] == 0 and meta["processed_keys"] == 0
    assert valueless(meta) == []
    # The run's wall clock and the commit clock of what it read, under different names:
    # nothing was committed since, so the inputs' time is before the run.
    assert committed_up_to <= before <= meta["run_started_at"] <= meta["run_finished_at"] <= after
    assert meta["inputs_committed_up_to"] == committed_up_to
    assert "process_ts" not in meta
    assert f"Read the inputs as committed up to {iso_utc(committed_up_to)}." in meta["summary"]
    assert meta["offset_before.enriched_posts"] == meta["offset_after.enriched_posts"] == offset
    assert meta["offset_lag_s.enriched_posts"] == 0.0
    assert meta["deltas_committed.user_post_stats"] == 0
    assert "delta.user_post_stats" not in meta  # nothing committed: no delta number
    assert "offsets_reset" not in meta and "reset_reason" not in meta


def test_failing_asset_body_commits_nothing_and_releases_the_lease(world, resources, store):
    seed(world)
    broken = {"now": True}

    @dg.asset(metadata=STATS_METADATA)
    def user_post_stats(posts: DataFrame) -> DataFrame:
        if broken["now"]:
            raise RuntimeError("the asset body broke")
        return count_posts(posts)

    posts = dg.AssetSpec("posts")  # written outside Dagster
    failed = dg.materialize([posts, user_post_stats], resources=resources, raise_on_error=False)
    assert not failed.success
    assert store.get_offsets_for_transformation("user_post_stats") == {}
    assert world.stats.last_committed() is None and world.stats.hot() is None
    with world.posts.plane.begin() as conn:
        assert conn.execute(sa.select(run_lease)).all() == []

    broken["now"] = False
    retried = dg.materialize([posts, user_post_stats], resources=resources)
    assert materialization(retried, "user_post_stats")["changed_keys"] == 3
    assert rows_of(world.stats.read_actual()) == world.expected_stats()


def failing_enrich(posts: DataFrame, profiles: DataFrame) -> DataFrame:
    raise ValueError("enrichment service down")


def test_failed_keys_fail_the_step_by_default_and_only_warn_when_configured(world, resources):
    seed(world)
    failed = dg.materialize([enriched_asset(failing_enrich)], resources=resources,
                            raise_on_error=False)
    assert not failed.success
    [failure] = failed.get_step_failure_events()
    user_failure = failure.step_failure_data.user_failure_data
    assert "4 key(s) failed" in user_failure.description
    assert user_failure.metadata["failed_keys"].value == 4

    warned = dg.materialize([enriched_asset(failing_enrich, on_failed_keys="warn")],
                            resources=resources)
    assert warned.success
    assert warned.asset_materializations_for_node("enriched_posts") == []  # no output version
    [observed] = warned.asset_observations_for_node("enriched_posts")
    meta = {name: value.value for name, value in observed.metadata.items()}
    assert meta["failed_keys"] == 4  # retried, failed again, reported
    assert "enrichment service down" in meta["errors"]
    assert world.enriched.last_committed() is None


def test_backfill_tagged_run_resets_offsets_and_reprocesses_every_key(world, resources, store):
    seed(world)
    chain = [enriched_asset(), user_post_stats_asset()]
    dg.materialize(chain, resources=resources)
    offsets = store.get_offsets_for_transformation("enriched_posts")

    instance = dg.DagsterInstance.ephemeral()
    backfill = dg.materialize(chain, resources=resources, instance=instance,
                              tags={"dagster/backfill": "bf1"})
    meta = materialization(backfill, "enriched_posts")
    assert meta["changed_keys"] == 4 and meta["processed_keys"] == 4
    assert meta["mode"] == "reprocess" and meta["change_detection"] == "reprocess_all"
    assert meta["offsets_reset"] == {name: iso_utc(ts) for name, ts in offsets.items()}
    assert meta["reset_reason"] == "backfill bf1"
    assert not [name for name in meta if name.startswith("offset_before.")]  # read from zero
    assert {name: meta[f"offset_after.{name}"] for name in offsets} == offsets
    assert valueless(meta) == []
    assert "Offsets reset by backfill bf1: " + ", ".join(
        f"{name} (was {iso_utc(ts)})" for name, ts in sorted(offsets.items())) in meta["summary"]
    assert f"| posts | 4 | reset (was {iso_utc(offsets['posts'])}) |" in meta["summary"]
    stats_meta = materialization(backfill, "user_post_stats")
    assert stats_meta["changed_keys"] == 3
    assert set(stats_meta["offsets_reset"]) == {"enriched_posts"}
    assert valueless(stats_meta) == []
    logged = [e.user_message for e in instance.all_logs(backfill.run_id)
              if "offsets reset" in e.user_message]
    assert len(logged) == 2  # one per asset
    # The backfill's runs list shows one short tag per transformation: the reason; which
    # offsets were reset is in the metadata above.
    tags = instance.get_run_by_id(backfill.run_id).tags
    assert {name: value for name, value in tags.items() if name.startswith("offset_assets/")} == {
        "offset_assets/offsets_reset.enriched_posts": "backfill bf1",
        "offset_assets/offsets_reset.user_post_stats": "backfill bf1",
    }
    assert store.get_offsets_for_transformation("enriched_posts") == offsets
    assert rows_of(world.stats.read_actual()) == world.expected_stats()


def test_changelist_run_config_processes_exactly_the_listed_keys_and_leaves_offsets(
        world, resources, store):
    seed(world)
    enriched = enriched_asset()
    dg.materialize([enriched], resources=resources)
    offsets = store.get_offsets_for_transformation("enriched_posts")
    world.write_posts([(11, 1, "b2"), (12, 2, "c2")])

    result = dg.materialize([enriched], resources=resources, run_config={
        "ops": {"enriched_posts": {"config": {"changelist": [{"post_id": 11}]}}}})
    meta = materialization(result, "enriched_posts")
    assert meta["mode"] == "changelist"
    assert meta["processed_keys"] == 1
    assert store.get_offsets_for_transformation("enriched_posts") == offsets
    texts = dict(rows_of(world.enriched.read_actual(), ["post_id", "text"]))
    assert texts[11] == "b2" and texts[12] == "c"  # 12 waits for the next regular run


def test_run_config_is_typed_and_refuses_an_unknown_change_detection(world, resources):
    seed(world)
    enriched = enriched_asset()
    v1 = dg.materialize([enriched], resources=resources, run_config=dg.RunConfig(
        ops={"enriched_posts": IncrementalRunConfig(change_detection=ChangeDetection.v1)}))
    assert materialization(v1, "enriched_posts")["change_detection"] == "v1"
    with pytest.raises(dg.DagsterInvalidConfigError, match="v3"):
        dg.materialize([enriched], resources=resources, run_config={
            "ops": {"enriched_posts": {"config": {"change_detection": "v3"}}}})


def test_engine_settings_come_from_the_resource(spark, store, warehouse):
    # The engine is built on a Spark session: the shared one, not a JVM of its own.
    engine = engine_resources(store, warehouse, lease_ttl_s=12.5, pushdown_limit=7,
                              row_count=False)["incremental_engine"].engine()
    assert (engine.lease_ttl_s, engine.pushdown_limit) == (12.5, 7)


def test_row_count_is_the_catalogs_and_a_table_it_cannot_count_is_counted_by_spark_and_recorded_unless_turned_off(
        spark, world, store, warehouse):
    seed(world)
    counted = engine_resources(store, warehouse)
    uncounted = engine_resources(store, warehouse, row_count=False)
    first = dg.materialize([enriched_asset()], resources=uncounted)
    assert materialization(first, "enriched_posts")["dagster/row_count"] == 4  # known: reported anyway
    engine = counted["incremental_engine"]
    key = dg.AssetKey("enriched_posts")
    with count_spark_jobs(spark) as jobs:
        assert engine.row_counts([key]) == {key: 4}
    assert jobs.count == 0

    # A catalog from before revision 0006 has no counts: they stay unknown.
    with store.control_plane().begin() as conn:
        conn.execute(table_delta.update().where(table_delta.c.table_name == "enriched_posts")
                     .values(actual_rows=None))
    world.write_posts([(14, 2, "e")])
    second = dg.materialize([enriched_asset()], resources=uncounted)
    assert "dagster/row_count" not in materialization(second, "enriched_posts")
    world.write_posts([(15, 3, "f")])
    third = dg.materialize([enriched_asset()], resources=counted)
    assert materialization(third, "enriched_posts")["dagster/row_count"] == 6  # counted by Spark
    # ... as of the last committed delta, and recorded there: the next commit knows its count.
    assert world.enriched.last_committed().actual_rows == 6
    world.write_posts([(16, 1, "g")])
    fourth = dg.materialize([enriched_asset()], resources=uncounted)
    assert materialization(fourth, "enriched_posts")["dagster/row_count"] == 7
    assert world.enriched.last_committed().actual_rows == 7 == world.enriched.read_actual().count()


def test_batch_commit_mode_commits_each_batch_as_its_own_delta(world, resources):
    seed(world)
    result = dg.materialize([enriched_asset(batch_size=2, commit_mode="batch")],
                            resources=resources)
    meta = materialization(result, "enriched_posts")
    assert meta["batches"] == 2 and meta["commit_mode"] == "batch"
    assert meta["delta.enriched_posts"] == 2 and meta["deltas_committed.enriched_posts"] == 2
    assert rows_of(world.enriched.read_actual()) == world.expected_enriched()


def test_non_incremental_consumer_reads_the_actual_state_of_an_incremental_asset(
        world, resources):
    seed(world)

    @dg.asset
    def author_report(enriched_posts: DataFrame) -> dg.MaterializeResult:
        return dg.MaterializeResult(metadata={"posts": enriched_posts.count()})

    result = dg.materialize([enriched_asset(), author_report], resources=resources)
    [event] = result.asset_materializations_for_node("author_report")
    assert event.metadata["posts"].value == 4


def test_plain_asset_output_is_written_as_one_delta_of_its_versioned_table(
        spark, world, resources):
    @dg.asset(metadata=table_metadata(primary_key=["post_id"], schema=POSTS))
    def posts_feed() -> DataFrame:
        return spark.createDataFrame([(20, 1, "x"), (21, 2, "y")], POSTS)

    result = dg.materialize([posts_feed], resources=resources)
    meta = materialization(result, "posts_feed")
    assert meta["delta"] == 1 and meta["rows_upserted"] == 2
    table = resources["incremental_engine"].table(dg.AssetKey("posts_feed"))
    assert rows_of(table.read_actual()) == {(20, 1, "x"), (21, 2, "y")}
