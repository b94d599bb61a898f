"""A write whose row count the caller gives runs in one pass (classified, counted and
written by one Spark job), and its candidates are bounded by the written keys when the
table is large: the same versions, counts and refusals as a write counted first, and
fewer Spark jobs."""

from __future__ import annotations

import os

import pytest
from pyspark.sql.types import DoubleType, LongType, StringType, StructField, StructType

from offset_assets.control_plane import connect
from offset_assets.spark_jobs import count_spark_jobs
from offset_assets.versioned import VersionedTable, delta_files, hot_delta, write_candidates
from offset_assets.versioned.errors import (
    ConflictingStatesError,
    InvalidSysOpError,
    NullKeyError,
    VersionedTableError,
)

SCHEMA = StructType([
    StructField("id", LongType(), False),
    StructField("name", StringType(), False),
    StructField("score", DoubleType()),
])
ROWS = "id bigint, name string, score double, sys_op int"
# A history of writes: new keys, an update, an unchanged row, a delete (its tombstone
# carries the deleted data), a delete of a key never written, exact duplicates.
HISTORY = [
    [(1, "a", 1.0, 0), (2, "b", 2.0, 0), (3, "c", None, 0), (4, "d", 4.0, 0), (4, "d", 4.0, 0)],
    [(2, "b", 2.5, 0), (3, "c", None, 0), (4, "d", None, 1), (9, "z", None, 1), (5, "e", 5.0, 0), (5, "e", 5.0, 0)],
    [(1, "a", None, 1), (4, "d", 4.4, 0), (6, "f", 6.0, 0)],
]


def shuffled(monkeypatch) -> None:
    """Every write counts as large: shuffled by key into one partition per core."""
    monkeypatch.setattr(hot_delta, "SMALL_WRITE_ROWS", 0)
    monkeypatch.setattr(delta_files, "ROWS_PER_PARTITION", 1)


def tables(spark, sqlite_url, warehouse):
    plane = connect(sqlite_url)
    return (VersionedTable(spark, plane, "counted_first", ["id"], SCHEMA, warehouse=warehouse),
            VersionedTable(spark, plane, "one_pass", ["id"], SCHEMA, warehouse=warehouse))


def write(table: VersionedTable, df, rows: int | None, last: bool = False, key_range=None):
    hot = table.open_delta()
    stats = hot.write(df, rows=rows, last=last, key_range=key_range)
    hot.commit()
    return stats


def files_under(path: str) -> list[str]:
    local = path.removeprefix("file:")
    return sorted(os.path.join(folder, name) for folder, _, names in os.walk(local) for name in names)


def every_version(table: VersionedTable) -> list[tuple]:
    last = table.last_committed().delta_num
    rows = table.read_started_in(1, last).unionByName(table.read_finished_in(1, last))
    return sorted(tuple(r) for r in rows.select("id", "name", "score", "sys_op", "sys_from", "sys_to").collect())


@pytest.mark.parametrize("path", ["small", "shuffled", "candidates bounded by values", "candidates bounded by min/max",
                                  "candidates bounded by the caller's key range"])
def test_a_write_given_its_row_count_stores_the_versions_and_counts_of_one_counted_first(
        spark, sqlite_url, warehouse, monkeypatch, path):
    if path == "shuffled":  # above the small-write limit: shuffled by key into partitions
        shuffled(monkeypatch)
    if path.startswith("candidates bounded"):  # the candidate scan bounded by the written keys
        monkeypatch.setattr(write_candidates, "WHOLE_SCAN_ROWS", 0)
    if path == "candidates bounded by min/max":
        monkeypatch.setattr(write_candidates, "IN_LIST_ROWS", 0)
    counted_first, one_pass = tables(spark, sqlite_url, warehouse)
    for rows in HISTORY:
        df = spark.createDataFrame(rows, ROWS)
        ids = [r[0] for r in rows]
        key_range = (min(ids), max(ids)) if path.endswith("key range") else None
        assert write(one_pass, df, len(rows), key_range=key_range) == write(counted_first, df, rows=None)
    assert every_version(one_pass) == every_version(counted_first)
    assert every_version(one_pass)  # the history is not empty
    assert sorted(map(tuple, one_pass.read_actual().select("id", "name", "score").collect())) == [
        (2, "b", 2.5), (3, "c", None), (4, "d", 4.4), (5, "e", 5.0), (6, "f", 6.0)]


def test_a_bounded_candidate_scan_finds_the_actual_versions_of_keys_spread_over_deltas(
        spark, sqlite_url, warehouse, monkeypatch):
    monkeypatch.setattr(write_candidates, "WHOLE_SCAN_ROWS", 0)
    shuffled(monkeypatch)  # the min/max bound of a larger write
    table = VersionedTable(spark, connect(sqlite_url), "spread", ["id"], SCHEMA, warehouse=warehouse)
    for first in (0, 100, 200):
        write(table, spark.createDataFrame([(i, f"n{i}", float(i), 0) for i in range(first, first + 50)], ROWS), 50)
    # Keys 40..60 and 240..260: two deltas hold candidates, one (100..149) lies between them.
    rows = [(i, f"n{i}", float(i), 0) for i in [*range(40, 60), *range(240, 260)]]
    stats = write(table, spark.createDataFrame(rows, ROWS), len(rows))
    assert (stats.rows_upserted, stats.rows_unchanged) == (20, 20)  # 50..59 and 250..259 are new


REFUSED = {
    "two states of a key": ([(1, "a", 1.0, 0), (1, "a", 2.0, 0)], ConflictingStatesError,
                            r"different states of key\(s\) \[\{'id': 1\}\] in one write"),
    "a null in a key column declared not nullable": ([(None, "a", 1.0, 0)], NullKeyError,
                                                      r"null in primary-key column\(s\) \['id'\], which the schema "
                                                      r"declares not nullable"),
    "a bad sys_op": ([(1, "a", 1.0, 7)], InvalidSysOpError, r"found 7 for key\(s\) \[\{'id': 1\}\]"),
    "a null in a non-nullable column": ([(1, None, 1.0, 0)], NullKeyError,
                                        r"non-nullable column\(s\) \['name'\] for key\(s\) \[\{'id': 1\}\]"),
    "another state than an earlier write": ([(7, "g", 0.5, 0)], ConflictingStatesError,
                                            r"already have a different state in hot delta"),
}


@pytest.mark.parametrize("path", ["small", "shuffled"])
@pytest.mark.parametrize("case", REFUSED)
def test_a_refused_one_pass_write_raises_as_a_counted_one_and_keeps_no_file(
        spark, sqlite_url, warehouse, monkeypatch, case, path):
    if path == "shuffled":
        shuffled(monkeypatch)
    table = VersionedTable(spark, connect(sqlite_url), "refusing", ["id"], SCHEMA, warehouse=warehouse)
    write(table, spark.createDataFrame([(1, "a", 1.0, 0)], ROWS), 1)
    hot = table.open_delta()
    hot.write(spark.createDataFrame([(7, "g", 7.0, 0)], ROWS), rows=1)  # an earlier write into the delta
    before = files_under(hot.data_path)
    rows, error, message = REFUSED[case]
    with pytest.raises(error, match=message):
        hot.write(spark.createDataFrame(rows, ROWS), rows=len(rows))
    assert files_under(hot.data_path) == before
    # The delta stays usable and holds the earlier write only.
    hot.write(spark.createDataFrame([(8, "h", 8.0, 0)], ROWS), rows=1)
    hot.commit()
    assert sorted(r.id for r in table.read_actual().collect()) == [1, 7, 8]


@pytest.mark.parametrize("adaptive", ["false", "true"])
def test_a_small_last_write_given_its_row_count_is_one_spark_job_under_either_adaptive_setting(
        spark, sqlite_url, warehouse, adaptive):
    spark.conf.set("spark.sql.adaptive.enabled", adaptive)
    table = VersionedTable(spark, connect(sqlite_url), "small_writes", ["id"], SCHEMA, warehouse=warehouse)
    first = spark.createDataFrame([(i, f"n{i}", float(i), 0) for i in range(20)], ROWS)
    with count_spark_jobs(spark) as jobs:
        write(table, first, 20, last=True)
    assert jobs.count == 1, jobs.describe()
    # Keys 1..19 change, key 0 does not (0.0 * 2), keys 20..24 are new.
    update = spark.createDataFrame([(i, f"n{i}", float(i) * 2, 0) for i in range(25)], ROWS)
    with count_spark_jobs(spark) as jobs:  # last: no file keeps the unchanged row for a later write
        stats = write(table, update, 25, last=True)
    assert jobs.count == 1, jobs.describe()  # the candidates of a small table are read whole
    assert (stats.rows_upserted, stats.rows_unchanged) == (24, 1)


@pytest.mark.parametrize("adaptive", ["false", "true"])
def test_a_small_write_into_a_large_table_bounds_its_candidates_in_one_more_job(
        spark, sqlite_url, warehouse, monkeypatch, adaptive):
    spark.conf.set("spark.sql.adaptive.enabled", adaptive)
    monkeypatch.setattr(write_candidates, "WHOLE_SCAN_ROWS", 0)  # every table counts as large
    table = VersionedTable(spark, connect(sqlite_url), "large_table", ["id"], SCHEMA, warehouse=warehouse)
    write(table, spark.createDataFrame([(i, f"n{i}", float(i), 0) for i in range(100)], ROWS), 100)
    increment = spark.createDataFrame([(i, f"n{i}", 1.0, 0) for i in range(95, 105)], ROWS)
    with count_spark_jobs(spark) as jobs:
        stats = write(table, increment, 10, last=True)
    # One job collects the written key values that bound the scan, one classifies and writes.
    assert jobs.count == 2, jobs.describe()
    assert (stats.rows_upserted, stats.rows_unchanged) == (10, 0)
    assert table.read_actual().count() == 105


@pytest.mark.parametrize("path", ["small", "shuffled"])
def test_a_key_outside_the_key_range_its_caller_gave_refuses_the_write_and_keeps_no_file(
        spark, sqlite_url, warehouse, monkeypatch, path):
    if path == "shuffled":
        shuffled(monkeypatch)
    table = VersionedTable(spark, connect(sqlite_url), "ranged", ["id"], SCHEMA, warehouse=warehouse)
    write(table, spark.createDataFrame([(5, "e", 5.0, 0)], ROWS), 1)
    hot = table.open_delta()
    # Key 5 lies outside 10..20: its committed version was not looked up.
    rows = [(5, "e", 5.0, 0), (12, "l", 12.0, 0)]
    with pytest.raises(VersionedTableError, match=r"'id' values 5..12 fall outside the key range 10..20"):
        hot.write(spark.createDataFrame(rows, ROWS), rows=2, key_range=(10, 20))
    assert files_under(hot.data_path) == []
    hot.write(spark.createDataFrame(rows, ROWS), rows=2, key_range=(1, 20))
    hot.commit()
    assert (hot.rows_upserted, hot.rows_unchanged) == (1, 1)


def test_new_versions_written_unclassified_leave_the_tables_actual_rows_unknown(spark, sqlite_url, warehouse):
    table = VersionedTable(spark, connect(sqlite_url), "meta_like", ["id"], SCHEMA, warehouse=warehouse)
    write(table, spark.createDataFrame([(1, "a", 1.0, 0), (2, "b", 2.0, 0)], ROWS), 2)
    assert table.last_committed().actual_rows == 2
    # Keys 2 and 3: which of them are new, the write did not ask, so the count is not known.
    hot = table.open_delta()
    hot.write_new_versions(spark.createDataFrame([(2, "b", 2.5), (3, "c", 3.0)], SCHEMA), rows=2)
    hot.commit()
    assert (table.last_committed().rows_upserted, table.last_committed().actual_rows) == (2, None)
    assert table.read_actual().count() == 3
