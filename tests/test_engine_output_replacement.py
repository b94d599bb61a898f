"""A batch's output replaces the output rows of the keys it processed: its new rows, and a
tombstone for every earlier row of those keys that the new output no longer has.

When the driver holds the batch's keys and the output's primary key holds the transform
keys, the write reads those keys' earlier rows once, as the candidates it classifies
against (`HotDelta.write(replacing=...)`): by an IN filter up to the pushdown limit, by
a join with the keys beyond it. Both ways must leave the same tables, whatever the
batches (several writes into one hot delta, or a commit per batch) and whether the
output was compacted. Generated histories run the joined way too
(`test_incremental_runs_equal_a_full_recompute_with_every_key_joined`).
"""

from __future__ import annotations

import pytest
from hypothesis import seed
from hypothesis.stateful import run_state_machine_as_test
from pyspark.sql import DataFrame
from pyspark.sql.types import LongType, StringType, StructField, StructType

from bench.posts_world import make_world, rows_of
from offset_assets.control_plane import connect
from offset_assets.engine import IncrementalEngine
from offset_assets.engine.errors import TransformationDefinitionError
from offset_assets.engine.transformation import Transformation, TransformInput
from offset_assets.versioned.compaction import compact
from offset_assets.versioned.table import VersionedTable
from tests.test_engine_exactness import SHARD_SETTINGS, ExactnessMachine

POSTS_BY_USER = StructType([
    StructField("user_id", LongType(), False),
    StructField("post_id", LongType(), False),
    StructField("text", StringType(), True),
])


def posts_by_user(posts: DataFrame) -> DataFrame:
    return posts.where("user_id IS NOT NULL").select("user_id", "post_id", "text")


@pytest.mark.parametrize("limits", [{}, {"pushdown_limit": 0}], ids=["keys-in-filter", "keys-joined"])
@pytest.mark.parametrize("options", [{"batch_size": 2}, {"batch_size": 2, "commit_mode": "batch"}],
                         ids=["batches-into-one-delta", "a-commit-per-batch"])
def test_a_users_posts_that_moved_or_were_deleted_leave_its_output_and_nothing_else_changes(
        spark, sqlite_url, warehouse, limits, options):
    """The output holds (user, post) rows under transform key user_id: a post moved to
    another user leaves its old user's rows (a tombstone) and joins the new one's; a
    user whose every post was deleted keeps no row; an unchanged row gets no version."""
    world = make_world(spark, connect(sqlite_url), warehouse)
    output = VersionedTable(spark, world.posts.plane, "posts_by_user", ["user_id", "post_id"], POSTS_BY_USER,
                            warehouse=warehouse)
    t = Transformation("posts_by_user", [TransformInput(world.posts)], ["user_id"], [output],
                       func=posts_by_user, **options)
    engine = IncrementalEngine(spark, world.posts.plane, **limits)
    world.write_posts([(p, p % 4, f"t{p}") for p in range(1, 13)])
    assert engine.run_full(t).processed_keys == 4
    compact(output)
    world.write_posts([(1, 2, "t1"), (2, 2, "edited"), (13, 0, "new")], deletes=[3, 7, 11])

    result = engine.run_full(t)

    # users 1 (post 1 left), 2 (posts 1 and 2), 3 (every post deleted) and 0 (post 13)
    assert (result.changed_keys, result.failed_keys) == (4, 0)
    assert rows_of(output.read_actual()) == rows_of(posts_by_user(world.posts.read_actual()))
    assert (sum(result.rows_written.values()), sum(result.rows_deleted.values())) == (3, 4)
    assert not [row for row in rows_of(output.read_actual()) if row[0] == 3]


class KeysJoinedMachine(ExactnessMachine):
    """The generated histories with a pushdown limit of 0 and every batch read and written
    by Spark: every lookup of the driver's keys is a join (a batch's inputs, its stray-row
    check, its output's earlier rows)."""

    def open_world(self) -> None:
        super().open_world()
        self.engine = IncrementalEngine(self.world.spark, self.plane, pushdown_limit=0, held_rows_limit=0)


@pytest.fixture
def keys_joined_workdir(tmp_path) -> str:
    """A folder of its own for the histories (their starting states are built in it)."""
    ExactnessMachine.starting_states = {}
    return f"{tmp_path}/history"


def test_incremental_runs_equal_a_full_recompute_with_every_key_joined(spark, keys_joined_workdir):
    """A shard of the property test's histories (as many as one of its shards runs, from a
    seed of its own), the driver's keys looked up by joins instead of IN filters."""
    ExactnessMachine.durations = []
    ExactnessMachine.workdir = keys_joined_workdir
    ExactnessMachine.driver_keys_limit = None
    ExactnessMachine.first_target = 2  # posts moving between the batches of a run, joined
    machine = seed(20261127)(lambda: KeysJoinedMachine())
    run_state_machine_as_test(machine, settings=SHARD_SETTINGS)


def test_an_output_keyed_by_fewer_columns_than_the_transform_keys_is_refused_when_declared(
        spark, sqlite_url, warehouse):
    """Posts per (user, post) keyed by user alone: two posts of a user would be two
    states of one row in every write. Refused before any run, naming the output."""
    world = make_world(spark, connect(sqlite_url), warehouse)
    by_user = VersionedTable(spark, world.posts.plane, "posts_by_user", ["user_id"], POSTS_BY_USER,
                             warehouse=warehouse)
    with pytest.raises(TransformationDefinitionError) as refused:
        Transformation("posts_by_user", [TransformInput(world.posts)], ["user_id", "post_id"], [by_user],
                       func=posts_by_user)
    assert str(refused.value) == (
        "transformation 'posts_by_user': output 'posts_by_user': primary_key ['user_id'] is narrower than "
        "transform_keys ['user_id', 'post_id']: the rows of transform keys that differ only in 'post_id' would "
        "share a primary key (two states of one row in one write); a run replaces each processed key's output "
        "rows, so an output's primary key must tell which transform key a row belongs to: declare primary_key "
        "['user_id', 'post_id'] (or one with a column that tells it)")


# Keyed by post: a row moves from one user (transform key) to another.
POSTS_OF_USERS = StructType([
    StructField("user_id", LongType(), True),
    StructField("post_id", LongType(), False),
    StructField("text", StringType(), True),
])


def posts_of_users(posts: DataFrame) -> DataFrame:
    return posts.select("user_id", "post_id", "text")


MOVE_ENGINES = {"keys-in-filter": {}, "keys-joined": {"pushdown_limit": 0},
                "keys-distributed": {"driver_keys_limit": 1}}


def posts_of_users_world(spark, sqlite_url, warehouse, func=posts_of_users):
    """Posts listed with their user (transform key user_id, a user per batch, one commit
    at the end), the output keyed by post: a post that changes user moves between
    batches of one run."""
    world = make_world(spark, connect(sqlite_url), warehouse)
    output = VersionedTable(spark, world.posts.plane, "posts_of_users", ["post_id"], POSTS_OF_USERS,
                            warehouse=warehouse)
    t = Transformation("posts_of_users", [TransformInput(world.posts)], ["user_id"], [output],
                       func=func, batch_size=1)
    return world, output, t


@pytest.mark.parametrize("limits", list(MOVE_ENGINES.values()), ids=list(MOVE_ENGINES))
def test_rows_moving_between_the_batches_of_one_end_commit_run_are_committed_by_that_run(
        spark, sqlite_url, warehouse, limits):
    """Post 1 leaves user 1 (batch 1) for user 2 (batch 2); post 3 leaves user 2 (batch 2)
    for user 1 (batch 1). The run commits both moves: each post keeps one row, under its
    new user, and no batch fails."""
    world, output, t = posts_of_users_world(spark, sqlite_url, warehouse)
    engine = IncrementalEngine(spark, world.posts.plane, **limits)
    world.write_posts([(1, 1, "p1"), (2, 1, "p2"), (3, 2, "p3"), (4, 2, "p4")])
    assert engine.run_full(t).failed_keys == 0

    world.write_posts([(1, 2, "p1"), (3, 1, "p3")])
    result = engine.run_full(t)

    assert (result.batches, result.batches_failed, result.failed_keys) == (2, 0, 0), result.errors
    assert rows_of(output.read_actual()) == {(2, 1, "p1"), (1, 2, "p2"), (1, 3, "p3"), (2, 4, "p4")}
    assert (sum(result.rows_written.values()), sum(result.rows_deleted.values())) == (2, 0)
    assert engine.run_full(t).changed_keys == 0


@pytest.mark.parametrize("limits", list(MOVE_ENGINES.values()), ids=list(MOVE_ENGINES))
def test_a_row_that_left_its_user_is_deleted_when_the_batch_of_its_new_user_fails_and_comes_back_with_the_retry(
        spark, sqlite_url, warehouse, limits):
    """Post 1 leaves user 1 (batch 1) for user 2, whose batch (the last) fails: user 1's
    output no longer lists it, and the next run, which retries user 2, lists it there."""
    user_2_fails = {"now": False}

    def fails_for_user_2(posts: DataFrame) -> DataFrame:
        if user_2_fails["now"] and posts.where("user_id = 2").count():
            raise ValueError("cannot list user 2")
        return posts_of_users(posts)

    world, output, t = posts_of_users_world(spark, sqlite_url, warehouse, func=fails_for_user_2)
    engine = IncrementalEngine(spark, world.posts.plane, **limits)
    world.write_posts([(1, 1, "p1"), (2, 1, "p2"), (3, 2, "p3")])
    assert engine.run_full(t).failed_keys == 0

    world.write_posts([(1, 2, "p1")])
    user_2_fails["now"] = True
    result = engine.run_full(t)

    assert (result.batches, result.batches_failed, result.failed_keys) == (2, 1, 1)
    assert rows_of(output.read_actual()) == {(1, 2, "p2"), (2, 3, "p3")}
    user_2_fails["now"] = False
    assert engine.run_full(t).processed_keys == 1
    assert rows_of(output.read_actual()) == {(2, 1, "p1"), (1, 2, "p2"), (2, 3, "p3")}
