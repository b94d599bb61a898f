"""Table maintenance: compaction by a policy, cleanup by a retention, their CLI commands,
and a compaction committed in the middle of a run (real Spark, real control plane)."""

from __future__ import annotations

import re

import pytest
from click.testing import CliRunner
from pyspark.sql.types import LongType, StringType, StructField, StructType

from bench.posts_world import enrich, make_world, rows_of
from offset_assets.cli import main
from offset_assets.control_plane import connect, database
from offset_assets.engine import IncrementalEngine
from offset_assets.engine.transformation import meta_table_name
from offset_assets.local_frames import local_frame
from offset_assets.versioned import VersionedTable
from offset_assets.versioned.maintenance import (
    MaintenancePolicy,
    MaintenancePolicyError,
    cleanup,
    maintain,
)
from offset_assets.versioned.registered import open_registered_table

SCHEMA = StructType(
    [StructField("id", LongType(), False), StructField("kind", StringType()), StructField("v", LongType())]
)
INPUT = StructType([*SCHEMA.fields, StructField("sys_op", LongType())])

# id 1 changes kind a -> b -> a; id 2 is deleted; ids 3 and 4 change value; id 7 arrives.
HISTORY = [
    [(i, "a" if i % 2 else "b", i, 0) for i in range(1, 7)],
    [(1, "b", 1, 0), (2, None, None, 1)],
    [(3, "a", 30, 0), (7, "b", 7, 0)],
    [(1, "a", 100, 0), (4, "b", 40, 0)],
    [(5, "a", 50, 0), (7, None, None, 1)],
    [(8, "b", 8, 0)],
]


def write(spark, table: VersionedTable, *rows_of_deltas):
    return [table.write_delta(local_frame(spark, rows, INPUT)) for rows in rows_of_deltas]


def every_read(table: VersionedTable) -> dict:
    """Each read the contract names, at every committed delta: what maintenance must keep."""
    last = table.last_committed().delta_num

    def rows(df) -> list[tuple]:
        return sorted(tuple(r) for r in df.collect())

    return {
        "actual": rows(table.read_actual()),
        "as_of": {n: rows(table.read_actual(as_of_delta=n)) for n in range(1, last + 1)},
        "changes": {n: rows(table.read_changes_since(table.delta(n).commit_ts)) for n in range(1, last + 1)},
        "started": rows(table.read_started_in(1, last)),
        "finished": rows(table.read_finished_in(1, last)),
        "keys": rows(table.read_actual(where_in={"id": [1, 3, 7]})),
    }


def folder(path: str) -> str:
    return path.rstrip("/").rsplit("/", 1)[-1]


@pytest.fixture
def events(spark, db_url, warehouse) -> VersionedTable:
    return VersionedTable(spark, connect(db_url), "events", ["id"], SCHEMA, warehouse=warehouse)


# -- policy ------------------------------------------------------------------------------


def test_policy_is_due_after_enough_deltas_or_enough_rows_against_the_snapshot():
    policy = MaintenancePolicy(max_deltas_since_snapshot=3, max_rows_ratio=0.5)
    assert policy.reason_to_compact(0, 0, 100) is None
    assert policy.reason_to_compact(2, 49, 100) is None
    assert policy.reason_to_compact(3, 3, 100) == "3 deltas since the snapshot (max 3)"
    assert policy.reason_to_compact(3, 3, None) == "3 deltas and no snapshot (max 3)"
    assert policy.reason_to_compact(1, 50, 100) == "50 versions since the snapshot of 100 rows (max ratio 0.5)"
    assert policy.reason_to_compact(1, 5, None) == "no snapshot yet, 5 versions in 1 delta(s)"
    deltas_only = MaintenancePolicy(max_deltas_since_snapshot=3, max_rows_ratio=None)
    assert deltas_only.reason_to_compact(2, 10_000, None) is None


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"max_deltas_since_snapshot": 0}, "max_deltas_since_snapshot must be an integer >= 1, got 0"),
        ({"max_deltas_since_snapshot": 2.5}, "max_deltas_since_snapshot must be an integer >= 1, got 2.5"),
        ({"max_rows_ratio": 0}, "max_rows_ratio must be a finite number > 0 or None, got 0"),
        ({"max_rows_ratio": float("nan")}, "max_rows_ratio must be a finite number > 0 or None, got nan"),
    ],
)
def test_an_invalid_policy_is_refused_naming_the_value(options, message):
    with pytest.raises(MaintenancePolicyError, match=re.escape(message)):
        MaintenancePolicy(**options)


def test_maintain_compacts_when_the_policy_says_so_and_reads_stay_identical(spark, events):
    policy = MaintenancePolicy(max_deltas_since_snapshot=3, max_rows_ratio=None)
    write(spark, events, *HISTORY[:2])

    not_due = maintain(events, policy)
    assert (not_due.compacted, not_due.deltas_since_snapshot, not_due.snapshot_delta) == (False, 2, None)
    assert not_due.reason == "not due"
    assert events.catalog.snapshots("events") == []

    write(spark, events, HISTORY[2])
    before = every_read(events)
    due = maintain(events, policy)
    assert (due.compacted, due.snapshot_delta, due.rows_since_snapshot) == (True, 3, 10)
    assert due.reason == "3 deltas and no snapshot (max 3)"
    assert every_read(events) == before
    assert maintain(events, policy).reason == "up to date"

    write(spark, events, *HISTORY[3:])
    before = every_read(events)
    by_rows = maintain(events, MaintenancePolicy(max_deltas_since_snapshot=10, max_rows_ratio=0.5))
    # 5 versions in deltas 4-6 against a snapshot of 6 rows: 5 >= 0.5 * 6.
    assert (by_rows.compacted, by_rows.snapshot_delta, by_rows.deltas_since_snapshot) == (True, 6, 3)
    assert by_rows.reason == "5 versions since the snapshot of 6 rows (max ratio 0.5)"
    assert every_read(events) == before
    assert [s.delta_num for s in events.catalog.snapshots("events")] == [3, 6]


def test_reads_before_and_after_compaction_are_identical_at_every_delta(spark, events):
    write(spark, events, *HISTORY)
    before = every_read(events)
    assert maintain(events, MaintenancePolicy(max_deltas_since_snapshot=1)).compacted
    assert every_read(events) == before
    # update_ts of a snapshot row is still the commit_ts of the delta that wrote it.
    update_ts = {r.id: r.update_ts for r in events.read_actual().collect()}
    assert update_ts[6] == events.delta(1).commit_ts and update_ts[8] == events.delta(6).commit_ts


# -- cleanup -----------------------------------------------------------------------------


def test_cleanup_expires_superseded_snapshots_and_orphans_and_never_a_referenced_file(spark, events):
    always = MaintenancePolicy(max_deltas_since_snapshot=1)
    deltas = write(spark, events, *HISTORY[:2])
    maintain(events, always)  # snapshot at 2
    deltas += write(spark, events, *HISTORY[2:4])
    maintain(events, always)  # snapshot at 4
    deltas += write(spark, events, HISTORY[4])
    maintain(events, always)  # snapshot at 5: the latest, never expired
    deltas += write(spark, events, HISTORY[5])
    hot = events.open_delta(holder="writer")  # in flight: its folder is referenced
    hot.write(spark.createDataFrame([(9, "a", 9, 0)], INPUT))
    orphan = f"{events.root}/deltas/000000000099-0badf11e0000"
    spark.range(1).write.parquet(orphan)
    snapshots = {s.delta_num: s.data_path for s in events.catalog.snapshots("events")}
    before = every_read(events)

    assert cleanup(events, retention_s=3600).removed_paths == []  # all younger than the retention

    result = cleanup(events, retention_s=0)
    assert result.expired_snapshots == [2, 4]
    assert sorted(folder(p) for p in result.removed_paths) == sorted(
        folder(p) for p in (snapshots[2], snapshots[4], orphan)
    )
    assert [s.delta_num for s in events.catalog.snapshots("events")] == [5]
    assert not any(events.files.exists(p) for p in (snapshots[2], snapshots[4], orphan))
    assert all(events.files.exists(d.data_path) for d in deltas)
    assert events.files.exists(snapshots[5]) and events.files.exists(hot.data_path)
    assert every_read(events) == before  # as of 2..4 now read the deltas: same rows
    hot.commit()
    assert sorted(r.id for r in events.read_actual().collect()) == [1, 3, 4, 5, 6, 8, 9]
    assert cleanup(events, retention_s=0).removed_paths == []


def test_cleanup_refuses_a_negative_or_infinite_retention(spark, events):
    for bad in (-1, float("inf")):
        with pytest.raises(MaintenancePolicyError, match="retention must be a finite number of seconds >= 0"):
            cleanup(events, retention_s=bad)


# -- CLI ---------------------------------------------------------------------------------


def test_cli_compact_and_cleanup(spark, sqlite_url, warehouse):
    table = VersionedTable(spark, connect(sqlite_url), "events", ["id"], SCHEMA, warehouse=warehouse)
    write(spark, table, *HISTORY[:3])
    before = every_read(table)
    runner = CliRunner()
    cli = ["--db-url", sqlite_url]

    compacted = runner.invoke(main, [*cli, "compact", "events", "--warehouse", warehouse])
    assert compacted.exit_code == 0, compacted.output
    assert compacted.output == "events: snapshot at delta 3 (6 rows); 3 deltas and no snapshot (max 1)\n"
    assert every_read(table) == before
    again = runner.invoke(main, [*cli, "compact", "events", "--warehouse", warehouse])
    assert again.output == "events: not compacted (up to date; snapshot at delta 3, 0 delta(s) after it)\n"
    write(spark, table, HISTORY[3])
    before = every_read(table)
    by_policy = runner.invoke(main, [*cli, "compact", "events", "--max-deltas", "2", "--warehouse", warehouse])
    assert by_policy.output == "events: not compacted (not due; snapshot at delta 3, 1 delta(s) after it)\n"
    assert runner.invoke(main, [*cli, "compact", "events", "--warehouse", warehouse]).exit_code == 0
    assert every_read(table) == before

    kept = runner.invoke(main, [*cli, "cleanup", "--warehouse", warehouse])
    assert kept.output == "events: 0 snapshot(s) expired, 0 folder(s) removed\n"
    first_snapshot = table.catalog.snapshots("events")[0].data_path
    cleaned = runner.invoke(main, [*cli, "cleanup", "events", "--retention", "0s", "--warehouse", warehouse])
    assert cleaned.exit_code == 0, cleaned.output
    assert cleaned.output.splitlines() == [
        "events: 1 snapshot(s) expired [3], 1 folder(s) removed",
        f"  removed {first_snapshot}",
    ]
    assert every_read(table) == before


def test_cli_errors_name_the_table_the_warehouse_or_the_duration(spark, sqlite_url, warehouse, tmp_path):
    table = VersionedTable(spark, connect(sqlite_url), "events", ["id"], SCHEMA, warehouse=warehouse)
    write(spark, table, HISTORY[0])
    runner = CliRunner()
    cli = ["--db-url", sqlite_url]

    unknown = runner.invoke(main, [*cli, "compact", "evnets", "--warehouse", warehouse])
    assert unknown.exit_code == 1
    assert unknown.output == "error: no versioned table 'evnets' in the delta catalog (tables: events)\n"
    elsewhere = str(tmp_path / "other")
    wrong = runner.invoke(main, [*cli, "cleanup", "events", "--warehouse", elsewhere])
    assert wrong.exit_code == 1
    assert f"not under warehouse {elsewhere!r}: pass --warehouse" in wrong.output
    bad = runner.invoke(main, [*cli, "cleanup", "--retention", "a week"])
    assert bad.exit_code == 2
    assert "'a week' is not a duration such as 3600, 90m, 24h or 7d" in bad.output


# -- a compaction committed while a run is in flight --------------------------------------


def story(world) -> None:
    world.write_profiles([(1, "ann"), (2, "bob"), (3, "cyd")])
    world.write_posts([(10, 1, "a"), (11, 1, "b"), (12, 2, "c"), (13, 3, "d"), (14, 3, "e")])


def changes(world) -> None:
    world.write_posts([(11, 1, "b2"), (15, 2, "f"), (16, 1, "g")], deletes=[13])
    world.write_profiles([(2, "bob-renamed")])


def late_changes(world) -> None:
    world.write_posts([(10, 2, "a-late"), (17, 3, "h")])


def test_a_compaction_committed_while_a_run_is_in_flight_changes_nothing_of_its_result(spark, sqlite_url, warehouse,
                                                                                        tmp_path):
    twin_url = f"sqlite:///{tmp_path / 'twin.db'}"
    worlds = {
        "compacted": make_world(spark, connect(sqlite_url), warehouse),
        "untouched": make_world(spark, connect(twin_url), str(tmp_path / "twin-warehouse")),
    }
    always = MaintenancePolicy(max_deltas_since_snapshot=1)
    results = {}
    for name, world in worlds.items():
        t = world.enriched_transformation(batch_size=2)
        engine = IncrementalEngine(spark, world.posts.plane)
        story(world)
        engine.run_full(t)
        changes(world)
        warehouse_of = world.posts.warehouse
        meta = open_registered_table(spark, world.posts.plane, meta_table_name(t.transformation_id), warehouse_of)
        tables = [world.posts, world.profiles, world.enriched, meta]

        def compact_all(tables: list[VersionedTable] = tables, compacting: bool = name == "compacted") -> None:
            for table in tables if compacting else []:
                maintain(table, always)

        with engine.open_run(t) as run:
            late_changes(world)  # committed after the run's snapshot: invisible to it
            compact_all()  # snapshots now include the late posts delta
            for batch in run.batches:
                run.process_batch(batch, t.func)
                compact_all()
            compact_all()
            result = run.finish()
        compact_all()
        assert run.batches and len(run.batches) > 1
        results[name] = (result, rows_of(world.enriched.read_actual()),
                         rows_of(meta.read_actual(), ["post_id", "is_success"]))
        # Exact as of the run's snapshot: the late posts are not in its output.
        seen = {table.name: table.read_actual(as_of_delta=result.snapshot_deltas[table.name])
                for table in (world.posts, world.profiles)}
        assert results[name][1] == rows_of(enrich(seen["posts"], seen["profiles"]))
        if name == "compacted":
            assert all(world.posts.catalog.snapshots(table.name) for table in tables)
        # The next run sees exactly the late changes, compacted or not.
        results[name] += (engine.run_full(t).changed_keys, rows_of(world.enriched.read_actual()))
        assert results[name][-1] == world.expected_enriched()

    compacted, untouched = results["compacted"], results["untouched"]
    for field in ("changed_keys", "processed_keys", "failed_keys", "rows_read", "rows_written", "rows_deleted",
                  "snapshot_deltas", "batches"):
        assert getattr(compacted[0], field) == getattr(untouched[0], field), field
    assert compacted[1:] == untouched[1:]
    assert compacted[0].changed_keys == 5  # 11, 13 (deleted), 15, 16, and 12 through bob's rename
    assert compacted[3] == 2  # posts 10 and 17
    database.forget(twin_url)


# -- the reference project's maintenance job ------------------------------------------------


def test_the_maintenance_job_compacts_the_project_tables_by_its_policy_and_cleans_them_up(spark, sqlite_url,
                                                                                           warehouse):
    from assets_defs.assets.ingestion import POSTS_SCHEMA
    from assets_defs.maintenance import project_tables, table_maintenance
    from offset_assets.dagster_adapter import (
        ENGINE_RESOURCE_KEY,
        IncrementalEngineResource,
        OffsetStore,
        SparkSessionResource,
    )

    posts = VersionedTable(spark, connect(sqlite_url), "posts", ["post_id"], POSTS_SCHEMA, warehouse=warehouse)
    for n in (1, 2):
        posts.write_delta(spark.createDataFrame([(n, 1, f"post {n}", 0.0)], POSTS_SCHEMA))
    stray = f"{posts.root}/snapshots/000000000001-0badf11e0000"
    spark.range(1).write.parquet(stray)
    engine = IncrementalEngineResource(offset_store=OffsetStore(db_url=sqlite_url), spark=SparkSessionResource(),
                                       warehouse=warehouse)

    result = table_maintenance.execute_in_process(
        resources={ENGINE_RESOURCE_KEY: engine},
        run_config={"ops": {"maintain_tables": {"config": {"max_deltas_since_snapshot": 2,
                                                             "retention_hours": 0}}}},
    )

    assert result.success
    assert project_tables() == ["posts", "profiles", "enriched_posts", "_meta__enriched_posts",
                                "user_post_stats", "_meta__user_post_stats",
                                "accepted_posts", "rejected_posts", "_meta__moderated_posts"]
    assert [s.delta_num for s in posts.catalog.snapshots("posts")] == [2]
    assert not posts.files.exists(stray)
    (output,) = [e for e in result.all_events if e.event_type_value == "STEP_OUTPUT"]
    metadata = {name: value.value for name, value in output.event_specific_data.metadata.items()}
    assert metadata["posts"] == (
        "compacted at delta 2 (2 deltas and no snapshot (max 2)); 0 snapshot(s) expired, 1 folder(s) removed"
    )
    assert metadata["profiles"] == "not materialized yet"
