"""A replacing write (`HotDelta.write(replacing=...)`) replaces the actual rows of the keys
its caller names: a row it holds becomes a version unless it equals the actual one, an
actual row of those keys it does not hold gets a tombstone carrying the deleted data,
and every other key is left alone. The same versions whichever way it runs: counted
first, in one pass in one partition (the keys' versions read into that task), or
shuffled (the versions selected in parallel)."""

from __future__ import annotations

import pytest
from pyspark.sql import DataFrame
from pyspark.sql.types import LongType, StringType, StructField, StructType

from offset_assets.control_plane import connect
from offset_assets.versioned import VersionedTable, write_candidates
from offset_assets.versioned.errors import VersionedTableError
from offset_assets.versioned.writes import Replacement

SCHEMA = StructType([StructField("id", LongType(), False), StructField("name", StringType(), True)])


def replacing_keys(spark, ids: list[int], seen: list[bool]) -> Replacement:
    """The versions of `ids`, selected by a join with them; `seen` records whether the
    write read the versions into one partition."""
    keys = spark.createDataFrame([(i,) for i in ids], "id bigint")

    def select(versions: DataFrame, in_one_partition: bool) -> DataFrame:
        seen.append(in_one_partition)
        return versions.join(keys, on="id", how="left_semi")

    return Replacement(select)


@pytest.mark.parametrize("way", ["counted-first", "one-partition", "large-table", "shuffled"])
def test_a_replacing_write_updates_inserts_deletes_and_leaves_other_keys_alone(
        spark, sqlite_url, warehouse, monkeypatch, way):
    table = VersionedTable(spark, connect(sqlite_url), "t", ["id"], SCHEMA, warehouse=warehouse)
    table.write_delta(spark.createDataFrame([(i, f"v{i}") for i in range(1, 11)], SCHEMA))
    table.write_delta(spark.createDataFrame([(5, "v5", 1)], "id bigint, name string, sys_op int"))  # 5 deleted
    rows = {"counted-first": None, "one-partition": 3, "large-table": 3, "shuffled": 60_000}[way]
    if way == "large-table":
        monkeypatch.setattr(write_candidates, "ONE_TASK_ROWS", 5)  # more versions than one task reads
    seen: list[bool] = []

    hot = table.open_delta()
    stats = hot.write(spark.createDataFrame([(2, "changed"), (3, "v3"), (11, "new")], SCHEMA),
                      rows=rows, replacing=replacing_keys(spark, [2, 3, 4, 5, 11], seen))
    delta = hot.commit()

    assert (stats.rows_upserted, stats.rows_deleted, stats.rows_unchanged) == (2, 1, 1)
    assert seen == [way == "one-partition"]
    expected = {(i, f"v{i}") for i in range(1, 11) if i not in (2, 4, 5)} | {(2, "changed"), (11, "new")}
    assert {tuple(row) for row in table.read_actual().select("id", "name").collect()} == expected
    tombstones = table.read_finished_in(delta.delta_num, delta.delta_num)
    assert [tuple(row) for row in tombstones.select("id", "name").collect()] == [(4, "v4")]


def test_a_replacing_write_of_nothing_deletes_every_actual_row_of_its_keys(spark, sqlite_url, warehouse):
    table = VersionedTable(spark, connect(sqlite_url), "t", ["id"], SCHEMA, warehouse=warehouse)
    table.write_delta(spark.createDataFrame([(i, f"v{i}") for i in range(1, 6)], SCHEMA))

    hot = table.open_delta()
    stats = hot.write(spark.createDataFrame([], SCHEMA), rows=0, replacing=replacing_keys(spark, [1, 2, 9], []))
    hot.commit()

    assert (stats.rows_upserted, stats.rows_deleted) == (0, 2)
    assert sorted(row.id for row in table.read_actual().collect()) == [3, 4, 5]


def test_a_replacing_write_refuses_a_key_range_beside_its_keys(spark, sqlite_url, warehouse):
    table = VersionedTable(spark, connect(sqlite_url), "t", ["id"], SCHEMA, warehouse=warehouse)
    hot = table.open_delta()

    with pytest.raises(VersionedTableError, match="table 't': a replacing write takes no key range"):
        hot.write(spark.createDataFrame([(1, "a")], SCHEMA), rows=1, key_range=(1, 1),
                  replacing=replacing_keys(spark, [1], []))
    hot.rollback()
