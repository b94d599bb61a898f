from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
import sqlalchemy as sa
from pyspark.sql import types as T

from offset_assets.ranges.errors import SourceError
from offset_assets.ranges.planners import DataRange, RangeKind
from offset_assets.ranges.sources import FolderSource, SqlTableSource


def make_orders_table(url: str, rows: list[tuple]) -> None:
    engine = sa.create_engine(url.replace("postgresql://", "postgresql+psycopg2://"))
    meta = sa.MetaData()
    orders = sa.Table(
        "orders", meta,
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("customer", sa.String(50)),
        sa.Column("amount", sa.Numeric(10, 2)),
        sa.Column("created_at", sa.DateTime),
    )
    meta.create_all(engine)
    with engine.begin() as conn:
        conn.execute(orders.insert(), [
            {"customer": c, "amount": a, "created_at": t} for c, a, t in rows
        ])
    engine.dispose()


def time_range(start: str, end: str) -> DataRange:
    return DataRange(RangeKind.TIME_WINDOW, start, end)


ROWS = [
    ("ann", Decimal("10.50"), datetime(2022, 1, 1, 8)),
    ("bob", Decimal("3.00"), datetime(2022, 1, 1, 23, 59, 59)),
    ("cid", Decimal("7.25"), datetime(2022, 1, 2, 0, 0)),
]


def test_sql_table_by_time_column_reads_the_half_open_window(db_url, spark):
    make_orders_table(db_url, ROWS)
    source = SqlTableSource(db_url, "orders", time_column="created_at")
    batch = source.read_range(spark, time_range("20220101000000", "20220102000000"))
    assert batch.row_count == 2 and batch.end == "20220102000000"
    got = sorted(batch.df.collect())
    assert [(r.id, r.customer, r.amount) for r in got] == [(1, "ann", Decimal("10.50")),
                                                          (2, "bob", Decimal("3.00"))]
    assert got[0].created_at.astimezone(UTC) == datetime(2022, 1, 1, 8, tzinfo=UTC)
    assert dict(batch.df.dtypes) == {"id": "bigint", "customer": "string",
                                     "amount": "decimal(10,2)", "created_at": "timestamp"}


def test_sql_table_by_id_reads_up_to_the_max_id_at_run_time(db_url, spark):
    make_orders_table(db_url, ROWS)
    source = SqlTableSource(db_url, "orders", id_column="id", columns=["id", "customer"])
    assert source.max_id() == 3
    batch = source.read_range(spark, DataRange(RangeKind.AUTO_INC_ID, "1", None))
    assert batch.end == "3"
    assert [tuple(r) for r in batch.df.collect()] == [(2, "bob"), (3, "cid")]
    fixed = source.read_range(spark, DataRange(RangeKind.AUTO_INC_ID, "0", "2"))
    assert (fixed.end, fixed.row_count) == ("2", 2)
    nothing_new = source.read_range(spark, DataRange(RangeKind.AUTO_INC_ID, "3", None))
    assert (nothing_new.end, nothing_new.row_count) == ("3", 0)


def test_sql_source_errors_name_the_table_and_column(sqlite_url, spark):
    make_orders_table(sqlite_url, ROWS)
    with pytest.raises(SourceError, match="exactly one of"):
        SqlTableSource(sqlite_url, "orders")
    with pytest.raises(SourceError, match="'missing'.*no such table"):
        SqlTableSource(sqlite_url, "missing", id_column="id").max_id()
    with pytest.raises(SourceError, match="no column 'seq'"):
        SqlTableSource(sqlite_url, "orders", id_column="seq").max_id()
    with pytest.raises(SourceError, match="time column 'customer'"):
        SqlTableSource(sqlite_url, "orders", time_column="customer").read_range(
            spark, time_range("20220101000000", "20220102000000"))


def test_sql_time_column_may_hold_epoch_seconds(sqlite_url, spark):
    engine = sa.create_engine(sqlite_url)
    with engine.begin() as conn:
        conn.execute(sa.text("CREATE TABLE events (k TEXT, ts DOUBLE)"))
        start = datetime(2022, 1, 1, tzinfo=UTC).timestamp()
        conn.execute(sa.text("INSERT INTO events VALUES ('a', :a), ('b', :b)"),
                     {"a": start + 5, "b": start + 86400})
    engine.dispose()
    batch = SqlTableSource(sqlite_url, "events", time_column="ts").read_range(
        spark, time_range("20220101000000", "20220102000000"))
    assert [r.k for r in batch.df.collect()] == ["a"]


def land(spark, root, day: str, rows):
    df = spark.createDataFrame(rows, "id long, name string, ts timestamp")
    df.coalesce(1).write.mode("overwrite").parquet(f"{root}/dt={day}")


def test_folder_source_reads_the_day_folders_of_the_range(spark, tmp_path):
    root = str(tmp_path / "landing")
    t = datetime(2022, 1, 1, 12, tzinfo=UTC)
    land(spark, root, "2022-01-01", [(1, "a", t)])
    land(spark, root, "2022-01-02", [(2, "b", t + timedelta(days=1))])
    land(spark, root, "2022-01-03", [(3, "c", t + timedelta(days=2))])
    source = FolderSource(root)
    assert source.partition_paths(time_range("20220101000000", "20220103000000")) == [
        f"{root}/dt=2022-01-01", f"{root}/dt=2022-01-02"]
    batch = source.read_range(spark, time_range("20220101000000", "20220103000000"))
    got = sorted((r.id, r.dt) for r in batch.df.collect())
    assert got == [(1, "2022-01-01"), (2, "2022-01-02")]
    # A day that has not landed yet contributes nothing.
    later = source.read_range(spark, time_range("20220104000000", "20220105000000"))
    assert later.row_count == 0 and later.df.count() == 0


def test_folder_source_filters_rows_by_time_for_ranges_finer_than_a_folder(spark, tmp_path):
    root = str(tmp_path / "landing")
    day = datetime(2022, 1, 1, tzinfo=UTC)
    land(spark, root, "2022-01-01", [(1, "night", day + timedelta(hours=2)),
                                     (2, "noon", day + timedelta(hours=12))])
    schema = T.StructType([T.StructField("id", T.LongType()), T.StructField("name", T.StringType()),
                           T.StructField("ts", T.TimestampType())])
    source = FolderSource(root, time_column="ts", schema=schema)
    batch = source.read_range(spark, time_range("20220101060000", "20220101180000"))
    assert [r.name for r in batch.df.collect()] == ["noon"]


@pytest.mark.parametrize("column_type", ["timestamp", "timestamptz"])
def test_a_postgresql_time_window_is_utc_whatever_the_servers_time_zone(postgres_url, spark, column_type):
    """A server whose TimeZone is New York: a naive `timestamp` is read as UTC, a
    `timestamptz` as the instant it holds, and the window [Jan 1, Jan 2) UTC holds the
    rows of that UTC day in both, not those of New York's day."""
    engine = sa.create_engine(postgres_url.replace("postgresql://", "postgresql+psycopg2://"))
    database = sa.engine.make_url(postgres_url).database
    with engine.begin() as conn:
        conn.execute(sa.text(f'ALTER DATABASE "{database}" SET timezone TO \'America/New_York\''))
    engine.dispose()  # the setting holds for new sessions
    engine = sa.create_engine(postgres_url.replace("postgresql://", "postgresql+psycopg2://"))
    with engine.begin() as conn:
        conn.execute(sa.text(f"CREATE TABLE events (id serial PRIMARY KEY, at {column_type})"))
        # 23:30 UTC on Jan 1 (18:30 in New York), 02:00 UTC on Jan 2 (still Jan 1 in New York).
        written = ["2022-01-01 23:30:00", "2022-01-02 02:00:00"]
        values = written if column_type == "timestamp" else [f"{text}+00" for text in written]
        conn.execute(sa.text("INSERT INTO events (at) VALUES (CAST(:a AS " + column_type + ")), (CAST(:b AS "
                             + column_type + "))"), {"a": values[0], "b": values[1]})
    engine.dispose()
    batch = SqlTableSource(postgres_url, "events", time_column="at").read_range(
        spark, time_range("20220101000000", "20220102000000"))
    assert [(r.id, r.at.astimezone(UTC)) for r in batch.df.collect()] == [
        (1, datetime(2022, 1, 1, 23, 30, tzinfo=UTC))]
