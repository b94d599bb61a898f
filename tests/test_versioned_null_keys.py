"""A NULL key is a key: in a key column the schema declares nullable, NULL is one key
value, written, updated, left unchanged, deleted and read like any other, with at most
one actual row, on every write path and across compaction. A key column declared not
nullable refuses it (`test_versioned_bad_input.py`)."""

from __future__ import annotations

import pytest
from pyspark.sql.types import DoubleType, LongType, StringType, StructField, StructType

from offset_assets.control_plane import connect
from offset_assets.versioned import VersionedTable, delta_files, hot_delta, write_candidates
from offset_assets.versioned.compaction import compact
from offset_assets.versioned.errors import ConflictingStatesError

SCHEMA = StructType([
    StructField("id", LongType(), True),
    StructField("name", StringType(), True),
    StructField("score", DoubleType()),
])
ROWS = "id bigint, name string, score double, sys_op int"
# Writes with the versions each makes (upserted, deleted, unchanged) and the actual rows
# after it: the NULL key inserted (its exact duplicate collapses), updated, unchanged,
# deleted by a row whose other columns hold whatever, inserted again, unchanged again.
HISTORY = [
    ([(None, "n", 1.0, 0), (1, "a", 1.0, 0), (None, "n", 1.0, 0)], (2, 0, 0),
     {(None, "n", 1.0), (1, "a", 1.0)}),
    ([(None, "n", 2.0, 0), (1, "a", 1.0, 0), (2, "b", 2.0, 0)], (2, 0, 1),
     {(None, "n", 2.0), (1, "a", 1.0), (2, "b", 2.0)}),
    ([(None, "junk", None, 1), (2, "b", 2.0, 0)], (0, 1, 1),
     {(1, "a", 1.0), (2, "b", 2.0)}),
    ([(None, "m", 3.0, 0), (3, "c", 3.0, 0)], (2, 0, 0),
     {(None, "m", 3.0), (1, "a", 1.0), (2, "b", 2.0), (3, "c", 3.0)}),
    ([(None, "m", 3.0, 0), (1, "a", None, 1)], (0, 1, 1),
     {(None, "m", 3.0), (2, "b", 2.0), (3, "c", 3.0)}),
]
PATHS = ["counted first", "one pass", "shuffled", "candidates bounded by values", "candidates bounded by min/max",
         "candidates bounded by min/max, counted first", "candidates bounded by the caller's key range",
         # Compacted after each write: the next writes and reads meet the NULL key's row in a snapshot.
         "one pass, compacted", "candidates bounded by min/max, compacted"]


def actual(table: VersionedTable) -> set[tuple]:
    return {tuple(row) for row in table.read_actual().select("id", "name", "score").collect()}


@pytest.mark.parametrize("path", PATHS)
def test_a_null_key_is_one_key_written_updated_deleted_and_written_again_on_every_write_path(
        spark, sqlite_url, warehouse, monkeypatch, path):
    if path == "shuffled":  # above the small-write limit: shuffled by key into partitions
        monkeypatch.setattr(hot_delta, "SMALL_WRITE_ROWS", 0)
        monkeypatch.setattr(delta_files, "ROWS_PER_PARTITION", 1)
    if path.startswith("candidates bounded"):  # the candidate scan bounded by the written keys
        monkeypatch.setattr(write_candidates, "WHOLE_SCAN_ROWS", 0)
    compacted = path.endswith(", compacted")
    path = path.removesuffix(", compacted")
    if "min/max" in path:
        monkeypatch.setattr(write_candidates, "IN_LIST_ROWS", 0)
    table = VersionedTable(spark, connect(sqlite_url), "nullable_keys", ["id"], SCHEMA, warehouse=warehouse)
    for number, (rows, versions, after) in enumerate(HISTORY, start=1):
        df = spark.createDataFrame(rows, ROWS)
        ids = [r[0] for r in rows if r[0] is not None]
        hot = table.open_delta()
        if path.endswith("key range"):
            stats = hot.write(df, rows=len(rows), key_range=(min(ids), max(ids)))
        else:
            stats = hot.write(df, rows=None if path.endswith("counted first") else len(rows))
        hot.commit()
        assert (stats.rows_upserted, stats.rows_deleted, stats.rows_unchanged) == versions, number
        assert actual(table) == after, number
        # The catalog's count of actual rows follows: the NULL key is counted once.
        assert table.last_committed().actual_rows == len(after), number
        if compacted:
            compact(table)
    deleted = table.read_finished_in(1, len(HISTORY)).where("id IS NULL")
    assert [(r.name, r.score, r.sys_from) for r in deleted.collect()] == [("n", 2.0, 3)]  # the tombstone's data


def test_reads_by_key_find_the_null_key(spark, sqlite_url, warehouse):
    table = VersionedTable(spark, connect(sqlite_url), "nullable_keys", ["id"], SCHEMA, warehouse=warehouse)
    table.write_delta(spark.createDataFrame([(None, "n", 1.0, 0), (1, "a", 1.0, 0), (2, "b", 2.0, 0)], ROWS))

    def ids(df) -> list:
        return sorted((r.id for r in df.collect()), key=lambda v: (v is not None, v))

    assert ids(table.read_actual(where_in={"id": [None]})) == [None]
    assert ids(table.read_actual(where_in={"id": [None, 2]})) == [None, 2]
    assert ids(table.read_actual(where_in={"id": [1]})) == [1]
    keys = spark.createDataFrame([(None,), (1,)], "id bigint")
    assert ids(table.read_actual(keys=keys)) == [None, 1]


@pytest.mark.parametrize("rows", [None, 2], ids=["counted first", "one pass"])
def test_two_states_of_the_null_key_in_one_write_are_refused_naming_it(spark, sqlite_url, warehouse, rows):
    table = VersionedTable(spark, connect(sqlite_url), "nullable_keys", ["id"], SCHEMA, warehouse=warehouse)
    hot = table.open_delta()
    with pytest.raises(ConflictingStatesError, match=r"different states of key\(s\) \[\{'id': None\}\] in one write"):
        hot.write(spark.createDataFrame([(None, "n", 1.0, 0), (None, "n", 2.0, 0)], ROWS), rows=rows)
    hot.rollback()
    assert actual(table) == set()


def test_a_null_in_one_column_of_a_composite_key_is_a_key_of_its_own(spark, sqlite_url, warehouse):
    schema = StructType([StructField("shop", StringType(), True), StructField("day", LongType(), True),
                         StructField("amount", DoubleType())])
    table = VersionedTable(spark, connect(sqlite_url), "sales", ["shop", "day"], schema, warehouse=warehouse)
    table.write_delta(spark.createDataFrame([("a", None, 1.0), (None, 1, 2.0), (None, None, 3.0), ("a", 1, 4.0)],
                                            schema))
    compact(table)
    table.write_delta(spark.createDataFrame([("a", None, 5.0), (None, None, 6.0)], schema))

    assert {tuple(r) for r in table.read_actual().select("shop", "day", "amount").collect()} == {
        ("a", None, 5.0), (None, 1, 2.0), (None, None, 6.0), ("a", 1, 4.0)}
