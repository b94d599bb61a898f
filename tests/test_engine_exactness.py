"""Exactness on every path: incremental runs equal a full recompute, whatever happened.

Generated histories (a hypothesis state machine over real Spark) mix input changes
(post upserts, deletes, posts moving between users, profile renames and deletes) with
every way to run or maintain a transformation: incremental runs (v1, v2; end and batch
commit), batches whose function fails, crashes (SystemExit in the function, an error
inside the commit) at a random batch, backfills, offset resets, reprocess requests,
changelist runs, offset initialisation from meta and compactions of inputs, outputs and
meta. After every step v1 and v2 must detect the same keys; after every run that
reports no failed key the outputs must equal a from-scratch computation in plain Python.

`make test` runs 50 derandomized histories; `make exactness` (EXACTNESS_HISTORIES=1000)
runs the long mode. A failure prints the steps and a blob to replay it
(`@reproduce_failure`).

Plain tests below the machine pin the cases that generated histories found or that
the issue tracker reported.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from unittest import mock

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from offset_assets.control_plane import connect, database
from offset_assets.control_plane.delta_catalog import DeltaCatalog
from offset_assets.control_plane.reprocess import ReprocessRequests
from offset_assets.engine.meta import meta_table
from offset_assets.engine.runner import IncrementalEngine
from offset_assets.engine.transformation import Transformation
from offset_assets.spark import get_spark_session
from tests.engine_story import World, count_posts, enrich, make_world, rows_of

HISTORIES = int(os.environ.get("EXACTNESS_HISTORIES", "50"))
STEPS_PER_HISTORY = 6

POST_IDS = st.integers(min_value=1, max_value=6)
USER_IDS = st.integers(min_value=0, max_value=2)
TEXTS = st.sampled_from(["a", "b"])  # few values: some upserts leave a post unchanged
COMMIT_MODES = st.sampled_from(["end", "batch"])
MODES = st.sampled_from(["v2", "v1"])
STARTING_PROFILES = {0: "ann", 1: "bob", 2: "cyd"}
STARTING_POSTS = {pid: (pid % 3, "a") for pid in range(1, 7)}


class CommitCrash(RuntimeError):
    """Raised inside a control-plane commit: the process 'dies' before it completes."""


def keys_of(df: DataFrame) -> list[tuple]:
    return sorted(tuple(row) for row in df.collect())


@contextmanager
def crash_at_commit(number: int) -> Iterator[None]:
    """Make the `number`-th delta commit (1-based) raise before it reaches the database."""
    original = DeltaCatalog.commit
    calls = {"n": 0}

    def commit(catalog, *args, **kwargs):  # noqa: ANN001, ANN202
        calls["n"] += 1
        if calls["n"] == number:
            raise CommitCrash(f"crash in commit {number}")
        return original(catalog, *args, **kwargs)

    with mock.patch.object(DeltaCatalog, "commit", commit):
        yield


def exiting_at_call(func, number: int):  # noqa: ANN001, ANN201
    """`func`, except that its `number`-th call raises SystemExit (a killed worker)."""
    calls = {"n": 0}

    def wrapped(**frames):  # noqa: ANN003, ANN202
        calls["n"] += 1
        if calls["n"] == number:
            raise SystemExit(f"exit in batch {number}")
        return func(**frames)

    return wrapped


class PostsModel:
    """The inputs in plain Python, and what each output must hold."""

    def __init__(self) -> None:
        self.posts: dict[int, tuple[int, str]] = {}
        self.profiles: dict[int, str] = {}

    def enriched(self) -> set[tuple]:
        return {(pid, uid, text, self.profiles.get(uid)) for pid, (uid, text) in self.posts.items()}

    def stats(self) -> set[tuple]:
        counts: dict[int, int] = {}
        for uid, _ in self.posts.values():
            counts[uid] = counts.get(uid, 0) + 1
        return set(counts.items())


class ExactnessMachine(RuleBasedStateMachine):
    """One history of one transformation: `enriched_posts` (transform key post_id, a
    reference input joined on user_id) or `user_post_stats` (transform key user_id,
    not the posts primary key)."""

    durations: list[float] = []
    workdir = ""  # set by the test: the folder every history works in
    starting_states: dict[str, str] = {}  # target name -> a copy of its starting state

    def __init__(self) -> None:
        super().__init__()
        self.world: World | None = None
        self.started = time.monotonic()

    # -- set-up and teardown ------------------------------------------------------------

    @initialize(target_name=st.sampled_from(["enriched_posts", "user_post_stats"]))
    def start_with_six_posts_of_three_users_processed_once(self, target_name: str) -> None:
        # Every history of a target starts from the same state. It is built (and checked)
        # once per target and copied for the next histories, at the same place, so the
        # catalog's file paths stay valid: the set-up (two writes and a first run) was about
        # a third of a history (estimated from its Spark jobs and times, not measured apart).
        self.tmp = ExactnessMachine.workdir
        self.url = f"sqlite:///{self.tmp}/cp.db"
        database.forget(self.url)
        shutil.rmtree(self.tmp, ignore_errors=True)
        template = ExactnessMachine.starting_states.get(target_name)
        if template is not None:
            shutil.copytree(template, self.tmp)
        self.target_name = target_name
        self.model = PostsModel()
        self.revision = 0
        self.open_world()
        if template is not None:
            self.model.profiles.update(STARTING_PROFILES)
            self.model.posts.update(STARTING_POSTS)
        else:
            self.write_profiles(STARTING_PROFILES)
            self.write_posts(STARTING_POSTS)
            # One batch (a third of the Spark jobs of three); every rule after it runs with
            # small batches, and `backfill` processes every key in them.
            self.run_and_check(self.transformation(one_batch=True), change_detection="v2")
            template = f"{self.tmp}-start-{target_name}"
            database.forget(self.url)  # the database file complete on disk before the copy
            shutil.copytree(self.tmp, template)
            ExactnessMachine.starting_states[target_name] = template
            self.open_world()

    def open_world(self) -> None:
        self.plane = connect(self.url)
        self.world = make_world(get_spark_session(), self.plane, f"{self.tmp}/warehouse")
        self.engine = IncrementalEngine(self.world.spark, self.plane)

    def teardown(self) -> None:
        if self.world is None:
            return
        try:
            # Every history ends with a clean run: whatever happened, it must catch up.
            # (Not after a failed step: hypothesis calls teardown while that error is
            # propagating, and a second error would hide it.)
            if sys.exc_info()[0] is None:
                self.run_and_check(self.transformation(), change_detection="v2", must_succeed=True)
        finally:
            database.forget(self.url)
            ExactnessMachine.durations.append(time.monotonic() - self.started)

    # -- helpers ------------------------------------------------------------------------

    def transformation(self, func=None, commit_mode: str = "end", one_batch: bool = False) -> Transformation:  # noqa: ANN001
        """The history's transformation: batches of 2 posts or of 1 user, or one batch."""
        if self.target_name == "enriched_posts":
            return self.world.enriched_transformation(func=func or enrich, commit_mode=commit_mode,
                                                      batch_size=None if one_batch else 2)
        return self.world.stats_transformation(func=func or count_posts, commit_mode=commit_mode,
                                               batch_size=None if one_batch else 1)

    @property
    def key_column(self) -> str:
        return "post_id" if self.target_name == "enriched_posts" else "user_id"

    def expected(self) -> set[tuple]:
        return self.model.enriched() if self.target_name == "enriched_posts" else self.model.stats()

    def output_rows(self) -> set[tuple]:
        output = self.world.enriched if self.target_name == "enriched_posts" else self.world.stats
        return rows_of(output.read_actual())

    def current_keys(self) -> set[int]:
        if self.target_name == "enriched_posts":
            return set(self.model.posts)
        return {uid for uid, _ in self.model.posts.values()}

    def run_and_check(self, transformation: Transformation, must_succeed: bool = False, **options) -> None:
        result = self.engine.run_full(transformation, **options)
        if must_succeed:
            assert result.failed_keys == 0, result.errors
        if result.failed_keys == 0:
            assert self.output_rows() == self.expected(), (
                f"after a successful run ({options}): output != full recompute")

    def write_posts(self, rows: dict[int, tuple[int, str]]) -> None:
        self.world.write_posts([(pid, uid, text) for pid, (uid, text) in rows.items()])
        self.model.posts.update(rows)

    def write_profiles(self, names: dict[int, str]) -> None:
        self.world.write_profiles(list(names.items()))
        self.model.profiles.update(names)

    # -- input changes ------------------------------------------------------------------

    @rule(rows=st.lists(st.tuples(POST_IDS, USER_IDS, TEXTS), min_size=1, max_size=3, unique_by=lambda r: r[0]))
    def upsert_posts(self, rows: list[tuple[int, int, str]]) -> None:
        self.write_posts({pid: (uid, text) for pid, uid, text in rows})

    @rule(post_id=POST_IDS, user_id=USER_IDS)
    def move_post_to_another_user(self, post_id: int, user_id: int) -> None:
        _, text = self.model.posts.get(post_id, (None, "moved"))
        self.write_posts({post_id: (user_id, text)})

    @rule(post_ids=st.lists(POST_IDS, min_size=1, max_size=2, unique=True))
    def delete_posts(self, post_ids: list[int]) -> None:
        self.world.write_posts([], deletes=post_ids)
        for pid in post_ids:
            self.model.posts.pop(pid, None)

    @rule(user_ids=st.lists(USER_IDS, min_size=1, max_size=2, unique=True))
    def rename_profiles(self, user_ids: list[int]) -> None:
        self.revision += 1
        self.write_profiles({uid: f"user{uid}-r{self.revision}" for uid in user_ids})

    @rule(user_id=USER_IDS)
    def delete_profile(self, user_id: int) -> None:
        hot = self.world.profiles.open_delta(holder="test")
        hot.delete(self.world.spark.createDataFrame([(user_id,)], "id long"))
        hot.commit()
        self.model.profiles.pop(user_id, None)

    # -- runs ---------------------------------------------------------------------------

    @rule(change_detection=MODES, commit_mode=COMMIT_MODES)
    def run(self, change_detection: str, commit_mode: str) -> None:
        self.run_and_check(self.transformation(commit_mode=commit_mode), change_detection=change_detection)

    @rule(bad_key=st.integers(min_value=0, max_value=6), commit_mode=COMMIT_MODES)
    def run_whose_function_fails_for_one_key(self, bad_key: int, commit_mode: str) -> None:
        column, base = self.key_column, self.transformation().func

        def flaky(**frames):  # noqa: ANN003, ANN202
            if frames["posts"].where(F.col(column) == bad_key).count():
                raise ValueError(f"cannot process {column} {bad_key}")
            return base(**frames)

        self.run_and_check(self.transformation(func=flaky, commit_mode=commit_mode))

    @rule(kind=st.sampled_from(["SystemExit in the function", "error in the commit"]),
          at=st.integers(min_value=1, max_value=3), commit_mode=COMMIT_MODES, backfill=st.booleans())
    def run_that_crashes(self, kind: str, at: int, commit_mode: str, backfill: bool) -> None:
        if kind == "SystemExit in the function":
            transformation = self.transformation(func=exiting_at_call(self.transformation().func, at),
                                                 commit_mode=commit_mode)
            crash = nullcontext()
        else:
            transformation = self.transformation(commit_mode=commit_mode)
            crash = crash_at_commit(at)
        try:
            with crash:
                self.run_and_check(transformation, reprocess_all=backfill)
        except (SystemExit, CommitCrash):
            pass  # the crash happened; the invariants and later runs must cope

    @rule(commit_mode=COMMIT_MODES)
    def backfill(self, commit_mode: str) -> None:
        self.run_and_check(self.transformation(commit_mode=commit_mode), reprocess_all=True)

    @rule(keys=st.lists(st.integers(min_value=0, max_value=6), min_size=1, max_size=3, unique=True))
    def run_changelist(self, keys: list[int]) -> None:
        column = self.key_column
        result = self.engine.run_changelist(self.transformation(), [{column: k} for k in keys])
        if result.failed_keys == 0:
            listed = {row for row in self.output_rows() if row[0] in keys}
            assert listed == {row for row in self.expected() if row[0] in keys}

    # -- offsets, meta and maintenance --------------------------------------------------

    @rule()
    def reset_offsets(self) -> None:
        self.engine.reset_offsets(self.transformation())

    @rule()
    def request_reprocess(self) -> None:
        ReprocessRequests(self.plane).request(self.transformation().transformation_id)
        pending = {row[0] for row in keys_of(self.engine.changed_keys(self.transformation(), change_detection="v2"))}
        assert pending >= self.current_keys(), "after a reprocess request every key must be processed again"

    @rule()
    def initialize_offsets_from_meta(self) -> None:
        self.engine.initialize_offsets_from_transform_meta(self.transformation())

    @rule(which=st.sampled_from(["posts", "profiles", "output", "meta"]))
    def compact(self, which: str) -> None:
        tables = {
            "posts": self.world.posts,
            "profiles": self.world.profiles,
            "output": self.world.enriched if self.target_name == "enriched_posts" else self.world.stats,
            "meta": meta_table(self.world.spark, self.plane, self.transformation()),
        }
        tables[which].compact()

    # -- after every step ---------------------------------------------------------------

    @invariant()
    @precondition(lambda self: self.world is not None)
    def v1_and_v2_detect_the_same_keys(self) -> None:
        t = self.transformation()
        v1 = keys_of(self.engine.changed_keys(t, change_detection="v1"))
        v2 = keys_of(self.engine.changed_keys(t, change_detection="v2"))
        assert v1 == v2, f"changed_keys differ: v1 {v1} v2 {v2}"


def test_incremental_runs_equal_a_full_recompute_on_every_path(spark, tmp_path):
    """`spark` starts the shared session; the machine takes it with get_spark_session()."""
    ExactnessMachine.durations = []
    ExactnessMachine.workdir = f"{tmp_path}/history"
    ExactnessMachine.starting_states = {}
    started = time.monotonic()
    run_state_machine_as_test(ExactnessMachine, settings=settings(
        max_examples=HISTORIES,
        stateful_step_count=STEPS_PER_HISTORY,
        derandomize=True,
        print_blob=True,
        deadline=None,
        # Shrinking a Spark history takes far longer than reading the printed steps.
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    ))
    durations = ExactnessMachine.durations
    print(f"exactness: {len(durations)} histories in {time.monotonic() - started:.0f} s, "
          f"{sum(durations) / max(len(durations), 1):.1f} s per history")


# -- pinned cases -------------------------------------------------------------------------


@pytest.fixture
def posts_world(spark, sqlite_url, warehouse) -> World:
    """Posts 1..6 by users id % 2, profiles 0 and 1."""
    world = make_world(spark, connect(sqlite_url), warehouse)
    world.write_profiles([(0, "ann"), (1, "bob")])
    world.write_posts([(pid, pid % 2, f"post {pid}") for pid in range(1, 7)])
    return world


def test_crashed_backfill_in_batch_mode_loses_no_change(spark, posts_world):
    world = posts_world
    engine = IncrementalEngine(spark, world.posts.plane)
    enriched = world.enriched_transformation(batch_size=2, commit_mode="batch")
    engine.run_full(enriched)
    world.write_posts([(5, 1, "post 5, edited"), (6, 0, "post 6, edited")])  # not processed yet
    world.write_posts([(1, 1, "post 1, edited")])

    with pytest.raises(SystemExit):
        engine.run_full(world.enriched_transformation(batch_size=2, commit_mode="batch",
                                                      func=exiting_at_call(enrich, 2)),
                        reprocess_all=True)

    v1 = keys_of(engine.changed_keys(enriched, change_detection="v1"))
    v2 = keys_of(engine.changed_keys(enriched, change_detection="v2"))
    assert v1 == v2
    assert {(5,), (6,)} <= set(v2)
    engine.run_full(enriched)
    assert rows_of(world.enriched.read_actual()) == world.expected_enriched()
    assert keys_of(engine.changed_keys(enriched, change_detection="v2")) == []


def test_a_reprocess_request_after_a_crashed_batch_mode_backfill_covers_every_key(spark, posts_world):
    """Found by the machine: the backfill's first batch committed (R1 recorded, posts 1-2
    processed at R1), the second commit crashed; a new request kept R1, so posts 1-2
    were not processed again."""
    world = posts_world
    engine = IncrementalEngine(spark, world.posts.plane)
    enriched = world.enriched_transformation(batch_size=2, commit_mode="batch")
    engine.run_full(enriched)
    with pytest.raises(CommitCrash), crash_at_commit(2):
        engine.run_full(enriched, reprocess_all=True)
    first = ReprocessRequests(world.posts.plane).pending(enriched.transformation_id)
    assert keys_of(engine.changed_keys(enriched, change_detection="v2")) == [(3,), (4,), (5,), (6,)]

    second = ReprocessRequests(world.posts.plane).request(enriched.transformation_id)

    assert second > first
    assert keys_of(engine.changed_keys(enriched, change_detection="v2")) == [(pid,) for pid in range(1, 7)]
    assert keys_of(engine.changed_keys(enriched, change_detection="v1")) == [(pid,) for pid in range(1, 7)]
    assert engine.run_full(enriched).processed_keys == 6
    assert ReprocessRequests(world.posts.plane).pending(enriched.transformation_id) is None
    assert rows_of(world.enriched.read_actual()) == world.expected_enriched()


def enrich_with_a_second_row_for_post_3(posts: DataFrame, profiles: DataFrame) -> DataFrame:
    """A function bug: post 3 comes out twice, with different texts."""
    out = enrich(posts, profiles)
    return out.unionByName(out.where("post_id = 3").withColumn("text", F.lit("a second text")))


@pytest.mark.parametrize("commit_mode", ["end", "batch"])
def test_two_output_rows_for_one_key_fail_their_batch_naming_the_key_and_later_runs_retry_it(
        spark, posts_world, commit_mode):
    world = posts_world
    engine = IncrementalEngine(spark, world.posts.plane)
    buggy = world.enriched_transformation(batch_size=2, commit_mode=commit_mode,
                                          func=enrich_with_a_second_row_for_post_3)

    result = engine.run_full(buggy)

    # Batches of two in key order: (1, 2), (3, 4), (5, 6); only the one with post 3 fails.
    assert (result.batches, result.batches_failed, result.failed_keys, result.processed_keys) == (3, 1, 2, 4)
    assert len(result.errors) == 1 and re.search(r"'post_id': 3\b", result.errors[0]), result.errors
    assert {row[0] for row in rows_of(world.enriched.read_actual())} == {1, 2, 5, 6}
    assert keys_of(engine.changed_keys(buggy, change_detection="v2")) == [(3,), (4,)]

    again = engine.run_full(buggy)  # still buggy: the same batch fails again, nothing else waits
    assert (again.changed_keys, again.failed_keys) == (2, 2)

    fixed = engine.run_full(world.enriched_transformation(batch_size=2, commit_mode=commit_mode))
    assert (fixed.changed_keys, fixed.processed_keys, fixed.failed_keys) == (2, 2, 0)
    assert rows_of(world.enriched.read_actual()) == world.expected_enriched()
