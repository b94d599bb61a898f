"""A revert of a versioned table: its state as of an earlier delta, written as one new
delta that keeps the history, takes the table's write lock and writes only the keys
changed since; refused in one line, with nothing changed, where it cannot be exact."""

from __future__ import annotations

import shutil

import pytest
from pyspark.sql.types import LongType, StringType, StructField, StructType

from bench.posts_world import make_world
from offset_assets.control_plane import connect
from offset_assets.engine import IncrementalEngine
from offset_assets.engine.meta import meta_table
from offset_assets.local_frames import local_frame
from offset_assets.spark_jobs import count_spark_jobs
from offset_assets.versioned import VersionedTable, plan_revert, revert_table
from offset_assets.versioned.compaction import compact
from offset_assets.versioned.errors import HotDeltaHeldError
from offset_assets.versioned.revert import RevertChanges, RevertError

SCHEMA = StructType([StructField("id", LongType(), True), StructField("v", StringType())])


def rows(df) -> dict:
    return {r.id: r.v for r in df.select("id", "v").collect()}


def write(table: VersionedTable, upserts: list[tuple] = (), deletes: list[int | None] = ()) -> int:
    hot = table.open_delta(holder="loader")
    if upserts:
        hot.write(local_frame(table.spark, list(upserts), SCHEMA))
    if deletes:
        hot.delete(local_frame(table.spark, [(key,) for key in deletes], "id long"))
    return hot.commit().delta_num


@pytest.fixture
def orders(spark, sqlite_url, warehouse) -> VersionedTable:
    """Delta 1: keys NULL, 1, 2, 3. Delta 2 (the bad load): 2 updated, 3 deleted, 4 added.
    Delta 3 (after it): 1 and the NULL key updated, 5 added."""
    table = VersionedTable(spark, connect(sqlite_url), "orders", ["id"], SCHEMA, warehouse=warehouse)
    write(table, [(None, "n"), (1, "a"), (2, "b"), (3, "c")])
    write(table, [(2, "B"), (4, "d")], deletes=[3])
    write(table, [(1, "A"), (5, "e"), (None, "N")])
    return table


def test_a_revert_commits_the_state_as_of_the_delta_as_a_new_delta_and_keeps_every_earlier_read(orders):
    before = {n: rows(orders.read_actual(as_of_delta=n)) for n in (1, 2, 3)}

    result = revert_table(orders, 1)

    assert (result.delta.delta_num, result.delta.reverts_to, result.last_delta) == (4, 1, 3)
    assert orders.delta(4).reverts_to == 1 and orders.delta(3).reverts_to is None
    assert rows(orders.read_actual()) == before[1] == {None: "n", 1: "a", 2: "b", 3: "c"}
    assert {n: rows(orders.read_actual(as_of_delta=n)) for n in (1, 2, 3)} == before  # history kept
    # The revert's delta shows what it changed: NULL, 1 and 2 back, 3 restored; 4 and 5
    # deleted (their tombstones carry the rows they delete).
    assert rows(orders.read_started_in(4, 4)) == {None: "n", 1: "a", 2: "b", 3: "c"}
    assert rows(orders.read_finished_in(4, 4)) == {4: "d", 5: "e"}
    assert result.changes == RevertChanges(upserted_back=3, deleted=2, restored=1, unchanged=0)
    assert (orders.delta(4).rows_upserted, orders.delta(4).rows_deleted, orders.delta(4).actual_rows) == (4, 2, 4)
    assert orders.hot() is None


def test_a_revert_writes_only_the_keys_changed_after_the_delta_and_no_version_for_one_changed_back(
    spark, sqlite_url, warehouse
):
    table = VersionedTable(spark, connect(sqlite_url), "orders", ["id"], SCHEMA, warehouse=warehouse)
    write(table, [(key, f"v{key}") for key in range(1, 201)])
    write(table, [(7, "bad"), (8, "bad")])
    write(table, [(7, "v7")])  # key 7 back to its state at delta 1 already

    result = revert_table(table, 1)

    assert result.changes == RevertChanges(upserted_back=1, deleted=0, restored=0, unchanged=1)
    assert (result.delta.rows_upserted, result.delta.rows_deleted) == (1, 0)
    assert rows(table.read_started_in(4, 4)) == {8: "v8"}
    assert rows(table.read_actual()) == {key: f"v{key}" for key in range(1, 201)}


def test_the_dry_run_plans_what_the_revert_then_does_and_writes_nothing(orders):
    plan = plan_revert(orders, 1, sample=2)

    assert (plan.to_delta, plan.last_delta) == (1, 3)
    assert plan.changes == RevertChanges(upserted_back=3, deleted=2, restored=1, unchanged=0)
    assert plan.samples == {
        "upserted_back": [{"id": None}, {"id": 1}],
        "deleted": [{"id": 4}, {"id": 5}],
        "restored": [{"id": 3}],
    }
    assert orders.last_committed().delta_num == 3 and orders.hot() is None
    assert revert_table(orders, 1).changes == plan.changes


def test_a_revert_to_zero_empties_the_table_and_a_revert_of_the_revert_brings_every_row_back(orders):
    state_at_3 = rows(orders.read_actual())

    emptied = revert_table(orders, 0)
    assert rows(orders.read_actual()) == {}
    assert emptied.changes == RevertChanges(upserted_back=0, deleted=5, restored=0)

    back = revert_table(orders, 3)  # the revert is a delta like any other: it can be undone
    assert rows(orders.read_actual()) == state_at_3
    assert back.changes == RevertChanges(upserted_back=0, deleted=0, restored=5)
    assert [d.reverts_to for d in orders.catalog.committed("orders")] == [None, None, None, 0, 3]


def test_a_revert_reads_through_a_compaction_made_after_the_delta(orders):
    compact(orders)  # a snapshot at delta 3: the state as of 1 is read from the deltas

    revert_table(orders, 2)

    assert rows(orders.read_actual()) == {None: "n", 1: "a", 2: "B", 4: "d"}


def test_a_revert_to_the_last_delta_writes_nothing(orders):
    result = revert_table(orders, 3)

    assert (result.delta, result.changes) == (None, RevertChanges(0, 0, 0))
    assert orders.last_committed().delta_num == 3 and orders.hot() is None


# -- refused, in one line, nothing changed ------------------------------------------------


def assert_unchanged(table: VersionedTable, last: int = 3) -> None:
    assert table.last_committed().delta_num == last
    assert table.hot() is None or table.hot().holder != "revert"


@pytest.mark.parametrize(
    ("to_delta", "message"),
    [
        (4, "table 'orders': cannot revert to delta 4: it does not exist (last committed: 3)"),
        (
            -1,
            "table 'orders': cannot revert to delta -1: a delta number is an integer >= 0 (0: the empty table "
            "before its first delta)",
        ),
    ],
)
def test_a_revert_to_a_delta_that_does_not_exist_is_refused(orders, to_delta, message):
    with pytest.raises(RevertError) as refused:
        revert_table(orders, to_delta)
    assert str(refused.value) == message
    with pytest.raises(RevertError):
        plan_revert(orders, to_delta)
    assert_unchanged(orders)


def test_a_revert_of_a_table_another_writer_holds_is_refused_naming_the_holder(orders):
    partner = orders.open_delta(holder="partner-load", run_id="nightly")

    with pytest.raises(
        HotDeltaHeldError,
        match=r"^table 'orders' already has hot delta 4 held by 'partner-load' "
        r"\(run 'nightly'",
    ) as refused:
        revert_table(orders, 1)

    assert "\n" not in str(refused.value)
    assert orders.hot().holder == "partner-load"
    partner.rollback()
    assert_unchanged(orders)


def test_a_revert_to_a_delta_whose_files_are_gone_is_refused_naming_the_delta(orders):
    shutil.rmtree(orders.delta(2).data_path)

    with pytest.raises(RevertError) as refused:
        revert_table(orders, 1)

    assert str(refused.value) == (
        f"table 'orders': cannot revert to delta 1: the files of delta 2 are gone ({orders.delta(2).data_path}); "
        "cleanup never removes a committed delta's files, so they were removed outside the catalog"
    )
    assert_unchanged(orders)


def test_a_transformations_output_and_meta_are_refused_their_inputs_are_not(spark, sqlite_url, warehouse):
    world = make_world(spark, connect(sqlite_url), warehouse)
    world.write_profiles([(1, "ann")])
    world.write_posts([(1, 1, "first")])
    engine = IncrementalEngine(spark, world.posts.plane)
    engine.run_full(world.enriched_transformation())
    world.write_posts([(1, 1, "second")])
    engine.run_full(world.enriched_transformation())
    meta = meta_table(spark, world.posts.plane, world.enriched_transformation())

    with pytest.raises(RevertError) as output:
        revert_table(world.enriched, 1)
    with pytest.raises(RevertError) as of_meta:
        revert_table(meta, 1)

    assert str(output.value) == (
        "table 'enriched_posts': is an output of transformation 'enrich_posts' (delta 1 was committed with its meta "
        "table '_meta__enrich_posts'): a revert would leave its offsets and meta saying keys are processed that no "
        "longer hold what it wrote; revert its inputs, and its next run follows"
    )
    assert str(of_meta.value) == (
        "table '_meta__enrich_posts': is the meta table of transformation 'enrich_posts' (which keys it processed, "
        "and when): a revert would make it lie; reset or reprocess the transformation instead"
    )
    assert world.enriched.last_committed().delta_num == 2 and meta.last_committed().delta_num == 2
    assert revert_table(world.posts, 1).delta.delta_num == 3  # an input is reverted, and its run follows
    engine.run_full(world.enriched_transformation())
    assert {r.text for r in world.enriched.read_actual().collect()} == {"first"}


def test_a_revert_of_a_few_keys_costs_two_spark_jobs(spark, sqlite_url, warehouse):
    """The keys changed since the delta, read from the undone deltas' files only (broadcast
    to the semi-joins), and the replacing write's one pass: no count, no cache."""
    table = VersionedTable(spark, connect(sqlite_url), "orders", ["id"], SCHEMA, warehouse=warehouse)
    write(table, [(key, f"v{key}") for key in range(2000)])
    write(table, [(key, "bad") for key in range(10)] + [(5000, "new")])

    with count_spark_jobs(spark) as jobs:
        result = revert_table(table, 1)

    assert result.changes == RevertChanges(upserted_back=10, deleted=1, restored=0)
    assert jobs.count <= 2, jobs.describe()
