"""The incremental engine's guarantees, as stories of writes and runs (real Spark)."""

from __future__ import annotations

import pytest

from bench.posts_world import enrich, make_world, rows_of
from offset_assets.control_plane import connect
from offset_assets.control_plane.delta_catalog import DeltaCatalog
from offset_assets.engine import IncrementalEngine
from offset_assets.engine.vocabulary import RunMode, RunRequest
from offset_assets.errors import LeaseHeldError


@pytest.fixture
def world(spark, sqlite_url, warehouse):
    return make_world(spark, connect(sqlite_url), warehouse)


@pytest.fixture
def engine(spark, world):
    return IncrementalEngine(spark, world.posts.plane)


def seed(world):
    world.write_profiles([(1, "ann"), (2, "bob"), (3, "cyd")])
    world.write_posts([(10, 1, "a"), (11, 1, "b"), (12, 2, "c"), (13, 3, "d")])


def test_first_run_processes_everything_and_a_second_run_nothing(world, engine):
    seed(world)
    t = world.enriched_transformation()
    first = engine.run_full(t)
    assert first.processed_keys == 4
    assert rows_of(world.enriched.read_actual()) == world.expected_enriched()
    second = engine.run_full(t)
    assert second.changed_keys == 0
    assert second.processed_keys == 0
    assert second.offsets_after == first.offsets_after


def test_only_changed_posts_are_processed_and_read(world, engine):
    seed(world)
    t = world.enriched_transformation()
    engine.run_full(t)
    world.write_posts([(11, 1, "b2"), (14, 2, "e")])
    result = engine.run_full(t)
    assert result.changed_keys == 2
    assert result.rows_read == {"posts": 2, "profiles": 2}
    assert result.rows_written == {"enriched_posts": 2}
    assert rows_of(world.enriched.read_actual()) == world.expected_enriched()


@pytest.mark.quick
def test_profile_change_retriggers_its_posts_through_the_reverse_join(world, engine):
    seed(world)
    t = world.enriched_transformation()
    engine.run_full(t)
    world.write_profiles([(1, "ann-renamed")])
    result = engine.run_full(t)
    assert result.changed_keys == 2  # posts 10 and 11 belong to user 1
    assert result.rows_read == {"posts": 2, "profiles": 1}  # filtered join: one profile read
    assert ("ann-renamed",) in rows_of(world.enriched.read_actual(), ["author"])
    assert rows_of(world.enriched.read_actual()) == world.expected_enriched()


def test_deleted_post_has_its_output_deleted(world, engine):
    seed(world)
    t = world.enriched_transformation()
    engine.run_full(t)
    world.write_posts([], deletes=[12])
    result = engine.run_full(t)
    assert result.changed_keys == 1
    assert result.rows_deleted == {"enriched_posts": 1}
    assert 12 not in {r[0] for r in rows_of(world.enriched.read_actual(), ["post_id"])}
    assert rows_of(world.enriched.read_actual()) == world.expected_enriched()


def test_post_moving_to_another_user_updates_both_users_stats(world, engine):
    seed(world)
    t = world.stats_transformation()
    engine.run_full(t)
    world.write_posts([(12, 1, "c")])  # user 2 loses its only post, user 1 gains one
    result = engine.run_full(t)
    assert result.changed_keys == 2
    assert rows_of(world.stats.read_actual()) == {(1, 3), (3, 1)}
    assert rows_of(world.stats.read_actual()) == world.expected_stats()


@pytest.mark.quick
def test_boundary_versions_with_equal_update_ts_are_neither_lost_nor_reprocessed(world, engine):
    seed(world)  # four posts share one delta, so one update_ts
    t = world.enriched_transformation()
    engine.run_full(t)
    offset = engine.offsets.get_offset("enrich_posts", "posts")
    assert offset == DeltaCatalog(world.posts.plane).last_committed("posts").commit_ts
    again = engine.run_full(t)  # the boundary delta is re-read and skipped by process_ts
    assert again.processed_keys == 0
    world.write_posts([(15, 3, "f")])
    assert engine.run_full(t).processed_keys == 1


def test_v1_and_v2_find_the_same_keys(world, engine):
    seed(world)
    t = world.enriched_transformation()
    engine.run_full(t)
    world.write_posts([(11, 1, "b2")], deletes=[13])
    world.write_profiles([(2, "bob2")])
    v2 = {tuple(r) for r in engine.changed_keys(t, "v2").collect()}
    v1 = {tuple(r) for r in engine.changed_keys(t, "v1").collect()}
    assert v2 == v1 == {(11,), (12,), (13,)}


def test_failing_batch_is_recorded_and_retried_by_the_next_run(world, engine):
    seed(world)
    calls = {"n": 0}

    def flaky(posts, profiles):
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("profile service down")
        return world.enriched_transformation().func(posts, profiles)

    t = world.enriched_transformation(func=flaky, batch_size=2)
    first = engine.run_full(t)
    assert first.failed_keys == 2 and first.processed_keys == 2
    assert "profile service down" in first.errors[0]
    assert len(rows_of(world.enriched.read_actual())) == 2
    second = engine.run_full(t)
    assert second.changed_keys == 2 and second.failed_keys == 0
    assert rows_of(world.enriched.read_actual()) == world.expected_enriched()


@pytest.mark.parametrize("limits", [{}, {"pushdown_limit": 0}, {"driver_keys_limit": 1}],
                         ids=["keys-in-filter", "keys-joined", "keys-distributed"])
def test_an_output_row_for_a_key_the_batch_did_not_process_fails_that_batch_only(spark, world, limits):
    """Post 12's batch also yields a row for post 112, a key it was not given: that batch
    is refused whole (no row of 12, 13 or 112), recorded as failed and retried."""
    seed(world)
    engine = IncrementalEngine(spark, world.posts.plane, **limits)

    def strays_for_post_12(posts, profiles):
        out = enrich(posts, profiles)
        extra = out.where("post_id = 12").selectExpr("post_id + 100 AS post_id", "user_id", "text", "author")
        return out.unionByName(extra)

    first = engine.run_full(world.enriched_transformation(func=strays_for_post_12, batch_size=2))

    assert (first.processed_keys, first.failed_keys) == (2, 2)
    assert "output 'enriched_posts' has a row for transform key {'post_id': 112}" in first.errors[0]
    assert "that this batch did not process" in first.errors[0]
    assert {row[0] for row in rows_of(world.enriched.read_actual())} == {10, 11}
    second = engine.run_full(world.enriched_transformation(batch_size=2))
    assert (second.changed_keys, second.failed_keys) == (2, 0)
    assert rows_of(world.enriched.read_actual()) == world.expected_enriched()


@pytest.mark.quick
def test_crash_in_batch_k_with_per_batch_commit_resumes_at_batch_k(world, engine):
    seed(world)
    seen = []

    class Crash(BaseException):
        """Not an Exception: stands for the process dying mid-run."""

    def crashing(posts, profiles):
        ids = sorted(r.post_id for r in posts.collect())
        seen.append(ids)
        if len(seen) == 2:
            raise Crash()
        return world.enriched_transformation().func(posts, profiles)

    t = world.enriched_transformation(func=crashing, batch_size=1, commit_mode="batch")
    with pytest.raises(Crash):
        engine.run_full(t)
    assert len(rows_of(world.enriched.read_actual())) == 1  # batch 1 committed
    resumed = engine.run_full(world.enriched_transformation(batch_size=1, commit_mode="batch"))
    assert resumed.processed_keys == 3
    assert rows_of(world.enriched.read_actual()) == world.expected_enriched()


def test_failure_before_the_end_commit_commits_nothing(world, engine):
    seed(world)

    class Crash(BaseException):
        pass

    def crash(posts, profiles):
        raise Crash()

    with pytest.raises(Crash):
        engine.run_full(world.enriched_transformation(func=crash))
    assert world.enriched.read_actual().count() == 0
    assert engine.offsets.get_offsets_for_transformation("enrich_posts") == {}
    assert engine.run_full(world.enriched_transformation()).processed_keys == 4


@pytest.mark.quick
def test_run_changelist_processes_exactly_the_given_keys_and_keeps_offsets(world, engine):
    seed(world)
    t = world.enriched_transformation()
    result = engine.run_changelist(t, [{"post_id": 11}, {"post_id": 13}])
    assert result.processed_keys == 2
    assert {r[0] for r in rows_of(world.enriched.read_actual(), ["post_id"])} == {11, 13}
    assert engine.offsets.get_offsets_for_transformation("enrich_posts") == {}
    assert engine.run_full(t).processed_keys == 2  # the two others; 11 and 13 are done


def test_a_second_concurrent_run_fails_fast_naming_the_holder(world, engine):
    seed(world)
    t = world.enriched_transformation()
    with engine.open_run(t, run_id="first-run"):
        with pytest.raises(LeaseHeldError, match="first-run"):
            engine.run_full(t, run_id="second-run")


def test_version_committed_during_a_run_is_processed_by_the_next_run(world, engine):
    seed(world)
    t = world.enriched_transformation()
    with engine.open_run(t) as run:
        world.write_posts([(10, 1, "a-late")])  # commits after the run's snapshot
        for batch in run.batches:
            run.process_batch(batch, t.func)
        run.finish()
    assert ("a",) in rows_of(world.enriched.read_actual().where("post_id = 10"), ["text"])
    after = engine.run_full(t)
    assert after.processed_keys == 1
    assert ("a-late",) in rows_of(world.enriched.read_actual().where("post_id = 10"), ["text"])


def test_initialize_offsets_from_meta_skips_already_processed_history(world, engine):
    seed(world)
    t = world.enriched_transformation()
    engine.run_changelist(t, [{"post_id": p} for p in (10, 11, 12, 13)])
    assert engine.initialize_offsets_from_transform_meta(world.enriched_transformation()) != {}
    world.write_posts([(16, 1, "g")])
    assert engine.run_full(t).processed_keys == 1


def test_initialize_offsets_without_meta_sets_nothing(world, engine):
    seed(world)
    assert engine.initialize_offsets_from_transform_meta(world.enriched_transformation()) == {}


def test_reset_offsets_reprocesses_everything_once(world, engine):
    seed(world)
    t = world.enriched_transformation()
    engine.run_full(t)
    engine.reset_offsets(t)
    # Meta still says every key is processed: a reset re-reads the history but the
    # per-key process_ts check keeps the outputs exactly as they are.
    assert engine.run_full(t).processed_keys == 0
    assert rows_of(world.enriched.read_actual()) == world.expected_enriched()


def test_reprocess_all_recomputes_every_key_and_drops_outputs_of_vanished_keys(world, engine):
    seed(world)
    t = world.enriched_transformation()
    engine.run_full(t)
    first_offsets = engine.offsets.get_offsets_for_transformation("enrich_posts")
    # An output row no input explains (written by hand): a full recompute removes it.
    world.enriched.write_delta(world.spark.createDataFrame([(99, 1, "x", "ann")], world.enriched.schema))
    # Meta learns of key 99 only through a changelist run that finds no input rows for it.
    engine.run_changelist(t, [{"post_id": 99}])
    world.enriched.write_delta(world.spark.createDataFrame([(98, 1, "y", "ann")], world.enriched.schema))
    result = engine.run_full(t, reprocess_all=True)
    assert result.offsets_reset == first_offsets
    assert result.processed_keys == 5  # 4 posts + key 99 from meta
    assert result.key_source == "reprocess_all"
    assert rows_of(world.enriched.read_actual()) == world.expected_enriched() | {(98, 1, "y", "ann")}


def test_initialize_offsets_never_skips_keys_a_changelist_left_unprocessed(world, engine):
    seed(world)
    world.write_posts([(10, 1, "a2")])  # a newer delta than the one holding posts 11-13
    t = world.enriched_transformation()
    engine.run_changelist(t, [{"post_id": 10}])  # meta exists, but only for post 10
    engine.initialize_offsets_from_transform_meta(t)
    assert engine.run_full(t).processed_keys == 3
    assert rows_of(world.enriched.read_actual()) == world.expected_enriched()


def test_a_failed_reprocess_all_leaves_offsets_untouched(world, engine):
    seed(world)
    engine.run_full(world.enriched_transformation())
    before = engine.offsets.get_offsets_for_transformation("enrich_posts")

    class Crash(BaseException):
        pass

    def crash(posts, profiles):
        raise Crash()

    with pytest.raises(Crash):
        engine.run_full(world.enriched_transformation(func=crash), reprocess_all=True)
    assert engine.offsets.get_offsets_for_transformation("enrich_posts") == before


def test_the_result_carries_each_outputs_row_count_as_its_last_commit_left_it(world, engine):
    seed(world)
    t = world.enriched_transformation()
    assert engine.run_full(t).output_rows == {"enriched_posts": 4}
    world.write_posts([(14, 2, "e")], deletes=[10])
    after_changes = engine.run_full(t)
    assert after_changes.output_rows == {"enriched_posts": 4} == {
        "enriched_posts": world.enriched.read_actual().count()}
    # A run that commits nothing still says how many rows its outputs hold.
    assert engine.run_full(t).output_rows == {"enriched_posts": 4}
    assert engine.run_changelist(t, [{"post_id": 11}]).output_rows == {"enriched_posts": 4}


def test_a_rescan_request_rereads_every_input_and_processes_only_what_the_offsets_skipped(world, engine):
    seed(world)
    t = world.enriched_transformation()
    engine.run_full(t)
    world.write_posts([(14, 2, "e")])
    skipping = world.posts.last_committed().commit_ts + 1.0
    engine.offsets.update_offsets_bulk({("enrich_posts", "posts"): skipping})
    assert engine.run_full(t).processed_keys == 0  # the offset is past post 14
    rescan = engine.run(t, RunRequest.rescan())
    # Every input read from the start; meta keeps the processed keys as they are.
    assert (rescan.mode, rescan.changed_keys, rescan.processed_keys) == (RunMode.rescan, 1, 1)
    assert rescan.offsets_reset["posts"] == skipping
    assert rescan.offsets_after["posts"] == world.posts.last_committed().commit_ts
    assert rows_of(world.enriched.read_actual()) == world.expected_enriched()
    assert engine.run_full(t).processed_keys == 0
