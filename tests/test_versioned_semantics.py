"""The semantics of a versioned table: hot, actual and archive records, deletes,
unchanged rows, duplicates and conflicting states within one delta."""

from __future__ import annotations

import pytest
from pyspark.sql.types import LongType, StringType, StructField, StructType

from offset_assets.control_plane import connect
from offset_assets.versioned import VersionedTable, WriteStats
from offset_assets.versioned.errors import (
    ConflictingStatesError,
    DeltaClosedError,
    DeltaNotHotError,
    HotDeltaHeldError,
)
from offset_assets.versioned.layout import WarehouseFiles

STORES = StructType(
    [
        StructField("id", LongType(), False),
        StructField("address", StringType()),
        StructField("category", StringType()),
    ]
)
VERSION = ["id", "address", "category", "sys_from", "sys_to", "sys_op"]


@pytest.fixture
def plane(sqlite_url):
    return connect(sqlite_url)


@pytest.fixture
def stores(spark, plane, warehouse) -> VersionedTable:
    return VersionedTable(spark, plane, "stores", ["id"], STORES, warehouse=warehouse)


def rows(spark, data, sys_op: bool = False):
    schema = STORES
    if sys_op:
        schema = StructType([*STORES.fields, StructField("sys_op", LongType())])
    return spark.createDataFrame(data, schema)


def versions(df) -> list[tuple]:
    return sorted((tuple(r) for r in df.select(*VERSION).collect()), key=repr)


@pytest.mark.quick
def test_a_stores_category_change_archives_the_previous_state(spark, stores):
    stores.write_delta(rows(spark, [(1, "ул. Старая, 9", "basic")]))
    address_changed = stores.write_delta(rows(spark, [(1, "ул. Новая, 11", "basic")]))

    hot = stores.open_delta()
    hot.write(rows(spark, [(1, "ул. Новая, 11", "vip")]))
    # The hot record is invisible until the commit.
    assert versions(stores.read_actual()) == [(1, "ул. Новая, 11", "basic", 2, None, 0)]
    committed = hot.commit()

    assert committed.delta_num == 3
    actual = stores.read_actual().collect()
    assert [(r.id, r.address, r.category, r.sys_from, r.sys_to) for r in actual] == [
        (1, "ул. Новая, 11", "vip", 3, None)
    ]
    assert actual[0].update_ts == committed.commit_ts > address_changed.commit_ts
    # Archive: every earlier state, closed by the delta before its successor.
    assert versions(stores.read_started_in(1, 3)) == [
        (1, "ул. Новая, 11", "basic", 2, 2, 0),
        (1, "ул. Новая, 11", "vip", 3, None, 0),
        (1, "ул. Старая, 9", "basic", 1, 1, 0),
    ]


def test_delete_removes_the_key_and_leaves_a_tombstone_with_the_deleted_data(spark, stores):
    stores.write_delta(rows(spark, [(1, "a", "basic"), (2, "b", "basic"), (3, "c", "basic")]))
    hot = stores.open_delta()
    deleted = hot.delete(spark.createDataFrame([(2,)], "id long"))
    hot.write(rows(spark, [(3, "c", "vip")]))
    hot.commit()
    stores.write_delta(rows(spark, [(2, "b2", "basic")]))  # the key comes back in delta 3

    assert deleted == WriteStats(rows_upserted=0, rows_deleted=1, rows_inserted=0)
    assert [stores.catalog.by_num("stores", n).actual_rows for n in (1, 2, 3)] == [3, 2, 3]
    assert versions(stores.read_actual(as_of_delta=2)) == [
        (1, "a", "basic", 1, None, 0),
        (3, "c", "vip", 2, None, 0),
    ]
    assert versions(stores.read_finished_in(2, 2)) == [(2, "b", "basic", 2, None, 1)]
    assert versions(stores.read_finished_in(1, 3)) == [(2, "b", "basic", 2, 2, 1)]
    assert versions(stores.read_actual()) == [
        (1, "a", "basic", 1, None, 0),
        (2, "b2", "basic", 3, None, 0),
        (3, "c", "vip", 2, None, 0),
    ]
    assert stores.delta(2).rows_deleted == 1 and stores.delta(2).rows_upserted == 1


def test_unchanged_rows_duplicates_and_deletes_of_absent_keys_create_no_version(spark, stores):
    stores.write_delta(rows(spark, [(1, "a", "basic"), (2, "b", "basic")]))
    hot = stores.open_delta()
    stats = hot.write(
        rows(
            spark,
            [
                (1, "a", "basic", 0),  # identical to its actual version
                (2, "b", "vip", 0),
                (2, "b", "vip", 0),  # exact duplicate
                (3, "c", "basic", 0),
                (9, None, None, 1),  # delete of a key that is not there
            ],
            sys_op=True,
        )
    )
    second = hot.commit()
    # Key 2 changed, key 3 is new: one inserted, and the table holds three actual rows;
    # the duplicate of key 2 gave it no state of its own.
    assert stats == WriteStats(rows_upserted=2, rows_deleted=0, rows_unchanged=2, rows_inserted=1,
                               rows_superseded=1)
    assert second.actual_rows == 3
    assert versions(stores.read_changes_since(second.commit_ts)) == [
        (2, "b", "vip", 2, None, 0),
        (3, "c", "basic", 2, None, 0),
    ]

    # A delta of unchanged rows only is committed, empty, and causes no downstream work.
    third = stores.write_delta(rows(spark, [(1, "a", "basic"), (2, "b", "vip")]))
    assert (third.delta_num, third.rows_upserted, third.rows_deleted) == (3, 0, 0)
    changes = stores.read_changes_since(third.commit_ts)
    assert changes.collect() == [] and changes.inputFiles() == []


def test_two_states_of_one_key_in_one_write_are_refused_and_nothing_of_it_is_kept(spark, stores):
    hot = stores.open_delta()
    with pytest.raises(ConflictingStatesError, match=r"'stores'.*\{'id': 7\}") as refused:
        hot.write(rows(spark, [(1, "a", "basic"), (7, "x", "basic"), (7, "y", "basic")]))
    assert refused.value.keys == [{"id": 7}]
    hot.write(rows(spark, [(2, "b", "basic")]))
    hot.commit()
    assert versions(stores.read_actual()) == [(2, "b", "basic", 1, None, 0)]


def test_a_key_keeps_one_state_across_writes_into_the_same_hot_delta(spark, stores):
    stores.write_delta(rows(spark, [(5, "p", "basic")]))
    hot = stores.open_delta()
    first = hot.write(rows(spark, [(1, "x", "basic"), (5, "p", "basic")]))
    # The same states again collapse; a different state of a written key is refused,
    # also when the earlier write left the key unchanged, or when it is a delete.
    again = hot.write(rows(spark, [(1, "x", "basic"), (5, "p", "basic")]))
    with pytest.raises(ConflictingStatesError, match=r"\{'id': 1\}.*different state in hot delta 2"):
        hot.write(rows(spark, [(1, "y", "basic"), (3, "c", "basic")]))
    with pytest.raises(ConflictingStatesError, match=r"\{'id': 5\}"):
        hot.write(rows(spark, [(5, "q", "basic")]))
    with pytest.raises(ConflictingStatesError, match=r"\{'id': 1\}"):
        hot.delete(spark.createDataFrame([(1,)], "id long"))
    hot.commit()

    assert first == WriteStats(1, 0, 1, 1) and again == WriteStats(0, 0, 0, 0)
    assert versions(stores.read_actual()) == [
        (1, "x", "basic", 2, None, 0),
        (5, "p", "basic", 1, None, 0),
    ]


def test_hot_delta_is_invisible_and_rollback_frees_its_number_and_files(spark, stores):

    stores.write_delta(rows(spark, [(1, "a", "basic")]))
    hot = stores.open_delta(holder="loader", run_id="run-7")
    hot.write(rows(spark, [(1, "a", "vip"), (2, "b", "basic")]))
    assert stores.hot().delta_num == 2 and stores.hot().holder == "loader"
    assert stores.last_committed().delta_num == 1
    assert versions(stores.read_actual()) == [(1, "a", "basic", 1, None, 0)]
    assert stores.read_changes_since(0).count() == 1

    hot.rollback()
    assert stores.hot() is None and stores.delta(2) is None
    assert not WarehouseFiles().exists(hot.data_path)
    with pytest.raises(DeltaClosedError, match=r"'stores'.*delta 2.*rolled back"):
        hot.write(rows(spark, [(3, "c", "basic")]))
    assert stores.open_delta().delta_num == 2


def test_a_second_writer_is_refused_naming_the_holder_until_the_hot_delta_is_discarded(spark, plane, stores, warehouse):
    hot = stores.open_delta(holder="ingest@host:42", run_id="r1")
    hot.write(rows(spark, [(1, "a", "basic")]))
    other = VersionedTable(spark, plane, "stores", ["id"], STORES, warehouse=warehouse)
    with pytest.raises(HotDeltaHeldError, match=r"'stores'.*delta 1 held by 'ingest@host:42'"):
        other.open_delta(holder="second")

    discarded = other.discard_dead_hot()  # the holder died: clean up after it
    assert discarded.holder == "ingest@host:42"
    assert other.write_delta(rows(spark, [(2, "b", "basic")])).delta_num == 1
    with pytest.raises(DeltaNotHotError, match="rolled back"):
        hot.commit()  # the discarded holder cannot commit over the new delta
    assert versions(stores.read_actual()) == [(2, "b", "basic", 1, None, 0)]


def test_write_delta_leaves_no_hot_delta_when_the_write_is_refused(spark, stores):
    with pytest.raises(ConflictingStatesError):
        stores.write_delta(rows(spark, [(1, "a", "basic"), (1, "b", "basic")]))
    assert stores.hot() is None and stores.last_committed() is None


def test_a_dead_writers_delta_is_discarded_only_while_that_writer_still_holds_it(spark, plane, stores):
    """Two cleaners found the same dead writer's delta; the first discarded it and a new
    writer opened the next one: the second cleaner's discard leaves the live writer's."""
    dead = stores.open_delta(holder="ingest@host:42", run_id="r1")
    dead.write(rows(spark, [(1, "a", "basic")]))
    seen_by_both = stores.hot()
    assert stores.discard_dead_hot(seen_by_both).holder == "ingest@host:42"
    assert not WarehouseFiles().exists(dead.data_path)
    live = stores.open_delta(holder="ingest@host:43", run_id="r2")

    assert stores.discard_dead_hot(seen_by_both) is None
    assert (stores.hot().holder, stores.hot().run_id) == ("ingest@host:43", "r2")
    live.write(rows(spark, [(2, "b", "basic")]))
    assert live.commit().delta_num == 1
    assert stores.discard_dead_hot() is None  # nothing hot any more
