"""Rows the driver holds, as a frame whose size Spark knows: `local_frame` builds one from
tuples, `local_rows` reads how many rows a plan of such frames holds, and a direct write
of one into a versioned table runs in one pass: the same versions and counts as a frame
Spark must count first, in one Spark job fewer."""

from __future__ import annotations

import datetime
import decimal

import pytest
from pyspark.sql import functions as F

from offset_assets.control_plane import connect
from offset_assets.local_frames import collect_instants, local_frame, local_rows, timestamp_columns
from offset_assets.spark_jobs import count_spark_jobs
from offset_assets.versioned import VersionedTable
from offset_assets.versioned.errors import ConflictingStatesError
from tests.conftest import process_time_zone
from tests.test_versioned_one_pass_writes import HISTORY, ROWS, SCHEMA, every_version, files_under

TYPED = "id long not null, at timestamp, day date, amount decimal(10,2), name string"
TYPED_ROWS = [(1, datetime.datetime(2026, 11, 27, 12, 30), datetime.date(2026, 11, 28), decimal.Decimal("1.50"), "a"),
              (2, None, None, None, None)]


def test_a_local_frame_holds_the_rows_and_types_createdataframe_would(spark):
    frame = local_frame(spark, TYPED_ROWS, TYPED)
    listed = spark.createDataFrame(TYPED_ROWS, TYPED)
    assert frame.schema == listed.schema
    assert sorted(frame.collect()) == sorted(listed.collect())


def test_a_local_frame_refuses_none_in_a_column_declared_not_nullable_and_rows_of_another_width(spark):
    with pytest.raises(ValueError, match="column 'id' is not nullable"):
        local_frame(spark, [(None, None, None, None, "a")], TYPED)
    with pytest.raises(ValueError, match=r"row \(3, 'c'\) has 2 values, the schema 5 columns"):
        local_frame(spark, [*TYPED_ROWS, (3, "c")], TYPED)


@pytest.fixture
def process_in_new_york(spark):
    """The Python process's local time New York's, the session's time zone UTC: naive
    datetimes mean the process's local time to `createDataFrame`, not the session's."""
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    with process_time_zone("America/New_York"):
        yield


def epoch_micros(frame, column: str) -> list:
    return [r[0] for r in frame.orderBy("id").selectExpr(f"unix_micros({column})").collect()]


def test_naive_timestamps_are_the_process_local_times_createdataframe_takes_them_for(spark, process_in_new_york):
    # 01:30:05 on 1 November 2026 happens twice in New York: `fold` says which.
    utc = datetime.UTC
    at = [datetime.datetime(2026, 11, 1, 1, 30, 5), datetime.datetime(2026, 11, 1, 1, 30, 5, fold=1),
          datetime.datetime(2026, 6, 1, 12, 0, tzinfo=utc), None]
    rows = [(i, value) for i, value in enumerate(at)]
    frame = local_frame(spark, rows, "id long, at timestamp")
    listed = spark.createDataFrame(rows[2:], "id long, at timestamp")

    assert epoch_micros(frame, "at") == [
        int(datetime.datetime(2026, 11, 1, 5, 30, 5, tzinfo=utc).timestamp()) * 10**6,  # EDT
        int(datetime.datetime(2026, 11, 1, 6, 30, 5, tzinfo=utc).timestamp()) * 10**6,  # EST
        *epoch_micros(listed, "at")]
    assert [r.at for r in frame.orderBy("id").collect()][:2] == at[:2]  # read back as the process's local times


def test_timestamps_without_time_zone_keep_their_wall_clock_time(spark, process_in_new_york):
    wall = datetime.datetime(2026, 11, 27, 12, 30)
    rows = [(1, wall), (2, wall.replace(tzinfo=datetime.timezone(datetime.timedelta(hours=5))))]
    frame = local_frame(spark, rows, "id long, at timestamp_ntz")
    assert [r.at for r in frame.orderBy("id").collect()] == [wall, wall]


def test_a_value_that_is_not_a_datetime_in_a_timestamp_column_is_refused_by_name(spark):
    with pytest.raises(TypeError, match=r"column 'at' is timestamp: datetime.date\(2026, 11, 27\) \(date\)"):
        local_frame(spark, [(1, datetime.date(2026, 11, 27))], "id long, at timestamp")


def test_timestamps_inside_arrays_or_structs_keep_createdataframe_s_meaning(spark, process_in_new_york):
    schema = "id long, seen array<timestamp>, last struct<at: timestamp>"
    at = datetime.datetime(2026, 11, 27, 12, 30)
    rows = [(1, [at], (at,))]
    frame = local_frame(spark, rows, schema)
    assert frame.collect() == spark.createDataFrame(rows, schema).collect()
    assert frame.selectExpr("unix_micros(seen[0])").first()[0] == int(at.timestamp()) * 10**6


def test_collected_instants_are_utc_datetimes_two_values_where_the_local_clock_shows_one(spark, process_in_new_york):
    frame = spark.sql("SELECT 1L AS id, TIMESTAMP'2026-11-01 05:30:05Z' AS at, TIMESTAMP_NTZ'2026-11-01 01:30:05' AS n "
                      "UNION ALL SELECT 2L, TIMESTAMP'2026-11-01 06:30:05Z', NULL "
                      "UNION ALL SELECT 3L, NULL, NULL").orderBy("id")
    naive = [row.at for row in frame.collect()]
    rows = collect_instants(frame, ["id", "at", "n"], timestamp_columns({
        f.name: f.dataType for f in frame.schema.fields}))

    assert naive[0] == naive[1]  # pyspark's local times: 01:30:05 twice
    utc = [datetime.datetime(2026, 11, 1, hour, 30, 5, tzinfo=datetime.UTC) for hour in (5, 6)]
    assert rows == [(1, utc[0], datetime.datetime(2026, 11, 1, 1, 30, 5)), (2, utc[1], None), (3, None, None)]
    assert epoch_micros(local_frame(spark, rows, "id long, at timestamp, n timestamp_ntz"), "at") == epoch_micros(
        frame, "at")


def test_local_rows_counts_local_relations_through_projections_filters_and_unions(spark):
    frame = local_frame(spark, TYPED_ROWS, TYPED)
    assert local_rows(frame) == 2
    assert local_rows(frame.withColumn("sys_op", F.lit(0)).select("id", "sys_op")) == 2
    assert local_rows(frame.where("id > 1")) == 2  # a bound: no more rows than its input
    assert local_rows(frame.unionByName(frame.where("id = 1"))) == 4


def test_local_rows_is_unknown_for_any_other_plan(spark):
    frame = local_frame(spark, TYPED_ROWS, TYPED)
    assert local_rows(spark.createDataFrame(TYPED_ROWS, TYPED)) is None  # an RDD of Python rows
    assert local_rows(frame.join(frame, "id")) is None
    assert local_rows(frame.select(F.explode(F.array("id", "id")))) is None  # a generator adds rows
    assert local_rows(spark.range(10)) is None


def tables(spark, sqlite_url, warehouse):
    plane = connect(sqlite_url)
    return (VersionedTable(spark, plane, "from_a_list", ["id"], SCHEMA, warehouse=warehouse),
            VersionedTable(spark, plane, "from_local_rows", ["id"], SCHEMA, warehouse=warehouse))


def test_a_direct_write_of_local_rows_stores_what_a_counted_one_does_in_one_spark_job_fewer(
        spark, sqlite_url, warehouse):
    from_a_list, from_local_rows = tables(spark, sqlite_url, warehouse)
    jobs = {"list": [], "local": []}
    for rows in HISTORY:
        with count_spark_jobs(spark) as listed:
            counted = from_a_list.open_delta()
            counted_stats = counted.write(spark.createDataFrame(rows, ROWS), last=True)
            counted.commit()
        with count_spark_jobs(spark) as local:
            one_pass = from_local_rows.open_delta()
            one_pass_stats = one_pass.write(local_frame(spark, rows, ROWS), last=True)
            one_pass.commit()
        assert one_pass_stats == counted_stats
        jobs["list"].append(listed.count)
        jobs["local"].append(local.count)
    assert every_version(from_local_rows) == every_version(from_a_list)
    # A list is counted by a job of its own, then written; local rows are counted as written.
    assert jobs == {"list": [2, 2, 2], "local": [1, 1, 1]}


def test_a_delete_of_local_keys_removes_them_in_one_spark_job(spark, sqlite_url, warehouse):
    _, table = tables(spark, sqlite_url, warehouse)
    table.write_delta(local_frame(spark, HISTORY[0], ROWS))
    hot = table.open_delta()
    with count_spark_jobs(spark) as jobs:
        stats = hot.delete(local_frame(spark, [(1,), (2,)], "id long"))
    hot.commit()
    assert jobs.count == 1, jobs.describe()
    assert (stats.rows_deleted, stats.rows_unchanged) == (2, 0)
    assert sorted(r.id for r in table.read_actual().collect()) == [3, 4]


def test_a_refused_direct_write_of_local_rows_keeps_nothing(spark, sqlite_url, warehouse):
    _, table = tables(spark, sqlite_url, warehouse)
    table.write_delta(local_frame(spark, HISTORY[0], ROWS))
    hot = table.open_delta()
    before = files_under(hot.data_path)
    with pytest.raises(ConflictingStatesError, match=r"different states of key\(s\) \[\{'id': 7\}\]"):
        hot.write(local_frame(spark, [(7, "g", 1.0, 0), (7, "g", 2.0, 0)], ROWS))
    assert files_under(hot.data_path) == before
    hot.rollback()
    assert table.last_committed().delta_num == 1
