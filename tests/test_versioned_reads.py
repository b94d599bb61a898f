"""How reads touch storage: only the files of the deltas they need, update_ts looked up
in an array literal (no join, no extra job), filters pushed down to Parquet, compaction
and cleanup."""

from __future__ import annotations

import re

import pytest
import sqlalchemy as sa
from pyspark.sql.types import LongType, StringType, StructField, StructType

from offset_assets.control_plane import connect, database
from offset_assets.control_plane.schema import table_snapshot
from offset_assets.versioned import VersionedTable
from offset_assets.versioned.compaction import compact
from offset_assets.versioned.layout import WarehouseFiles
from offset_assets.versioned.maintenance import cleanup
from offset_assets.versioned.reads import broadcast_limit

SCHEMA = StructType(
    [StructField("id", LongType(), False), StructField("kind", StringType()), StructField("v", LongType())]
)
INPUT = StructType([*SCHEMA.fields, StructField("sys_op", LongType())])

# id 1 changes kind a -> b -> a; id 2 is deleted; id 3 and 4 change value; id 7 arrives.
HISTORY = [
    [(i, "a" if i % 2 else "b", i, 0) for i in range(1, 7)],
    [(1, "b", 1, 0), (2, None, None, 1)],
    [(3, "a", 30, 0), (7, "b", 7, 0)],
    [(1, "a", 100, 0), (4, "b", 40, 0)],
]


def plan_of(df) -> str:
    return df._sc._jvm.PythonSQLUtils.explainString(df._jdf.queryExecution(), "simple")


def folder(path: str) -> str:
    return path.rstrip("/").rsplit("/", 1)[-1]


def opened_folders(df) -> set[str]:
    """Delta or snapshot folders whose files a read opens."""
    return {re.search(r"/(?:deltas|snapshots)/([^/]+)/", f).group(1) for f in df.inputFiles()}


def actual(df) -> list[tuple]:
    return sorted((r.id, r.kind, r.v, r.sys_from) for r in df.collect())


def write_history(spark, table: VersionedTable, history=HISTORY):
    return [table.write_delta(spark.createDataFrame(rows, INPUT)) for rows in history]


@pytest.fixture(scope="module")
def events(spark, tmp_path_factory):
    root = tmp_path_factory.mktemp("reads")
    url = f"sqlite:///{root / 'cp.db'}"
    table = VersionedTable(spark, connect(url), "events", ["id"], SCHEMA, warehouse=str(root / "warehouse"))
    deltas = write_history(spark, table)
    yield table, deltas
    database.forget(url)


def test_changes_since_opens_only_the_files_of_those_deltas(events):
    table, deltas = events
    changes = table.read_changes_since(deltas[2].commit_ts)
    # One scan of the chosen files; update_ts looked up in a literal, no join, no union per delta.
    plan = plan_of(changes)
    assert plan.count("FileScan parquet") == 1 and "Union" not in plan
    assert "Join" not in plan and "BroadcastExchange" not in plan
    # The one shuffle is the window that derives sys_to per key.
    assert plan.count("Exchange hashpartitioning") == 1 and "Window" in plan

    assert opened_folders(changes) == {folder(deltas[2].data_path), folder(deltas[3].data_path)}
    up_to_3 = table.read_changes_since(deltas[2].commit_ts, up_to_delta=3)
    assert opened_folders(up_to_3) == {folder(deltas[2].data_path)}
    assert sorted((r.id, r.sys_from, r.update_ts) for r in changes.collect()) == [
        (1, 4, deltas[3].commit_ts),
        (3, 3, deltas[2].commit_ts),
        (4, 4, deltas[3].commit_ts),
        (7, 3, deltas[2].commit_ts),
    ]


def test_where_in_on_key_columns_is_pushed_down_to_the_parquet_scan(events):
    table, _ = events
    df = table.read_actual(where_in={"id": [1, 2, 3]})
    assert "In(id, [1,2,3])" in plan_of(df)
    assert actual(df) == [(1, "a", 100, 4), (3, "a", 30, 3)]


def test_filters_on_non_key_columns_see_only_the_actual_version_of_each_key(spark, events):
    table, _ = events
    # id 1 had kind 'b' only in delta 2: a filter must not surface that archived version.
    assert actual(table.read_actual(where_in={"kind": ["b"]})) == [(4, "b", 40, 4), (6, "b", 6, 1), (7, "b", 7, 3)]
    assert actual(table.read_actual(as_of_delta=2, where_in={"kind": ["b"]})) == [
        (1, "b", 1, 2),
        (4, "b", 4, 1),
        (6, "b", 6, 1),
    ]
    kinds = spark.createDataFrame([("a",)], "kind string")
    assert [r[0] for r in actual(table.read_actual(keys=kinds))] == [1, 3, 5]
    ids = spark.createDataFrame([(2,), (5,), (99,)], "id long")
    assert actual(table.read_actual(keys=ids)) == [(5, "a", 5, 1)]


def test_as_of_timestamp_and_delta_info(events):
    table, deltas = events
    assert table.delta_at(deltas[1].commit_ts).delta_num == 2
    assert table.delta_at(deltas[0].commit_ts - 1) is None
    assert table.delta(3).rows_upserted == 2 and table.delta(2).rows_deleted == 1
    assert table.last_committed().delta_num == 4 and table.hot() is None
    assert actual(table.read_as_of_timestamp(deltas[1].commit_ts)) == actual(table.read_actual(as_of_delta=2))
    assert table.read_as_of_timestamp(deltas[0].commit_ts - 1).count() == 0


def test_compaction_reads_the_snapshot_plus_later_deltas_and_keeps_every_read_exact(spark, sqlite_url, warehouse):
    table = VersionedTable(spark, connect(sqlite_url), "events", ["id"], SCHEMA, warehouse=warehouse)
    deltas = write_history(spark, table, HISTORY[:3])
    expected = {n: actual(table.read_actual(as_of_delta=n)) for n in (1, 2, 3)}
    history = sorted(tuple(r) for r in table.read_changes_since(0).collect())

    assert compact(table) == 3
    assert compact(table) == 3  # nothing new to compact: no second snapshot
    assert len(table.catalog.snapshots("events")) == 1
    deltas += write_history(spark, table, HISTORY[3:])

    latest = table.read_actual()
    snapshot = table.catalog.snapshots("events")[0]
    assert opened_folders(latest) == {folder(snapshot.data_path), folder(deltas[3].data_path)}
    assert actual(latest) == [
        (1, "a", 100, 4),
        (3, "a", 30, 3),
        (4, "b", 40, 4),
        (5, "a", 5, 1),
        (6, "b", 6, 1),
        (7, "b", 7, 3),
    ]
    assert {n: actual(table.read_actual(as_of_delta=n)) for n in (1, 2, 3)} == expected
    assert sorted(tuple(r) for r in table.read_changes_since(0, up_to_delta=3).collect()) == history
    # Non-key filters prune the snapshot scan and still see id 1's newer version.
    by_kind = table.read_actual(where_in={"kind": ["b", "c"]})
    assert "In(kind, [b,c])" in plan_of(by_kind)
    assert actual(by_kind) == [(4, "b", 40, 4), (6, "b", 6, 1), (7, "b", 7, 3)]
    # update_ts of snapshot rows is still the commit_ts of the delta that wrote them.
    assert {r.id: r.update_ts for r in latest.collect()}[5] == deltas[0].commit_ts


def test_an_actual_read_the_catalog_bounds_ranks_snapshot_and_deltas_in_one_partition_without_a_join(
        spark, sqlite_url, warehouse):
    """Inside `broadcast_limit(rows)` (the engine's reads) an actual read whose snapshot
    rows and later versions the catalog bounds within `rows` keeps the newest version of
    each key among both, in one partition, with no anti-join; above the bound it joins
    as before. Both give the same rows: deletes after the snapshot, a key filter, a
    filter on another column that an older version matched, every delta number."""
    table = VersionedTable(spark, connect(sqlite_url), "events", ["id"], SCHEMA, warehouse=warehouse)
    write_history(spark, table, HISTORY[:1])
    assert compact(table) == 1
    write_history(spark, table, HISTORY[1:])  # id 2 deleted, id 1 back to kind 'a', id 7 new
    reads = {
        "all": {},
        "by key": {"where_in": {"id": [1, 2, 3, 7]}},
        "by kind": {"where_in": {"kind": ["b"]}},
    }
    for as_of in (1, 2, 3, 4):
        for name, options in reads.items():
            unbounded = table.read_actual(as_of_delta=as_of, **options)
            with broadcast_limit(len(HISTORY[0]) + 6):  # the snapshot's 6 rows, up to 6 versions after
                bounded = table.read_actual(as_of_delta=as_of, **options)
            with broadcast_limit(3):
                joined = table.read_actual(as_of_delta=as_of, **options)
            assert actual(bounded) == actual(unbounded) == actual(joined), (as_of, name)
            if as_of > 1:
                assert "Join" not in plan_of(bounded) and "Exchange" not in plan_of(bounded), (as_of, name)
                assert "LeftAnti" in plan_of(joined), (as_of, name)
    assert [r[0] for r in actual(table.read_actual(where_in={"kind": ["b"]}))] == [4, 6, 7]


def test_cleanup_removes_only_unreferenced_folders_older_than_the_grace_period(spark, sqlite_url, warehouse):
    table = VersionedTable(spark, connect(sqlite_url), "events", ["id"], SCHEMA, warehouse=warehouse)
    kept = write_history(spark, table, HISTORY[:1])[0]
    crashed = table.open_delta(holder="crashed")
    crashed.write(spark.createDataFrame(HISTORY[1], INPUT))
    table.catalog.rollback("events", crashed.delta_num)  # the row is gone, the files stay behind
    stray_snapshot = f"{table.root}/snapshots/000000000001-deadbeef0000"
    spark.range(1).write.parquet(stray_snapshot)
    files = WarehouseFiles()

    assert cleanup(table).removed_paths == []  # younger than the default grace period: maybe still being written
    removed = cleanup(table, 0).removed_paths
    assert sorted(folder(p) for p in removed) == sorted([folder(crashed.data_path), folder(stray_snapshot)])
    assert not files.exists(crashed.data_path) and not files.exists(stray_snapshot)
    assert files.exists(kept.data_path)
    assert table.read_actual().count() == 6


def commit_times_looked_up(plan: str) -> int:
    """Entries of the update_ts lookup literal in a physical plan (one per delta it spans)."""
    lookup = re.search(r"element_at\(\[([^\]]*)\]", plan)
    return 0 if lookup is None else len(lookup.group(1).split(","))


def test_after_compaction_an_actual_read_looks_up_commit_times_only_for_the_deltas_after_the_snapshot(
        spark, sqlite_url, warehouse):
    """A snapshot stores its rows' update_ts: however many deltas came before it, an
    actual read lists and looks up only those after it, with unchanged update_ts."""
    table = VersionedTable(spark, connect(sqlite_url), "events", ["id"], SCHEMA, warehouse=warehouse)
    deltas = write_history(spark, table, HISTORY[:3])
    before = sorted(tuple(r) for r in table.read_actual().collect())
    assert commit_times_looked_up(plan_of(table.read_actual())) == 3

    compact(table)
    deltas += write_history(spark, table, HISTORY[3:])

    latest = table.read_actual()
    assert commit_times_looked_up(plan_of(latest)) == 1  # delta 4 only
    snapshot, after, spanned = table.actual_sources(None)
    assert (snapshot.stores_update_ts, [d.delta_num for d in after], [d.delta_num for d in spanned]) == (
        True, [4], [4])
    by_id = {r.id: (r.update_ts, r.sys_from) for r in latest.collect()}
    assert by_id == {r[0]: (deltas[r[3] - 1].commit_ts, r[3]) for r in actual(latest)}
    assert sorted(tuple(r) for r in table.read_actual(as_of_delta=3).collect()) == before


def test_a_snapshot_written_before_snapshots_stored_update_ts_is_read_with_every_deltas_commit_time(
        spark, sqlite_url, warehouse):
    """Snapshots recorded before revision 0005 do not store update_ts (the migration marks
    them so): their reads look every delta's commit time up, as they always did."""
    plane = connect(sqlite_url)
    table = VersionedTable(spark, plane, "events", ["id"], SCHEMA, warehouse=warehouse)
    write_history(spark, table, HISTORY[:3])
    compact(table)
    write_history(spark, table, HISTORY[3:])
    stored = sorted(tuple(r) for r in table.read_actual().collect())
    with plane.begin() as conn:
        conn.execute(sa.update(table_snapshot).values(stores_update_ts=False))

    old_format = table.read_actual()

    assert commit_times_looked_up(plan_of(old_format)) == 4
    assert sorted(tuple(r) for r in old_format.collect()) == stored
