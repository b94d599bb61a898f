"""The plans of runs over tables the catalog says are large: nothing proportional to a
table is held by one JVM.

A run decides, from the control-plane catalog's row counts and before any plan is
built, which relations a join may broadcast: only those bounded within the engine's
`driver_keys_limit` (the changes of an incremental run). A first run and a reprocess of
a table larger than that keep their keys distributed and stream through batches of
them with shuffled (sort-merge) joins. Here the limit is set to 50 rows, so a few
hundred rows count as large, and the physical plan of every query the run executed
(Spark's SQL status store, `tests/spark_plans.py`) must hold no broadcast at all: the
copy and the count per user have no join of their own, so any broadcast would be the
engine's. The same run under the default limit, and a small incremental run, do
broadcast: the check sees broadcasts where there are some.
"""

from __future__ import annotations

import pytest
from pyspark.sql.types import LongType, StringType, StructField, StructType

from bench.posts_world import make_world, rows_of
from offset_assets.control_plane import connect
from offset_assets.engine import IncrementalEngine
from offset_assets.engine.changed_keys.held_keys import distributed_from_rows, local_from_rows
from offset_assets.engine.changed_keys.index import BATCH_COL, FIRST_TS_COL
from offset_assets.engine.meta import meta_table
from offset_assets.engine.transformation import Transformation, TransformInput
from offset_assets.local_frames import local_frame
from offset_assets.versioned.compaction import compact
from offset_assets.versioned.table import VersionedTable
from tests.spark_plans import recorded_plans

SRC = StructType([StructField("id", StringType(), False), StructField("v", LongType(), True)])
LIMIT = 50
ROWS = 300


def copy_world(spark, db_url, warehouse, **options):
    plane = connect(db_url)
    src = VersionedTable(spark, plane, "src", ["id"], SRC, warehouse=warehouse)
    dst = VersionedTable(spark, plane, "dst", ["id"], SRC, warehouse=warehouse)
    copy = Transformation("copy", [TransformInput(src)], ["id"], [dst], func=lambda src: src, **options)
    return plane, src, dst, copy


def write_rows(spark, table, first: int, count: int, version: int) -> None:
    rows = [(f"k{i:04d}", i * 10 + version) for i in range(first, first + count)]
    table.write_delta(local_frame(spark, rows, SRC))


def assert_streamed(plans, result, keys: int) -> None:
    assert plans.plans, "no query was recorded"
    assert plans.with_broadcast() == [], plans.describe(plans.with_broadcast())
    # Batches are numbered by a range-partitioned sort: a window ordered by the keys' first
    # change over no partition would move every key into one task.
    one_task = [p for p in plans.plans if f"windowspecdefinition({FIRST_TS_COL}#" in p.plan]
    assert one_task == [], plans.describe(one_task)
    assert plans.with_operator("SortMergeJoin"), "the run's joins are shuffled: " + plans.describe()
    assert (result.changed_keys, result.processed_keys, result.failed_keys) == (keys, keys, 0)


@pytest.mark.parametrize("options", [{}, {"batch_size": 120, "commit_mode": "batch"}],
                         ids=["one-batch", "batches-above-the-limit"])
def test_an_initial_run_of_a_large_table_broadcasts_nothing(spark, sqlite_url, warehouse, options):
    plane, src, dst, copy = copy_world(spark, sqlite_url, warehouse, **options)
    write_rows(spark, src, 0, ROWS // 2, 0)
    write_rows(spark, src, ROWS // 2, ROWS // 2, 0)
    engine = IncrementalEngine(spark, plane, driver_keys_limit=LIMIT)

    with recorded_plans(spark) as plans:
        result = engine.run_full(copy)

    assert_streamed(plans, result, ROWS)
    assert result.batches == (1 if "batch_size" not in options else 3)
    assert rows_of(dst.read_actual()) == rows_of(src.read_actual())


def test_a_reprocess_all_run_of_a_large_compacted_table_broadcasts_nothing(spark, sqlite_url, warehouse):
    """Compacted inputs, output and meta, with more versions after each snapshot than the
    limit: the actual reads' anti-join of snapshot and later deltas is shuffled too."""
    plane, src, dst, copy = copy_world(spark, sqlite_url, warehouse)
    write_rows(spark, src, 0, ROWS, 0)
    engine = IncrementalEngine(spark, plane, driver_keys_limit=LIMIT)
    engine.run_full(copy)
    meta = meta_table(spark, plane, copy)
    for table in (src, dst, meta):
        compact(table)
    write_rows(spark, src, 0, 2 * LIMIT, 1)  # 100 updates after the snapshot
    engine.run_full(copy)  # 100 keys: more than the limit, the output and meta get 100 versions too

    with recorded_plans(spark) as plans:
        result = engine.run_full(copy, reprocess_all=True)

    assert_streamed(plans, result, ROWS)
    assert rows_of(dst.read_actual()) == rows_of(src.read_actual())
    # Nothing is left to do, and the next small change takes the bounded path again.
    assert engine.run_full(copy).changed_keys == 0


def test_a_large_incremental_run_of_keys_that_are_not_the_primary_key_broadcasts_nothing(
        spark, sqlite_url, warehouse):
    """Posts moving between users mark their old and new user: the as-of read of the
    replaced versions before the range is semi-joined with the range's records, shuffled
    when the catalog's row counts exceed the limit."""
    world = make_world(spark, connect(sqlite_url), warehouse)
    world.write_posts([(p, p % 70, f"t{p}") for p in range(1, ROWS + 1)])
    engine = IncrementalEngine(spark, world.posts.plane, driver_keys_limit=LIMIT)
    t = world.stats_transformation()
    with recorded_plans(spark) as first:
        assert engine.run_full(t).processed_keys == 70
    assert first.with_broadcast() == [], first.describe(first.with_broadcast())
    world.write_posts([(p, p % 70 + 100, f"moved{p}") for p in range(1, 2 * LIMIT + 1)])

    with recorded_plans(spark) as plans:
        result = engine.run_full(t)

    assert_streamed(plans, result, 140)  # 70 users left behind, 70 new ones
    assert rows_of(world.stats.read_actual()) == world.expected_stats()


def test_the_check_sees_the_broadcasts_of_a_small_reprocess_and_a_small_incremental_run_plans_no_exchange(
        spark, sqlite_url, warehouse):
    """Under the default limit the same tables are small: the reprocess broadcasts what
    the catalog bounds (the check sees it), and an incremental run of a few keys plans
    neither a broadcast nor a shuffle (one partition where the catalog bounds its reads,
    its write in one pass)."""
    plane, src, dst, copy = copy_world(spark, sqlite_url, warehouse)
    write_rows(spark, src, 0, ROWS, 0)
    engine = IncrementalEngine(spark, plane)
    engine.run_full(copy)
    write_rows(spark, src, 0, 5, 1)

    with recorded_plans(spark) as incremental:
        assert engine.run_full(copy).processed_keys == 5
    with recorded_plans(spark) as reprocess:
        assert engine.run_full(copy, reprocess_all=True).processed_keys == ROWS

    assert incremental.with_broadcast() == [], incremental.describe(incremental.with_broadcast())
    assert incremental.with_operator("Exchange") == [], incremental.describe(incremental.with_operator("Exchange"))
    assert reprocess.with_broadcast(), reprocess.describe()
    assert rows_of(dst.read_actual()) == rows_of(src.read_actual())


def test_distributed_batches_are_the_batches_the_driver_would_cut(spark):
    """Distributed keys are numbered in Spark, in the order the driver sorts collected
    keys (no timestamp first, then the oldest change, then the key), over several range
    partitions: the same batches, the same sizes."""
    spark.conf.set("spark.sql.shuffle.partitions", "7")
    rows = [(k, None if k % 11 == 0 else float(k % 5), "src") for k in range(1, 96)]
    rows += [(k, float(k % 5) + 0.5, "src") for k in range(1, 96, 3)]  # a later change of some keys
    frame = spark.createDataFrame(rows, "id long, update_ts double, _input_name string")

    distributed = distributed_from_rows(["id"], frame, batch_size=10, with_min_ts=False, broadcast_limit=None)
    try:
        batches = {}
        for row in distributed.frame.select("id", BATCH_COL).collect():
            batches.setdefault(row[BATCH_COL], []).append((row["id"],))
        local = local_from_rows(["id"], frame.collect(), 10)
        assert distributed.batch_sizes() == local.batch_sizes()
        assert {number: sorted(keys) for number, keys in batches.items()} == {
            number: sorted(keys) for number, keys in enumerate(local.batches)}
    finally:
        distributed.release()


def test_an_incremental_run_of_more_keys_than_the_pushdown_limit_plans_no_exchange_and_no_broadcast(
        spark, sqlite_url, warehouse):
    """40 changed keys with a pushdown limit of 10: the keys are not an IN filter but the
    driver's relation of them (its size known to Spark), joined in one partition with the
    input's deltas and with the output's earlier rows, which the write reads as its
    candidates: neither a broadcast nor a shuffle. (Rows this few the driver reads and
    writes itself, without Spark: `held_rows_limit=0` keeps them in Spark's plans.)"""
    plane, src, dst, copy = copy_world(spark, sqlite_url, warehouse)
    write_rows(spark, src, 0, ROWS, 0)
    engine = IncrementalEngine(spark, plane, pushdown_limit=10, held_rows_limit=0)
    engine.run_full(copy)
    write_rows(spark, src, 0, 30, 1)
    write_rows(spark, src, ROWS, 10, 1)

    with recorded_plans(spark) as plans:
        assert engine.run_full(copy).processed_keys == 40

    assert plans.with_broadcast() == [], plans.describe(plans.with_broadcast())
    assert plans.with_operator("Exchange") == [], plans.describe(plans.with_operator("Exchange"))
    assert plans.with_operator("ShuffledHashJoin"), "the keys are joined: " + plans.describe()
    assert rows_of(dst.read_actual()) == rows_of(src.read_actual())
