"""What a SQL source sends, ingested from real SQLite and PostgreSQL tables: a change log
holding several rows of one key in a range (its `order_by` column decides the key's
state; without it the range is refused, saying so, and retried once it is declared), and
values their column's type cannot hold (never a silent null: the range fails naming the
row, or the row goes to the job's quarantine table in the range's commit)."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime
from decimal import Decimal

import pytest
import sqlalchemy as sa
from pyspark.sql import functions as F
from pyspark.sql import types as T

from offset_assets.control_plane import connect
from offset_assets.control_plane.job_log import JobLog
from offset_assets.ranges.errors import IngestionError, MalformedValueError
from offset_assets.ranges.ingestion import QUARANTINE_KEY, QUARANTINE_SCHEMA, IngestionJob, RangeIngestion, TargetTable
from offset_assets.ranges.planners import AutoIncrementIdPlanner
from offset_assets.ranges.sources import SqlTableSource
from offset_assets.spark_jobs import count_spark_jobs
from offset_assets.versioned.table import VersionedTable

PRICES = T.StructType([T.StructField("product_id", T.LongType(), False),
                       T.StructField("price", T.DoubleType(), True)])


@pytest.fixture
def change_log(tmp_path) -> str:
    """`price_changes`: an append-only change log, `sys_op` 1 for a product withdrawn."""
    url = f"sqlite:///{tmp_path / 'changes.db'}"
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.execute(sa.text("CREATE TABLE price_changes (change_id INTEGER PRIMARY KEY AUTOINCREMENT, "
                             "product_id INTEGER, price REAL, sys_op INTEGER)"))
    engine.dispose()
    return url


def change(url: str, *rows: tuple[int, float | None, int]) -> None:
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.execute(sa.text("INSERT INTO price_changes (product_id, price, sys_op) VALUES (:p, :v, :o)"),
                     [{"p": p, "v": v, "o": o} for p, v, o in rows])
    engine.dispose()


def prices_job(url: str, order_by: str | None = "change_id", transform=None, **job) -> IngestionJob:
    return IngestionJob("prices", SqlTableSource(url, "price_changes", id_column="change_id", order_by=order_by),
                        AutoIncrementIdPlanner(), TargetTable("prices", ["product_id"], PRICES),
                        transform=transform, **job)


def prices(spark, plane, warehouse) -> list[tuple]:
    table = VersionedTable(spark, plane, "prices", ["product_id"], PRICES, warehouse=warehouse)
    return sorted(tuple(r) for r in table.read_actual().select("product_id", "price").collect())


def test_a_change_log_range_leaves_each_key_in_its_last_state_by_order_by_in_the_one_spark_job_of_a_range(
        change_log, spark, sqlite_url, warehouse):
    change(change_log, (1, 10.0, 0), (2, 20.0, 0), (1, 11.0, 0), (3, 30.0, 0), (1, 12.0, 0), (3, None, 1))
    plane = connect(sqlite_url)
    # Written by Spark: the driver would read and write a range this small itself.
    ingestion = RangeIngestion(spark, plane, prices_job(change_log), warehouse, held_rows_limit=0)
    with count_spark_jobs(spark) as jobs:
        (first,) = ingestion.run_pending()
    assert jobs.count == 1, jobs.describe()  # read, reduced, classified and written in one pass
    assert prices(spark, plane, warehouse) == [(1, 12.0), (2, 20.0)]
    assert (first.rows_read, first.keys_written, first.superseded_in_range) == (6, 3, 3)
    assert (first.rows_upserted, first.rows_deleted, first.rows_unchanged) == (2, 0, 1)  # 3 was never there

    change(change_log, (2, None, 1), (2, 21.0, 0), (1, 12.0, 0))
    (second,) = ingestion.run_pending()
    assert prices(spark, plane, warehouse) == [(1, 12.0), (2, 21.0)]
    assert (second.rows_upserted, second.rows_unchanged, second.superseded_in_range) == (1, 1, 1)


def test_without_order_by_a_keys_two_rows_refuse_the_range_naming_the_option_and_the_retry_with_it_succeeds(
        change_log, spark, sqlite_url, warehouse):
    change(change_log, (1, 10.0, 0), (1, 11.0, 0), (2, 20.0, 0))
    plane = connect(sqlite_url)
    with pytest.raises(IngestionError) as refused:
        RangeIngestion(spark, plane, prices_job(change_log, order_by=None), warehouse).run_pending()
    assert str(refused.value) == (
        "job 'prices' range '0'..'3' failed (job_id 1, attempt 1): SeveralStatesError: table 'prices': different "
        "states of key(s) [{'product_id': 1}] in one write to delta 1 (1 key(s) in all); nothing written; "
        "SqlTableSource gives the rows of a key no order: declare SqlTableSource(order_by=<column>) (an "
        "append-only change log: the last row of a key wins), and the range is retried with it")
    (failed,) = JobLog(plane).history("prices")
    assert failed.status == "FAILURE" and prices(spark, plane, warehouse) == []

    # The order column goes through a transform as one of its columns, and is not stored.
    def renamed(rows):
        return rows.select("product_id", F.col("price").alias("price"), "sys_op", "change_id")

    (retried,) = RangeIngestion(spark, plane, prices_job(change_log, transform=renamed), warehouse).run_pending()
    assert (retried.job_id, retried.attempt, retried.superseded_in_range) == (failed.job_id, 2, 1)
    assert prices(spark, plane, warehouse) == [(1, 11.0), (2, 20.0)]


def test_an_order_by_column_that_cannot_order_rows_is_refused_naming_it(change_log, spark, sqlite_url, warehouse):
    change(change_log, (1, 10.0, 0))
    engine = sa.create_engine(change_log)
    with engine.begin() as conn:
        conn.execute(sa.text("ALTER TABLE price_changes ADD COLUMN note TEXT"))
    engine.dispose()
    with pytest.raises(IngestionError, match=r"SourceError: SQL source 'price_changes' at .*: order_by column 'note' "
                                             r"is TEXT; a number, a date or a timestamp orders rows"):
        RangeIngestion(spark, connect(sqlite_url), prices_job(change_log, order_by="note"), warehouse).run_pending()


def test_a_target_column_the_source_names_otherwise_is_refused_naming_both_names(
        change_log, spark, sqlite_url, warehouse):
    change(change_log, (1, 10.0, 0))
    renamed = T.StructType([PRICES["product_id"], T.StructField("price_eur", T.DoubleType(), True)])
    job = IngestionJob("prices", SqlTableSource(change_log, "price_changes", id_column="change_id"),
                       AutoIncrementIdPlanner(), TargetTable("prices", ["product_id"], renamed))
    with pytest.raises(IngestionError) as refused:
        RangeIngestion(spark, connect(sqlite_url), job, warehouse).run_pending()
    assert str(refused.value).endswith(
        "IngestionError: job 'prices': the source's rows lack the target's column(s) ['price_eur']; the columns "
        "they have beside the target's are ['change_id', 'price']: declare the target's columns as the source "
        "names them, or give the job a transform that renames them")


@pytest.fixture
def loose(tmp_path) -> str:
    """A SQLite table holding values its declared types cannot hold (SQLite keeps them)."""
    url = f"sqlite:///{tmp_path / 'loose.db'}"
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.execute(sa.text("CREATE TABLE stock (id INTEGER PRIMARY KEY, qty INTEGER, price REAL, "
                             "counted_at DATETIME)"))
        conn.execute(sa.text("INSERT INTO stock VALUES (1, 5, 2.5, '2024-01-01 10:00:00'), "
                             "(2, 'many', 1.0, NULL), (3, NULL, NULL, NULL), (4, 7, 'cheap', NULL), "
                             "(5, 2.5, 1.0, NULL), (6, 1, 1.0, 'yesterday')"))
    engine.dispose()
    return url


STOCK = T.StructType([T.StructField("id", T.LongType(), False), T.StructField("qty", T.LongType(), True),
                      T.StructField("price", T.DoubleType(), True), T.StructField("counted_at", T.TimestampType())])


def stock_job(url: str, **job) -> IngestionJob:
    return IngestionJob("stock", SqlTableSource(url, "stock", id_column="id"), AutoIncrementIdPlanner(),
                        TargetTable("stock", ["id"], STOCK), **job)


def test_a_value_its_column_cannot_hold_fails_the_range_naming_the_row_column_and_value(
        loose, spark, sqlite_url, warehouse):
    plane = connect(sqlite_url)
    with pytest.raises(IngestionError) as refused:
        RangeIngestion(spark, plane, stock_job(loose), warehouse).run_pending()
    # Read on the executors, the range fails with the source's own error all the same.
    assert isinstance(refused.value.__cause__, MalformedValueError)
    assert str(refused.value).endswith(
        "MalformedValueError: SQL source 'stock' at " + loose + ": row {\"id\": 2}: column 'qty' holds 'many', "
        "which is not bigint")
    (failed,) = JobLog(plane).history("stock")
    assert failed.status == "FAILURE" and VersionedTable(spark, plane, "stock", ["id"], STOCK,
                                                         warehouse=warehouse).last_committed() is None


def test_rows_whose_values_do_not_fit_go_to_the_quarantine_table_with_the_range_and_the_rest_is_ingested(
        loose, spark, sqlite_url, warehouse):
    plane = connect(sqlite_url)
    (result,) = RangeIngestion(spark, plane, stock_job(loose, on_malformed="quarantine"), warehouse).run_pending()
    table = VersionedTable(spark, plane, "stock", ["id"], STOCK, warehouse=warehouse)
    assert sorted(tuple(r) for r in table.read_actual().select("id", "qty", "price").collect()) == [
        (1, 5, 2.5), (3, None, None)]
    assert (result.rows_read, result.keys_written, result.rows_quarantined) == (6, 2, 4)
    quarantine = VersionedTable(spark, plane, "stock__quarantine", QUARANTINE_KEY, QUARANTINE_SCHEMA,
                                warehouse=warehouse)
    rows = sorted(tuple(r) for r in quarantine.read_actual().select(*QUARANTINE_SCHEMA.fieldNames()).collect())
    assert [(job, key, reason, job_id) for job, key, _, reason, job_id in rows] == [
        ("stock", '{"id": 2}', "SQL source 'stock' row {\"id\": 2}: column 'qty' holds 'many', which is not bigint",
         result.job_id),
        ("stock", '{"id": 4}', "SQL source 'stock' row {\"id\": 4}: column 'price' holds 'cheap', which is not "
                               "double", result.job_id),
        ("stock", '{"id": 5}', "SQL source 'stock' row {\"id\": 5}: column 'qty' holds 2.5, which is not bigint",
         result.job_id),
        ("stock", '{"id": 6}', "SQL source 'stock' row {\"id\": 6}: column 'counted_at' holds 'yesterday', which "
                               "is not timestamp", result.job_id),
    ]
    # The raw value is the row as the source held it.
    assert json.loads(rows[0][2]) == {"id": 2, "qty": "many", "price": 1.0, "counted_at": None}
    assert quarantine.last_committed().commit_ts == table.last_committed().commit_ts == result.commit_ts


@pytest.fixture
def fractions(tmp_path) -> str:
    """A stock table whose first 8 of 12 quantities were written as decimals into its
    INTEGER column (SQLite keeps them), the only values of their batch that do not fit."""
    url = f"sqlite:///{tmp_path / 'stock.db'}"
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.execute(sa.text("CREATE TABLE stock (id INTEGER PRIMARY KEY, qty INTEGER, price REAL, "
                             "counted_at DATETIME)"))
        conn.execute(sa.text("INSERT INTO stock (id, qty, price) VALUES (:id, :qty, 1.0)"),
                     [{"id": i, "qty": i + 0.25 if i <= 8 else i} for i in range(1, 13)])
    engine.dispose()
    return url


def test_a_fraction_in_an_integer_column_is_never_truncated_into_a_bigint_but_fails_the_range_naming_it(
        fractions, spark, sqlite_url, warehouse):
    plane = connect(sqlite_url)
    with pytest.raises(IngestionError) as refused:
        RangeIngestion(spark, plane, stock_job(fractions), warehouse).run_pending()
    assert isinstance(refused.value.__cause__, MalformedValueError)
    assert str(refused.value).endswith(
        f"MalformedValueError: SQL source 'stock' at {fractions}: row {{\"id\": 1}}: column 'qty' holds 1.25, "
        "which is not bigint")
    assert VersionedTable(spark, plane, "stock", ["id"], STOCK, warehouse=warehouse).last_committed() is None


def test_a_sql_range_mostly_of_values_their_type_cannot_hold_fails_naming_the_first_unless_the_share_allows_it(
        fractions, spark, sqlite_url, warehouse):
    """8 of 12 quantities do not fit the declared bigint. A job that quarantines fails the
    range on that share rather than set two thirds of it aside; one that declares a
    higher share sets them aside."""
    plane = connect(sqlite_url)

    with pytest.raises(IngestionError) as refused:
        RangeIngestion(spark, plane, stock_job(fractions, on_malformed="quarantine"), warehouse).run_pending()
    assert str(refused.value).endswith(
        "MalformedValueError: 8 of 12 record(s) of the range do not fit their declared types (67%, more than "
        "max_malformed_share 0.5), so the declaration is more likely wrong than the records; the first: SQL "
        "source 'stock' row {\"id\": 1}: column 'qty' holds 1.25, which is not bigint. Nothing is set aside or "
        "committed, and the range is retried as it is: fix the declared type (or the source), or raise "
        "max_malformed_share to quarantine them")
    assert [row.status for row in JobLog(plane).history("stock")] == ["FAILURE"]

    (retried,) = RangeIngestion(spark, plane, stock_job(fractions, on_malformed="quarantine", max_malformed_share=0.9),
                                warehouse).run_pending()
    assert (retried.attempt, retried.rows_read, retried.rows_upserted, retried.rows_quarantined) == (2, 12, 4, 8)


def test_postgresql_values_a_spark_type_cannot_hold_are_quarantined_and_a_text_column_for_a_bigint_is_refused(
        postgres_url, spark, sqlite_url, warehouse):
    engine = sa.create_engine(postgres_url)
    with engine.begin() as conn:
        conn.execute(sa.text("CREATE TABLE readings (id serial PRIMARY KEY, level numeric, code text)"))
        conn.execute(sa.text("INSERT INTO readings (level, code) VALUES (1.5, '7'), ('NaN', '8'), (2, 'x9')"))
    engine.dispose()
    plane = connect(sqlite_url)
    levels = T.StructType([T.StructField("id", T.LongType(), False), T.StructField("level", T.DecimalType(38, 10))])
    job = IngestionJob("levels", SqlTableSource(postgres_url, "readings", id_column="id", columns=["id", "level"]),
                       AutoIncrementIdPlanner(), TargetTable("levels", ["id"], levels), on_malformed="quarantine")
    (result,) = RangeIngestion(spark, plane, job, warehouse).run_pending()
    table = VersionedTable(spark, plane, "levels", ["id"], levels, warehouse=warehouse)
    assert sorted(tuple(r) for r in table.read_actual().select("id", "level").collect()) == [
        (1, Decimal("1.5")), (3, Decimal("2"))]
    quarantine = VersionedTable(spark, plane, "levels__quarantine", QUARANTINE_KEY, QUARANTINE_SCHEMA,
                                warehouse=warehouse)
    assert [(r.source_key, r.reason) for r in quarantine.read_actual().collect()] == [
        ('{"id": 2}', "SQL source 'readings' row {\"id\": 2}: column 'level' holds Decimal('NaN'), which is not "
                      "decimal(38,10)")]
    assert result.rows_quarantined == 1

    # Text the target declares as bigint is no value-by-value question: every range is refused.
    codes = T.StructType([T.StructField("id", T.LongType(), False), T.StructField("code", T.LongType())])
    job = IngestionJob("codes", SqlTableSource(postgres_url, "readings", id_column="id", columns=["id", "code"]),
                       AutoIncrementIdPlanner(), TargetTable("codes", ["id"], codes), on_malformed="quarantine")
    with pytest.raises(IngestionError, match=r"SchemaMismatchError: table 'codes': incompatible column type\(s\) "
                                             r"\['code: string \(table: bigint\)'\]"):
        RangeIngestion(spark, plane, job, warehouse).run_pending()


# One value its column's type cannot hold, alone in its batch among values that fit (a
# value that does not fit elsewhere in the batch sends the whole batch value by value):
# (the column's SQL type, two values that fit, the one that does not, as SQL literals;
# the Spark type read; the values that fit as read; the bad value as the reason shows it).
LONE_SQLITE_VALUES = [
    pytest.param("INTEGER", T.LongType(), ("5", "7"), "2.5", (5, 7), "2.5", id="real-in-integer"),
    pytest.param("INTEGER", T.LongType(), ("5", "7"), "1e30", (5, 7), "1e+30", id="real-beyond-bigint-in-integer"),
    pytest.param("INTEGER", T.LongType(), ("5", "7"), "'1_000'", (5, 7), "'1_000'", id="text-in-integer"),
    pytest.param("REAL", T.DoubleType(), ("0.5", "7"), "'nan'", (0.5, 7.0), "'nan'", id="text-in-real"),
    pytest.param("NUMERIC(10, 2)", T.DecimalType(10, 2), ("2.5", "0.1"), "2.555",
                 (Decimal("2.50"), Decimal("0.10")), "2.555", id="real-beyond-scale-in-numeric"),
    pytest.param("NUMERIC(10, 2)", T.DecimalType(10, 2), ("2.5", "0.1"), "123456789.5",
                 (Decimal("2.50"), Decimal("0.10")), "123456789.5", id="real-beyond-precision-in-numeric"),
    pytest.param("NUMERIC(10, 2)", T.DecimalType(10, 2), ("2.5", "0.1"), "'many'",
                 (Decimal("2.50"), Decimal("0.10")), "'many'", id="text-in-numeric"),
    pytest.param("BOOLEAN", T.BooleanType(), ("0", "1"), "2", (False, True), "2", id="two-in-boolean"),
    pytest.param("BOOLEAN", T.BooleanType(), ("0", "1"), "'false'", (False, True), "'false'", id="text-in-boolean"),
    pytest.param("DATETIME", T.TimestampType(), ("'2024-01-01 10:00:00'", "'2024-01-02 10:00:00+02:00'"),
                 "'yesterday'", (datetime(2024, 1, 1, 10, tzinfo=UTC), datetime(2024, 1, 2, 8, tzinfo=UTC)),
                 "'yesterday'", id="text-in-datetime"),
    pytest.param("DATE", T.DateType(), ("'2024-01-01'", "'2024-01-03'"), "'2024-01-02 10:00:00'",
                 (date(2024, 1, 1), date(2024, 1, 3)), "'2024-01-02 10:00:00'", id="time-of-day-in-date"),
]
# PostgreSQL holds what its types hold: what does not fit is what Spark's types cannot hold.
LONE_POSTGRESQL_VALUES = [
    pytest.param("numeric", T.DecimalType(38, 10), ("1.5", "2"), "1.23456789012",
                 (Decimal("1.5"), Decimal("2")), "Decimal('1.23456789012')", id="numeric-beyond-scale"),
    pytest.param("numeric", T.DecimalType(38, 10), ("1.5", "2"), "1e30",
                 (Decimal("1.5"), Decimal("2")), "Decimal('1000000000000000000000000000000')",
                 id="numeric-beyond-precision"),
    pytest.param("numeric", T.DecimalType(38, 10), ("1.5", "2"), "'NaN'",
                 (Decimal("1.5"), Decimal("2")), "Decimal('NaN')", id="numeric-nan"),
    pytest.param("timestamp", T.TimestampType(), ("'2024-01-01 10:00:00'", "'2024-01-03 10:00:00.000001'"),
                 "'infinity'", (datetime(2024, 1, 1, 10, tzinfo=UTC), datetime(2024, 1, 3, 10, 0, 0, 1, tzinfo=UTC)),
                 "'infinity'", id="timestamp-infinity"),
    pytest.param("timestamptz", T.TimestampType(), ("'2024-01-01 10:00:00+02'", "'2024-01-03 10:00:00Z'"),
                 "'-infinity'", (datetime(2024, 1, 1, 8, tzinfo=UTC), datetime(2024, 1, 3, 10, tzinfo=UTC)),
                 "'-infinity'", id="timestamptz-minus-infinity"),
    pytest.param("date", T.DateType(), ("'2024-01-01'", "'2024-01-03'"), "'infinity'",
                 (date(2024, 1, 1), date(2024, 1, 3)), "'infinity'", id="date-infinity"),
]


def lone_value_job(url: str, sql_type: str, spark_type: T.DataType, fits: tuple[str, str], bad: str,
                   on_malformed: str) -> IngestionJob:
    """`lone(id, v)` holding rows 1 and 3 that fit and row 2 that does not, and its job."""
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.exec_driver_sql(f"CREATE TABLE lone (id INTEGER PRIMARY KEY, v {sql_type})")
        conn.exec_driver_sql(f"INSERT INTO lone VALUES (1, {fits[0]}), (2, {bad}), (3, {fits[1]})")
    engine.dispose()
    schema = T.StructType([T.StructField("id", T.LongType(), False), T.StructField("v", spark_type)])
    return IngestionJob("lone", SqlTableSource(url, "lone", id_column="id"), AutoIncrementIdPlanner(),
                        TargetTable("lone", ["id"], schema), on_malformed=on_malformed)


def instant(value):
    """A timestamp as the instant it is (pyspark collects it in the process's local time)."""
    return value.astimezone(UTC) if isinstance(value, datetime) else value


def check_lone_value(spark, plane, warehouse, job: IngestionJob, read: tuple, shown: str) -> None:
    """The range fails naming row 2, committing nothing, or quarantines row 2 alone."""
    expected = job.target.schema["v"].dataType.simpleString()
    reason = f"row {{\"id\": 2}}: column 'v' holds {shown}, which is not {expected}"
    table = VersionedTable(spark, plane, "lone", ["id"], job.target.schema, warehouse=warehouse)
    if job.on_malformed == "fail":
        with pytest.raises(IngestionError) as refused:
            RangeIngestion(spark, plane, job, warehouse).run_pending()
        assert isinstance(refused.value.__cause__, MalformedValueError)
        assert str(refused.value).endswith(f"MalformedValueError: {job.source._where}: {reason}")
        (failed,) = JobLog(plane).history("lone")
        assert failed.status == "FAILURE" and table.last_committed() is None
        return
    (result,) = RangeIngestion(spark, plane, job, warehouse).run_pending()
    assert sorted((r.id, instant(r.v)) for r in table.read_actual().collect()) == [(1, read[0]), (3, read[1])]
    quarantine = VersionedTable(spark, plane, "lone__quarantine", QUARANTINE_KEY, QUARANTINE_SCHEMA,
                                warehouse=warehouse)
    assert [(r.source_key, r.reason) for r in quarantine.read_actual().collect()] == [
        ('{"id": 2}', f"SQL source 'lone' {reason}")]
    assert (result.rows_read, result.keys_written, result.rows_quarantined) == (3, 2, 1)


@pytest.mark.parametrize("on_malformed", ["fail", "quarantine"])
@pytest.mark.parametrize(("sql_type", "spark_type", "fits", "bad", "read", "shown"), LONE_SQLITE_VALUES)
def test_a_sqlite_value_its_column_cannot_hold_alone_in_its_batch_is_refused_or_quarantined_never_converted(
        tmp_path, spark, sqlite_url, warehouse, sql_type, spark_type, fits, bad, read, shown, on_malformed):
    job = lone_value_job(f"sqlite:///{tmp_path / 'lone.db'}", sql_type, spark_type, fits, bad, on_malformed)
    check_lone_value(spark, connect(sqlite_url), warehouse, job, read, shown)


@pytest.mark.parametrize("on_malformed", ["fail", "quarantine"])
@pytest.mark.parametrize(("sql_type", "spark_type", "fits", "bad", "read", "shown"), LONE_POSTGRESQL_VALUES)
def test_a_postgresql_value_spark_cannot_hold_alone_in_its_batch_is_refused_or_quarantined_never_converted(
        postgres_url, spark, sqlite_url, warehouse, sql_type, spark_type, fits, bad, read, shown, on_malformed):
    job = lone_value_job(postgres_url, sql_type, spark_type, fits, bad, on_malformed)
    check_lone_value(spark, connect(sqlite_url), warehouse, job, read, shown)
