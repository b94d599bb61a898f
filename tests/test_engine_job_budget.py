"""The Spark-job budget of a run: what an incremental run costs follows its changes.

Counted with job tags and Spark's status store (`count_spark_jobs`): a count is
deterministic where a time is not. Budgets (issue: incremental runs cost what their
changes cost), each counted with adaptive query execution off (the test session's
setting) and on (`spark.sql.adaptive.enabled=true`, Spark's default). A small run turns
adaptive execution off (`evaluation.py`), so under "on" the engine makes no run small
(`small_run_rows_limit=0`): the budgets on are those of runs beyond that limit:

A batch whose keys the driver holds and whose reads (and output) the catalog bounds
within `held_rows_limit` is read, classified and written by the driver with pyarrow
(`engine/held_inputs.py`, `versioned/held_writes.py`): its only Spark jobs are the
changed index and the function's own (a copy's output, local relations folded by Spark's
optimizer, is collected without one; a join is computed by Spark):

| run, read and written by the driver | adaptive off | adaptive on |
|---|---|---|
| one input, end commit, one batch, no failed key | 1 | 1 |
| the same with more keys than the pushdown limit | 1 | 1 |
| with a reference input (reverse and filtered join) | at most 4 | at most 5 |

Read and written by Spark (`held_rows_limit=0`, or tables the catalog does not bound so):

| run | adaptive off | adaptive on |
|---|---|---|
| nothing to do | 0 | 0 |
| one input, end commit, one batch, no failed key | at most 4 | at most 5 |
| the same with more keys than the pushdown limit | 4 | 5 |
| with a reference input (reverse and filtered join) | at most 7 | at most 8 |
| the same over compacted inputs (snapshot and deltas) | at most 7 | at most 8 |

Off: the issue's budget was 8 for the copy, 6 since the catalog's row counts bound the
changed index (collected in one job, not counted then collected); the reference run's
was 12 before its reference changes were bounded the same way, 10 before its reverse
join stopped broadcasting. On: adaptive execution runs every shuffle's map side, every
broadcast and every cache a run reads first as a job of its own before it plans the
rest, so the same plans cost more jobs on tiny data; a small run's changed index and
reads are therefore planned in one partition where the catalog bounds what they scan
(no exchange: `loading.one_partition`). Per phase, off / on:

| phase | copy | reference |
|---|---|---|
| the reference's changed join values (`read_actual_matching`) | - | 1 / 1 (was 1 / 2) |
| the changed index, collected | 1 / 1 (was 1 / 4) | 1 / 1 (was 2 / 5) |
| the primary input's rows and join values | 1 / 1 (was 1 / 3) | 1 / 1 (was 1 / 4) |
| the reference input's rows | - | 1 / 1 (was 1 / 4) |
| the output write (`HotDelta.write`), its files and the meta's | 2 / 2 (was 4 / 9) | 3 / 3 (was 5 / 12) |

The output write of an output whose primary key holds the transform keys is a replacing
write (`outputs.py`): the keys' earlier output rows are read by the write's own job, as
its candidates (an IN filter, or a join with the driver's keys in the write's one
partition), classified, counted and written by that one job; the output is not cached.
The reference run's write has one more job: the function's own join broadcasts the
profiles. The versioned reads rank each key's versions after the snapshot in one
partition when the catalog bounds them (`reads.py`: no exchange for the window), and an
actual read the catalog bounds whole ranks the snapshot's rows with the deltas' versions
there too, with no anti-join (which would broadcast). An input frame read through an IN
filter of keys and bounded by the catalog is not cached: the write's job reads it again,
where a cache would be filled by a job of its own under adaptive execution
(`loading.InputLoader.frames`). Counted here: copy 4 off / 4 on, reference 7 / 7 (9
before); the budgets on allow one job of slack (adaptive execution's count of a plan can
vary by one with when its stages finish). A run of more keys than the pushdown limit
keeps its input cached (see its test).
"""

from __future__ import annotations

import pytest
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType

from bench.posts_world import count_posts, make_world, rows_of
from offset_assets.control_plane import connect
from offset_assets.engine import IncrementalEngine
from offset_assets.engine.meta import meta_table
from offset_assets.engine.transformation import Transformation, TransformInput
from offset_assets.local_frames import local_frame
from offset_assets.spark_jobs import count_spark_jobs
from offset_assets.versioned.compaction import compact
from offset_assets.versioned.evaluation import DEFAULT_SMALL_RUN_ROWS_LIMIT
from offset_assets.versioned.table import VersionedTable
from tests.spark_plans import recorded_plans

ADAPTIVE = "spark.sql.adaptive.enabled"
# Budgets per adaptive setting (see the module docstring): read and written by Spark, and
# by the driver.
BUDGETS = {"off": {"copy": 4, "reference": 7}, "on": {"copy": 5, "reference": 8}}
HELD_BUDGETS = {"off": {"copy": 0, "reference": 2}, "on": {"copy": 0, "reference": 2}}
BY_SPARK = {"held_rows_limit": 0}


@pytest.fixture(params=[pytest.param("off", marks=pytest.mark.quick), "on"],
                ids=["adaptive-off", "adaptive-on"])
def adaptive(request, spark) -> str:
    """Adaptive execution off or on for the test (the shared session's settings are
    restored after it by conftest's `_spark_conf_restored`)."""
    spark.conf.set(ADAPTIVE, "true" if request.param == "on" else "false")
    return request.param


def engine_for(adaptive: str, spark, plane, **settings) -> IncrementalEngine:
    """An engine whose runs keep the test's adaptive setting (under "on", no run is small)."""
    limit = DEFAULT_SMALL_RUN_ROWS_LIMIT if adaptive == "off" else 0
    return IncrementalEngine(spark, plane, small_run_rows_limit=limit, **settings)


SRC = StructType([StructField("id", StringType(), False), StructField("v", LongType(), True)])


def copy_world(spark, db_url, warehouse):
    plane = connect(db_url)
    src = VersionedTable(spark, plane, "src", ["id"], SRC, warehouse=warehouse)
    dst = VersionedTable(spark, plane, "dst", ["id"], SRC, warehouse=warehouse)
    copy = Transformation("copy", [TransformInput(src)], ["id"], [dst], func=lambda src: src)
    return plane, src, dst, copy


def test_a_run_with_nothing_to_do_starts_no_spark_job(spark, sqlite_url, warehouse, adaptive):
    plane, src, dst, copy = copy_world(spark, sqlite_url, warehouse)
    src.write_delta(local_frame(spark, [(str(i), i) for i in range(50)], SRC))
    engine = engine_for(adaptive, spark, plane)
    engine.run_full(copy)

    with count_spark_jobs(spark) as jobs:
        result = engine.run_full(copy)

    assert jobs.count == 0, jobs.describe()
    assert result.changed_keys == 0
    assert engine.changed_keys(copy).count() == 0
    assert engine.changed_keys(copy, change_detection="v1").count() == 0


def test_a_complete_v1_run_settles_its_snapshot_so_the_next_idle_run_starts_no_spark_job(
        spark, sqlite_url, warehouse):
    plane, src, dst, copy = copy_world(spark, sqlite_url, warehouse)
    src.write_delta(local_frame(spark, [(str(i), i) for i in range(50)], SRC))
    engine = IncrementalEngine(spark, plane)
    engine.run_full(copy)
    src.write_delta(local_frame(spark, [("7", 70), ("60", 60)], SRC))
    assert engine.run_full(copy, change_detection="v1").processed_keys == 2

    with count_spark_jobs(spark) as jobs:
        result = engine.run_full(copy)

    assert jobs.count == 0, jobs.describe()
    assert result.changed_keys == 0
    src.write_delta(local_frame(spark, [("7", 700)], SRC))
    assert engine.run_full(copy).processed_keys == 1
    assert rows_of(dst.read_actual()) == rows_of(src.read_actual())


def copy_changed(spark, sqlite_url, warehouse, adaptive, **settings):
    """A copy of 200 rows run once, then 10 of them updated and 10 new: (engine, copy,
    its input and output)."""
    plane, src, dst, copy = copy_world(spark, sqlite_url, warehouse)
    src.write_delta(local_frame(spark, [(str(i), i) for i in range(200)], SRC))
    engine = engine_for(adaptive, spark, plane, **settings)
    engine.run_full(copy)
    src.write_delta(local_frame(spark, [(str(i), i * 10) for i in range(190, 210)], SRC))
    return engine, copy, src, dst


@pytest.mark.parametrize("held", [pytest.param(True, marks=pytest.mark.quick), False],
                         ids=["by-the-driver", "by-spark"])
def test_an_incremental_copy_run_costs_no_spark_job_by_the_driver_at_most_4_by_spark(
        spark, sqlite_url, warehouse, adaptive, held):
    """By the driver, no Spark job: the changed index (the 20 changed versions and the
    meta deltas since the offset) and the 20 rows read with pyarrow, the copy's output
    (their local relation) collected without a job, classified and written with pyarrow,
    and its meta too. By Spark: at most 4 (5 under adaptive execution)."""
    engine, copy, src, dst = copy_changed(spark, sqlite_url, warehouse, adaptive, **({} if held else BY_SPARK))

    with count_spark_jobs(spark) as jobs:
        result = engine.run_full(copy)

    budgets = HELD_BUDGETS if held else BUDGETS
    assert jobs.count <= budgets[adaptive]["copy"], jobs.describe()
    if held:
        assert {phase.name: phase.jobs for phase in result.profile.phases if phase.jobs} == {}
    assert result.changed_keys == 20 and result.processed_keys == 20
    assert result.rows_read == {"src": 20}
    assert (result.rows_written, result.rows_deleted) == ({"dst": 20}, {"dst": 0})
    assert rows_of(dst.read_actual()) == rows_of(src.read_actual())


def enriched_posts_processed_once(spark, db_url, warehouse, posts: int, adaptive: str = "off", **settings):
    """Posts 1..`posts` of users 1-3 (user p % 3 + 1) and their profiles, enriched once."""
    world = make_world(spark, connect(db_url), warehouse)
    world.write_profiles([(1, "ann"), (2, "bob"), (3, "cyd")])
    world.write_posts([(p, p % 3 + 1, f"t{p}") for p in range(1, posts + 1)])
    engine = engine_for(adaptive, spark, world.posts.plane, **settings)
    t = world.enriched_transformation()
    engine.run_full(t)
    return world, engine, t


@pytest.mark.parametrize("held", [True, False], ids=["by-the-driver", "by-spark"])
def test_an_incremental_run_with_a_reference_input_costs_at_most_2_spark_jobs_by_the_driver_7_by_spark(
        spark, sqlite_url, warehouse, adaptive, held):
    """By the driver: the changed index (the reverse join over the posts' actual rows
    included) and the rows read with pyarrow, no job; then only the function's join of the
    rows the driver read (Spark's broadcast of the profiles, and the collect of its
    output)."""
    world, engine, t = enriched_posts_processed_once(spark, sqlite_url, warehouse, posts=39, adaptive=adaptive,
                                                     **({} if held else BY_SPARK))
    world.write_posts([(5, 2, "edited")])
    world.write_profiles([(3, "cyd-renamed")])

    with count_spark_jobs(spark) as jobs:
        result = engine.run_full(t)

    assert jobs.count <= (HELD_BUDGETS if held else BUDGETS)[adaptive]["reference"], jobs.describe()
    # post 5 changed; posts of user 3 (p % 3 == 2) re-triggered through the reverse join.
    assert result.changed_keys == 1 + len([p for p in range(1, 40) if p % 3 == 2 and p != 5])
    assert rows_of(world.enriched.read_actual()) == world.expected_enriched()


def test_a_small_run_under_adaptive_execution_runs_without_it_within_the_budget_off(spark, sqlite_url, warehouse):
    """A user's session keeps Spark's default, adaptive execution on; the engine runs a
    small run without it (`evaluation.py`) and gives the session its setting back."""
    spark.conf.set(ADAPTIVE, "true")
    world, engine, t = enriched_posts_processed_once(spark, sqlite_url, warehouse, posts=39)
    world.write_posts([(5, 2, "edited")])
    world.write_profiles([(3, "cyd-renamed")])

    with count_spark_jobs(spark) as jobs, recorded_plans(spark) as plans:
        engine.run_full(t)

    assert jobs.count <= HELD_BUDGETS["off"]["reference"], jobs.describe()
    assert plans.plans and plans.with_operator("AdaptiveSparkPlan") == [], plans.describe()
    assert spark.conf.get(ADAPTIVE) == "true"
    assert rows_of(world.enriched.read_actual()) == world.expected_enriched()


def test_a_reference_run_over_compacted_inputs_costs_no_more_jobs_and_plans_no_anti_join(
        spark, sqlite_url, warehouse, adaptive):
    """Both inputs compacted, then changed: every actual read merges a snapshot and the
    deltas after it. The catalog bounds each read within the driver limit, so the newest
    version of each key is ranked in one partition; no anti-join drops the snapshot's
    replaced rows (it would broadcast them: a job of its own under adaptive execution).
    Read by Spark: by the driver, no Spark read is planned."""
    world, engine, t = enriched_posts_processed_once(spark, sqlite_url, warehouse, posts=39, adaptive=adaptive,
                                                     **BY_SPARK)
    compact(world.posts)
    compact(world.profiles)
    world.write_posts([(5, 2, "edited"), (6, 1, "moved")])
    world.write_profiles([(3, "cyd-renamed")])

    with count_spark_jobs(spark) as jobs, recorded_plans(spark) as plans:
        result = engine.run_full(t)

    assert jobs.count <= BUDGETS[adaptive]["reference"], jobs.describe()
    assert plans.with_operator("LeftAnti") == [], plans.describe(plans.with_operator("LeftAnti"))
    # posts 5 and 6 changed; the other posts of user 3 (p % 3 == 2) through the reverse join.
    assert result.changed_keys == 2 + len([p for p in range(1, 40) if p % 3 == 2 and p != 5])
    assert rows_of(world.enriched.read_actual()) == world.expected_enriched()


def test_the_catalog_bound_on_the_changed_index_is_never_below_its_rows(spark, sqlite_url, warehouse):
    """A run whose changed index the catalog's row counts bound within the driver limit
    collects it in one job; the bound must hold with keys that are not the input's
    primary key (a moved post marks its old and new user), deletes and failed keys."""
    world = make_world(spark, connect(sqlite_url), warehouse)
    world.write_posts([(p, p % 4, f"t{p}") for p in range(1, 30)])
    engine = IncrementalEngine(spark, world.posts.plane)
    failing = {"on": True}

    def count_or_fail(posts):
        if failing["on"]:
            raise ValueError("refused")
        return count_posts(posts)

    t = world.stats_transformation(func=count_or_fail)
    assert engine.run_full(t).failed_keys == 4
    world.write_posts([(p, 9, f"moved{p}") for p in range(1, 6)], deletes=[6, 7])
    world.write_posts([(8, 0, "edited")])

    index = engine.changed_index(t, "v2")

    assert index.most_rows is not None and index.rows.count() <= index.most_rows
    failing["on"] = False
    assert engine.run_full(t).failed_keys == 0
    assert rows_of(world.stats.read_actual()) == world.expected_stats()


def test_the_catalog_bound_holds_with_a_reference_input_renamed_twice_since_the_offsets(
        spark, sqlite_url, warehouse):
    """A reference input's changes bound the index too: each changed reference version
    pairs with at most every actual row of the primary input, which the catalog bounds.
    Two renames of one profile in two deltas mark its posts twice (one row per version)."""
    world, engine, t = enriched_posts_processed_once(spark, sqlite_url, warehouse, posts=12)
    world.write_profiles([(3, "cyd-1"), (2, "bob-1")])
    world.write_profiles([(3, "cyd-2")])
    world.write_posts([(4, 3, "moved to cyd")], deletes=[12])

    index = engine.changed_index(t, "v2")

    assert index.most_rows is not None and index.rows.count() <= index.most_rows
    with count_spark_jobs(spark) as jobs:
        result = engine.run_full(t)
    assert result.changed_keys == len({p for p in range(1, 13) if p % 3 != 0} | {4, 12})
    assert jobs.count <= BUDGETS["off"]["reference"], jobs.describe()
    assert rows_of(world.enriched.read_actual()) == world.expected_enriched()


def test_a_run_streaming_batches_of_distributed_keys_records_their_meta_without_counting_them_again(
        spark, sqlite_url, warehouse):
    """A first run over more keys than the driver holds numbers its batches in Spark and
    knows each batch's size from then on: the meta commit of its 3 batches (one failed)
    starts no count of its own (13 jobs, one of them the sampling of the range-partitioned
    sort that numbers the batches; 12 when a window numbered them in one task, 15 when the
    commit counted each batch's keys again), and meta holds every key with the right
    outcome."""
    plane, src, dst, _ = copy_world(spark, sqlite_url, warehouse)
    src.write_delta(local_frame(spark, [(f"k{i:03d}", i) for i in range(300)], SRC))

    def copy_but_refuse_one_batch(src):
        if src.where("id = 'k000'").count():
            raise ValueError("refused")
        return src

    copy = Transformation("copy", [TransformInput(src)], ["id"], [dst], func=copy_but_refuse_one_batch,
                          batch_size=120)
    engine = IncrementalEngine(spark, plane, driver_keys_limit=50)

    with count_spark_jobs(spark) as jobs:
        result = engine.run_full(copy)

    assert (result.changed_keys, result.processed_keys, result.failed_keys, result.batches) == (300, 180, 120, 3)
    assert jobs.count <= 13, jobs.describe()
    meta = meta_table(spark, plane, copy).read_actual()
    assert {(row.is_success, row.n) for row in meta.groupBy("is_success").agg(F.count("*").alias("n")).collect()} == {
        (True, 180), (False, 120)}


def test_a_small_changed_index_is_collected_in_one_spark_job_under_both_settings(spark, sqlite_url, warehouse,
                                                                                 adaptive):
    """The catalog bounds the changes and no key was processed since the offsets: the
    index is the deltas' keys, scanned and collected in one job, with no exchange for
    adaptive execution to run apart."""
    plane, src, dst, copy = copy_world(spark, sqlite_url, warehouse)
    src.write_delta(local_frame(spark, [(str(i), i) for i in range(200)], SRC))
    engine = engine_for(adaptive, spark, plane)
    engine.run_full(copy)
    src.write_delta(local_frame(spark, [(str(i), i * 10) for i in range(190, 210)], SRC))
    index = engine.changed_index(copy)

    with count_spark_jobs(spark) as jobs:
        rows = index.rows.collect()

    assert jobs.count == 1, jobs.describe()
    assert sorted(row.id for row in rows) == sorted(str(i) for i in range(190, 210))


def test_a_small_index_checks_its_failed_keys_against_the_meta_in_one_spark_job(spark, sqlite_url, warehouse,
                                                                                adaptive):
    """Keys whose batch failed are listed, so the index reads the meta deltas since
    their failure and drops the keys processed since: both sides are bounded by the
    catalog, one partition each, and the check is one job under both settings. Its
    answer is v1's (the full comparison)."""
    plane, src, dst, _ = copy_world(spark, sqlite_url, warehouse)
    src.write_delta(local_frame(spark, [(str(i), i) for i in range(30)], SRC))
    failing = {"on": True}

    def copy_unless_refused(src):
        if failing["on"]:
            raise ValueError("refused")
        return src

    copy = Transformation("copy", [TransformInput(src)], ["id"], [dst], func=copy_unless_refused, batch_size=10)
    engine = engine_for(adaptive, spark, plane)
    assert engine.run_full(copy).failed_keys == 30
    failing["on"] = False
    assert engine.run_changelist(copy, [{"id": str(i)} for i in range(10)]).processed_keys == 10
    src.write_delta(local_frame(spark, [(str(i), i * 10) for i in range(25, 35)], SRC))
    index = engine.changed_index(copy)

    with count_spark_jobs(spark) as jobs:
        rows = index.rows.collect()

    assert jobs.count == 1, jobs.describe()
    expected = {str(i) for i in range(10, 35)}  # 0-9 were processed since they failed
    assert {row.id for row in rows} == expected
    assert {row.id for row in engine.changed_keys(copy, change_detection="v1").collect()} == expected
    assert engine.run_full(copy).processed_keys == 25
    assert rows_of(dst.read_actual()) == rows_of(src.read_actual())


def test_a_small_reference_change_marks_its_posts_without_a_broadcast(spark, sqlite_url, warehouse, adaptive):
    """A renamed profile marks its user's posts: the catalog bounds the posts, so the
    reverse join reads them into one partition and joins them with the changed profiles
    in place. Collecting its changed join values takes one job and the index one more
    (two under adaptive execution: the versioned read of the posts picks their newest
    versions through a shuffle)."""
    world, engine, t = enriched_posts_processed_once(spark, sqlite_url, warehouse, posts=12, adaptive=adaptive)
    world.write_posts([(13, 1, "new")])
    world.write_profiles([(3, "cyd-renamed")])

    with count_spark_jobs(spark) as jobs:
        index = engine.changed_index(t)
        rows = index.rows.collect()

    assert jobs.count <= (2 if adaptive == "off" else 3), jobs.describe()
    assert {row.post_id for row in rows} == {p for p in range(1, 13) if p % 3 == 2} | {13}
    assert engine.run_full(t).changed_keys == 5
    assert rows_of(world.enriched.read_actual()) == world.expected_enriched()


def rows_from(spark, first: int, count: int, version: int):
    """Rows `k000first`.. with v derived from `version`, generated by Spark (no Python rows)."""
    return spark.range(first, first + count).select(
        F.format_string("k%06d", "id").alias("id"), (F.col("id") * 10 + version).alias("v"))


@pytest.mark.parametrize("held", [True, False], ids=["by-the-driver", "by-spark"])
def test_a_run_of_more_keys_than_the_pushdown_limit_costs_no_spark_job_by_the_driver_4_by_spark(
        spark, sqlite_url, warehouse, adaptive, held):
    """3,000 changed keys (1,500 new, 1,500 updated or deleted all over the table) of a
    30,000-row copy. By the driver: no Spark job (the changed index from the two deltas
    and the meta delta since the offset, the keys' rows read from the two deltas, the
    output's 30,000 committed versions read, classified against and written with
    pyarrow). By Spark: more keys than the engine pushes down as an IN filter (2,000), so
    the keys are joined, in one partition with the relation of the driver's keys (no
    broadcast, no exchange). Per phase, off / on:

    - changed_index 1 / 1: the two deltas' keys, collected;
    - input_reads 1 / 2: the keys' newest versions in those deltas, counted (under
      adaptive execution the cache of them is filled by a job of its own: the frame is
      cached because its keys are joined, and a join's size estimate, the product of
      its sides, would make the write's joins above it shuffle);
    - output_write 1 / 1: the output's previous rows of the keys read into the
      classification's one task, classified, counted and written by one job (no read
      of the previous rows beforehand, no broadcast, no cache);
    - commit 1 / 1: the meta's new versions written."""
    plane, src, dst, copy = copy_world(spark, sqlite_url, warehouse)
    src.write_delta(rows_from(spark, 0, 30_000, 0))
    engine = engine_for(adaptive, spark, plane, **({} if held else BY_SPARK))
    engine.run_full(copy)
    src.write_delta(rows_from(spark, 30_000, 1_500, 1))
    src.write_delta(spark.range(0, 1_500).select(F.format_string("k%06d", F.col("id") * 20).alias("id"),
                                                 (F.col("id") + 7).alias("v"),
                                                 (F.col("id") % 10 == 0).cast("int").alias("sys_op")))

    with count_spark_jobs(spark) as jobs:
        result = engine.run_full(copy)

    assert result.processed_keys == 3_000 > engine.pushdown_limit
    jobs_by_phase = {phase.name: phase.jobs for phase in result.profile.phases if phase.jobs}
    expected = {} if held else {
        "changed_index": 1, "input_reads": 1 if adaptive == "off" else 2, "output_write": 1, "commit": 1}
    assert jobs_by_phase == expected, jobs.describe()
    assert jobs.count == sum(expected.values())
    assert (result.rows_written, result.rows_deleted) == ({"dst": 2_850}, {"dst": 150})
    assert rows_of(dst.read_actual()) == rows_of(src.read_actual())
