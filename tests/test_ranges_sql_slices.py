"""A SQL source's range is read by Spark's tasks in slices, never through the driver:
the slices hold exactly the range's rows, the plan maps a range of slice numbers (one
partition per slice) to their rows in Python, and on a cluster or over Spark Connect the
slices are read by the executors' processes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa
from pyspark.errors import PythonException
from pyspark.sql import types as T

from offset_assets.ranges.errors import SourceError
from offset_assets.ranges.planners import DataRange, RangeKind
from offset_assets.ranges.sources import SqlTableSource
from offset_assets.ranges.sources.sql import spark_type_for
from offset_assets.ranges.sources.sql_arrow import arrow_backend
from offset_assets.ranges.sources.sql_read import MIN_ROWS_PER_SLICE, slice_bounds, slice_count, source_engine
from tests.test_cluster import run_driver

DAY = datetime(2022, 1, 1)


@pytest.fixture
def source_db(tmp_path) -> str:
    """customers(id 1..100), one row a minute from midnight: id n at minute n - 1, and a
    row exactly at the next midnight (id 101)."""
    url = f"sqlite:///{tmp_path / 'source.db'}"
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.execute(sa.text("CREATE TABLE customers (id INTEGER PRIMARY KEY AUTOINCREMENT, "
                             "name TEXT, created_at DATETIME)"))
        moments = [DAY + timedelta(minutes=i) for i in range(100)] + [DAY + timedelta(days=1)]
        conn.execute(sa.text("INSERT INTO customers (name, created_at) VALUES (:n, :t)"),
                     [{"n": f"c{i}", "t": t.strftime("%Y-%m-%d %H:%M:%S.000000")}
                      for i, t in enumerate(moments, start=1)])
    engine.dispose()
    return url


def ids(batch) -> list[int]:
    return [row.id for row in batch.df.collect()]


def scan_of(df) -> tuple[str, int]:
    return df._jdf.queryExecution().executedPlan().toString(), df.rdd.getNumPartitions()


def test_slice_bounds_cut_a_range_into_increasing_pieces_with_the_range_own_ends():
    assert slice_bounds("id", 10, 50, 4) == [10, 20, 30, 40, 50]
    assert slice_bounds("id", 0, 7, 3) == [0, 3, 5, 7]
    assert slice_bounds("id", 0, 2, 5) == [0, 1, 2]  # never an empty slice of ids
    assert slice_bounds("id", 3, 3, 4) == [3, 3]  # an empty range: one empty slice
    start, end = datetime(2022, 1, 1), datetime(2022, 1, 2)
    assert slice_bounds("time", start, end, 3) == [start, start + timedelta(hours=8),
                                                   start + timedelta(hours=16), end]
    assert slice_bounds("time", 100.0, 101.0, 2) == [100.0, 100.5, 101.0]
    assert slice_bounds("time", start.date(), (start + timedelta(days=2)).date(), 4) == [
        start.date(), (start + timedelta(days=1)).date(), (start + timedelta(days=2)).date()]


def test_slice_count_follows_rows_per_slice_and_uses_every_core_for_a_large_range():
    assert slice_count(0, 200_000, 8) == 1
    assert slice_count(1_000_000, 200_000, 1) == 5
    assert slice_count(1_000_000, 200_000, 2) == 6  # whole waves: 3 of 2 slices, not 2, 2 and 1
    assert slice_count(3 * MIN_ROWS_PER_SLICE, 200_000, 8) == 3  # each slice keeps its minimum
    assert slice_count(1_000_000, 200_000, 16) == 16


def test_an_id_range_read_in_slices_holds_exactly_the_range_rows(source_db, spark):
    source = SqlTableSource(source_db, "customers", id_column="id", slices=3)
    batch = source.read_range(spark, DataRange(RangeKind.AUTO_INC_ID, "10", "40"))
    assert (batch.end, batch.row_count) == ("40", 30)
    assert ids(batch) == list(range(11, 41))  # (10, 40], in id order
    plan, partitions = scan_of(batch.df)
    assert partitions == 3

    up_to_now = source.read_range(spark, DataRange(RangeKind.AUTO_INC_ID, "95", None))
    assert (up_to_now.end, up_to_now.row_count, ids(up_to_now)) == ("101", 6, list(range(96, 102)))


def test_a_time_window_read_in_slices_includes_its_start_and_excludes_its_end(source_db, spark):
    # 40 minutes in 4 slices of 10: rows at 00:10, 00:20, 00:30 sit on slice bounds.
    source = SqlTableSource(source_db, "customers", time_column="created_at", slices=4)
    batch = source.read_range(spark, DataRange(RangeKind.TIME_WINDOW, "20220101000000", "20220101004000"))
    rows = batch.df.collect()
    assert batch.row_count == 40
    assert sorted(row.id for row in rows) == list(range(1, 41))  # 00:00 in, 00:40 out
    assert min(row.created_at for row in rows).astimezone(UTC) == datetime(2022, 1, 1, tzinfo=UTC)
    assert scan_of(batch.df)[1] == 4

    whole_day = source.read_range(spark, DataRange(RangeKind.TIME_WINDOW, "20220101000000", "20220102000000"))
    assert sorted(ids(whole_day)) == list(range(1, 101))  # the next midnight's row is not the day's


def test_an_empty_range_reads_no_rows(source_db, spark):
    by_id = SqlTableSource(source_db, "customers", id_column="id")
    nothing_new = by_id.read_range(spark, DataRange(RangeKind.AUTO_INC_ID, "101", None))
    assert (nothing_new.end, nothing_new.row_count, nothing_new.df.count()) == ("101", 0, 0)
    by_time = SqlTableSource(source_db, "customers", time_column="created_at", slices=8)
    quiet = by_time.read_range(spark, DataRange(RangeKind.TIME_WINDOW, "20220105000000", "20220106000000"))
    assert (quiet.row_count, quiet.df.count(), quiet.df.columns) == (0, 0, ["id", "name", "created_at"])


def test_no_row_passes_the_driver_the_plan_maps_each_slice_number_to_its_rows(source_db, spark):
    source = SqlTableSource(source_db, "customers", id_column="id", rows_per_slice=25)
    batch = source.read_range(spark, DataRange(RangeKind.AUTO_INC_ID, "0", "100"))
    plan, partitions = scan_of(batch.df)
    assert "MapInArrow" in plan and "Range (0, 4, step=1, splits=4)" in plan
    assert "LocalTableScan" not in plan and "LocalRelation" not in batch.df._jdf.queryExecution().toString()
    assert partitions == 4  # 100 rows, 25 a slice
    assert sorted(ids(batch)) == list(range(1, 101))


def test_a_bad_slicing_option_is_refused_naming_the_table(source_db):
    with pytest.raises(SourceError, match="'customers': rows_per_slice must be at least 1, got 0"):
        SqlTableSource(source_db, "customers", id_column="id", rows_per_slice=0)
    with pytest.raises(SourceError, match="'customers': slices must be at least 1, got -2"):
        SqlTableSource(source_db, "customers", id_column="id", slices=-2)


@pytest.mark.slow
@pytest.mark.xdist_group("jvm_servers")
def test_on_the_standalone_cluster_the_executors_read_the_slices(spark_cluster, tmp_path):
    story = run_driver(["tests.sql_slices_story", "--master", spark_cluster.master_url, str(tmp_path)], {})
    assert (story["row_count"], story["end"]) == (800, "900")
    assert story["ids"] == list(range(101, 901))
    assert story["rows_per_slice"] == {"0": 200, "1": 200, "2": 200, "3": 200}
    assert story["default_slices"] == 4
    # Every slice was read in an executor JVM of a worker, none in the driver.
    assert story["task_jvms"] and all(
        jvm.endswith("org.apache.spark.executor.CoarseGrainedExecutorBackend") for jvm in story["task_jvms"])


@pytest.mark.slow
@pytest.mark.xdist_group("jvm_servers")
def test_over_spark_connect_the_server_reads_the_slices(connect_server, tmp_path):
    story = run_driver(["tests.sql_slices_story", "--remote", connect_server.url, str(tmp_path)], {},
                       connect_server=connect_server)
    assert (story["row_count"], story["end"]) == (800, "900")
    assert story["ids"] == list(range(101, 901))
    assert story["rows_per_slice"] == {"0": 200, "1": 200, "2": 200, "3": 200}
    assert story["default_slices"] == 4
    # The client has no JVM: the slices were read by the Connect server's tasks.
    assert story["task_jvms"] == [f"{connect_server.process.pid} org.apache.spark.deploy.SparkSubmit"]


def test_a_value_the_column_type_cannot_hold_fails_the_read_naming_the_row_column_and_value_or_is_marked(
        tmp_path, spark):
    url = f"sqlite:///{tmp_path / 'loose.db'}"
    engine = sa.create_engine(url)
    with engine.begin() as conn:  # SQLite keeps text that does not look like a number as text
        conn.execute(sa.text("CREATE TABLE stock (id INTEGER PRIMARY KEY, price REAL, qty INTEGER)"))
        conn.execute(sa.text("INSERT INTO stock VALUES (1, 2, 5), (2, 2.5, 'many')"))
    engine.dispose()
    source = SqlTableSource(url, "stock", id_column="id")
    first = source.read_range(spark, DataRange(RangeKind.AUTO_INC_ID, "0", "1"))
    assert [tuple(row) for row in first.df.collect()] == [(1, 2.0, 5)]
    both = source.read_range(spark, DataRange(RangeKind.AUTO_INC_ID, "0", "2"))
    with pytest.raises(PythonException, match="MalformedValueError: SQL source 'stock' at .*loose.db: "
                                              "row {\"id\": 2}: column 'qty' holds 'many', which is not bigint"):
        both.df.collect()
    # A marked read nulls the value and describes the row, for a job that quarantines it.
    marked = both.read_marked()
    assert marked.malformed == 1
    assert [tuple(row)[:3] for row in marked.df.orderBy("id").collect()] == [(1, 2.0, 5), (2, 2.5, None)]
    assert marked.df.where("__malformed IS NOT NULL").select("__malformed.*").collect()[0].asDict() == {
        "source_key": '{"id": 2}', "raw_value": '{"id": 2, "price": 2.5, "qty": "many"}',
        "reason": "SQL source 'stock' row {\"id\": 2}: column 'qty' holds 'many', which is not bigint"}


def test_a_window_over_a_date_column_read_in_slices_holds_each_day_once(tmp_path, spark):
    url = f"sqlite:///{tmp_path / 'days.db'}"
    engine = sa.create_engine(url)
    meta = sa.MetaData()
    visits = sa.Table("visits", meta, sa.Column("id", sa.Integer, primary_key=True), sa.Column("day", sa.Date))
    meta.create_all(engine)
    with engine.begin() as conn:
        conn.execute(visits.insert(), [{"id": i, "day": (DAY + timedelta(days=i - 1)).date()} for i in range(1, 6)])
    engine.dispose()
    # 3 days in 5 slices: the inner bounds fall inside days.
    source = SqlTableSource(url, "visits", time_column="day", slices=5)
    batch = source.read_range(spark, DataRange(RangeKind.TIME_WINDOW, "20220101000000", "20220104000000"))
    assert (batch.row_count, sorted(ids(batch))) == (3, [1, 2, 3])
    # A window from 06:00 holds the days whose midnight is in it.
    later = source.read_range(spark, DataRange(RangeKind.TIME_WINDOW, "20220101060000", "20220103000000"))
    assert (later.row_count, ids(later)) == (1, [2])


def write_stock_file(path, ids) -> None:
    """A SQLite file holding stock(id, qty) with `ids`, written beside `path` and moved into
    place at once (as a file replaced by a nightly export is)."""
    staged = path.with_name(f"staged-{path.name}")
    engine = sa.create_engine(f"sqlite:///{staged}")
    with engine.begin() as conn:
        conn.execute(sa.text("CREATE TABLE stock (id INTEGER PRIMARY KEY, qty INTEGER)"))
        conn.execute(sa.text("INSERT INTO stock VALUES (:id, 1)"), [{"id": i} for i in ids])
    engine.dispose()
    staged.replace(path)


def test_a_sqlite_source_is_read_as_the_file_is_now_never_created_by_a_read(tmp_path, spark):
    path = tmp_path / "stock.db"
    source = SqlTableSource(f"sqlite:///{path}", "stock", id_column="id")
    everything = DataRange(RangeKind.AUTO_INC_ID, "0", None)
    # One process all along (as the sensor daemon is), with its engine for this URL cached.
    with pytest.raises(SourceError, match=f"^SQLite source file {path} does not exist$"):
        source.max_id()
    with pytest.raises(SourceError, match="does not exist"):
        source.read_range(spark, everything)
    assert not path.exists()  # a failed read leaves no empty file behind

    write_stock_file(path, [1, 2])  # put in place later
    assert source.max_id() == 2 and ids(source.read_range(spark, everything)) == [1, 2]
    write_stock_file(path, [1, 2, 3, 4, 5])  # replaced
    assert source.max_id() == 5 and ids(source.read_range(spark, everything)) == [1, 2, 3, 4, 5]
    path.unlink()
    with pytest.raises(SourceError, match="does not exist"):
        source.max_id()
    assert not path.exists()


# Every column type the Arrow drivers read, the first rows null in some (the SQLite driver
# infers a column's type from its values), as SQL literals per backend.
TYPED_COLUMNS = {
    "sqlite": "id INTEGER PRIMARY KEY, qty INTEGER, price REAL, amount NUMERIC(10, 2), ok BOOLEAN, name TEXT, "
              "seen_at DATETIME, day DATE, raw BLOB",
    "postgresql": "id int PRIMARY KEY, qty bigint, price float8, ratio real, amount numeric(10, 2), ok boolean, "
                  "name text, seen_at timestamp, seen_tz timestamptz, day date, raw bytea",
}
TYPED_ROWS = {
    "sqlite": ["(1, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)",
               "(2, NULL, 0.1, NULL, 0, NULL, NULL, NULL, NULL)",
               "(3, -7, 2.5, 0.1, 1, 'é', '2024-01-01 10:00:00.123456', '2024-01-01', x'0102')",
               "(4, 9007199254740993, 1e300, 12345678.5, 0, '', '2024-01-02 10:00:00+02:00', '1970-01-01', x'')"],
    "postgresql": ["(1, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)",
                   "(2, 9007199254740993, 0.1, 1.1, 0.1, false, 'é', '2024-01-01 10:00:00.123456', "
                   "'2024-01-01 10:00:00+02', '2024-01-01', '\\x0102')",
                   "(3, -7, 1e300, 3.4e38, 12345678.5, true, '', '1999-12-31 23:59:59', '2000-01-01 00:00:00Z', "
                   "'1970-01-01', '\\x')"],
}


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def test_an_id_range_read_through_the_arrow_driver_equals_the_sqlalchemy_read_value_for_value(
        backend, request, tmp_path, spark):
    url = f"sqlite:///{tmp_path / 'typed.db'}" if backend == "sqlite" else request.getfixturevalue("postgres_url")
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.exec_driver_sql(f"CREATE TABLE typed ({TYPED_COLUMNS[backend]})")
        conn.exec_driver_sql(f"INSERT INTO typed VALUES {', '.join(TYPED_ROWS[backend])}")
    engine.dispose()
    whole = DataRange(RangeKind.AUTO_INC_ID, "0", str(len(TYPED_ROWS[backend])))

    def read(arrow_driver: bool) -> list[tuple]:
        source = SqlTableSource(url, "typed", id_column="id", fetch_size=2, arrow_driver=arrow_driver)
        return [tuple(row) for row in source.read_range(spark, whole).df.orderBy("id").collect()]

    table = sa.Table("typed", sa.MetaData(), autoload_with=source_engine(url))
    schema = T.StructType([T.StructField(c.name, spark_type_for(c.type)) for c in table.c])
    assert arrow_backend(url, [(c.name, c.type) for c in table.c], schema) == backend
    through_driver = read(arrow_driver=True)
    assert through_driver == read(arrow_driver=False)
    # Read by the driver itself (a small range: `read_held`), both ways: the same rows.
    for arrow_driver in (True, False):
        source = SqlTableSource(url, "typed", id_column="id", fetch_size=2, arrow_driver=arrow_driver)
        held = source.read_held(whole, limit=10, max_bytes=10_000, marked=False)
        assert held.end == whole.end and held.key_range == ("id", 1, len(TYPED_ROWS[backend]))
        as_spark = spark.createDataFrame(held.rows, schema=source.read_range(spark, whole).df.schema)
        assert [tuple(row) for row in as_spark.orderBy("id").collect()] == through_driver
        assert source.read_held(whole, limit=len(TYPED_ROWS[backend]) - 1, max_bytes=10_000, marked=False) is None
    assert [row[1] for row in through_driver] == ([None, None, -7, 9007199254740993] if backend == "sqlite"
                                                  else [None, 9007199254740993, -7])
