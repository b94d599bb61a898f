"""CSV and JSON files landing in day folders whose records do not fit the declared schema
(a price `abc`, a CSV line with a field too many, a line that is no JSON): never read as
nulls. The range fails naming the file, the record, the column and its value, and is
ingested once the file is corrected; or the job sets the records aside in its quarantine
table in the range's commit and ingests the rest. A reader option that would drop them
is refused."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import pytest
from pyspark.sql import types as T

from offset_assets.control_plane import connect
from offset_assets.control_plane.job_log import JobLog
from offset_assets.ranges.errors import IngestionError, SourceError
from offset_assets.ranges.ingestion import QUARANTINE_KEY, QUARANTINE_SCHEMA, IngestionJob, RangeIngestion, TargetTable
from offset_assets.ranges.planners import TimeWindowPlanner
from offset_assets.ranges.sources import FolderSource
from offset_assets.versioned.table import VersionedTable

PRICES = T.StructType([T.StructField("product_id", T.LongType(), False),
                       T.StructField("price", T.DoubleType(), True),
                       T.StructField("name", T.StringType(), True)])
DAY = datetime(2026, 1, 1)
AFTER_THE_DAY = DAY + timedelta(days=1, hours=1)


def land(root: Path, name: str, *lines: str) -> str:
    """A file of the day's folder; its path as Spark names it."""
    folder = root / "dt=2026-01-01"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text("".join(f"{line}\n" for line in lines))
    return f"file:{folder / name}"


def prices_job(root: Path, fmt: str, **job) -> IngestionJob:
    options = {"header": "true"} if fmt == "csv" else {}
    return IngestionJob("prices", FolderSource(str(root), format=fmt, schema=PRICES, options=options),
                        TimeWindowPlanner(DAY, timedelta(days=1)), TargetTable("prices", ["product_id"], PRICES), **job)


def rows(table: VersionedTable) -> list[tuple]:
    return sorted(tuple(r) for r in table.read_actual().select(*PRICES.fieldNames()).collect())


def test_a_csv_value_that_does_not_fit_fails_the_range_naming_file_record_column_and_value_then_the_fix_is_ingested(
        spark, sqlite_url, warehouse, tmp_path):
    plane, root = connect(sqlite_url), tmp_path / "landing"
    path = land(root, "prices.csv", "product_id,price,name", "1,2.5,pen", "2,abc,ink")
    ingestion = RangeIngestion(spark, plane, prices_job(root, "csv"), warehouse)

    with pytest.raises(IngestionError) as refused:
        ingestion.run_pending(now=AFTER_THE_DAY)

    assert str(refused.value).endswith(
        f"MalformedValueError: folder source {str(root)!r}: {path}: record '2,abc,ink': column 'price' holds 'abc', "
        "which is not double (1 malformed record(s) in the range; on_malformed='quarantine' would set them aside in "
        "'prices__quarantine')")
    (failed,) = JobLog(plane).history("prices")
    target = VersionedTable(spark, plane, "prices", ["product_id"], PRICES, warehouse=warehouse)
    assert failed.status == "FAILURE" and target.last_committed() is None

    land(root, "prices.csv", "product_id,price,name", "1,2.5,pen", "2,3.0,ink")
    (retried,) = ingestion.run_pending(now=AFTER_THE_DAY)
    assert (retried.rows_read, retried.keys_written) == (2, 2)
    assert rows(target) == [(1, 2.5, "pen"), (2, 3.0, "ink")]


def test_csv_lines_with_a_field_too_many_or_a_value_that_does_not_fit_go_to_the_quarantine_with_the_range(
        spark, sqlite_url, warehouse, tmp_path):
    plane, root = connect(sqlite_url), tmp_path / "landing"
    path = land(root, "prices.csv", "product_id,price,name", "1,2.5,pen", "2,abc,ink", "3,4.0,cap,red", "x4,1.0,mug")

    (result,) = RangeIngestion(spark, plane, prices_job(root, "csv", on_malformed="quarantine"),
                               warehouse).run_pending(now=AFTER_THE_DAY)

    assert (result.rows_read, result.keys_written, result.rows_quarantined) == (4, 1, 3)
    target = VersionedTable(spark, plane, "prices", ["product_id"], PRICES, warehouse=warehouse)
    assert rows(target) == [(1, 2.5, "pen")]
    quarantine = VersionedTable(spark, plane, "prices__quarantine", QUARANTINE_KEY, QUARANTINE_SCHEMA,
                                warehouse=warehouse)
    held = sorted((r.raw_value, r.reason, r.source_key.split("#")[0])
                  for r in quarantine.read_actual().collect())
    prefix = f"folder source {str(root)!r}: {path}: record"
    assert held == [
        ("2,abc,ink", f"{prefix} '2,abc,ink': column 'price' holds 'abc', which is not double", path),
        ("3,4.0,cap,red", f"{prefix} '3,4.0,cap,red': it has more fields than the schema's 3", path),
        ("x4,1.0,mug", f"{prefix} 'x4,1.0,mug': column 'product_id' holds 'x4', which is not bigint", path),
    ]
    assert quarantine.last_committed().commit_ts == target.last_committed().commit_ts == result.commit_ts


def test_json_records_that_do_not_fit_or_are_no_json_go_to_the_quarantine_and_the_rest_is_ingested(
        spark, sqlite_url, warehouse, tmp_path):
    plane, root = connect(sqlite_url), tmp_path / "landing"
    path = land(root, "prices.json", '{"product_id": 1, "price": 2.5, "name": "pen"}',
                '{"product_id": 2, "price": "abc", "name": "ink"}', '{"product_id": "x3", "price": 1.0}',
                "not json", '{"product_id": 4, "price": 3.0}')

    (result,) = RangeIngestion(spark, plane, prices_job(root, "json", on_malformed="quarantine"),
                               warehouse).run_pending(now=AFTER_THE_DAY)

    assert (result.rows_read, result.keys_written, result.rows_quarantined) == (5, 2, 3)
    target = VersionedTable(spark, plane, "prices", ["product_id"], PRICES, warehouse=warehouse)
    # A field a JSON record leaves out is a null, as JSON has it: record 4 has no name.
    assert rows(target) == [(1, 2.5, "pen"), (4, 3.0, None)]
    quarantine = VersionedTable(spark, plane, "prices__quarantine", QUARANTINE_KEY, QUARANTINE_SCHEMA,
                                warehouse=warehouse)
    prefix = f"folder source {str(root)!r}: {path}: record"
    assert sorted(r.reason for r in quarantine.read_actual().collect()) == sorted([
        f"{prefix} '{{\"product_id\": 2, \"price\": \"abc\", \"name\": \"ink\"}}': column 'price' holds 'abc', "
        "which is not double",
        f"{prefix} '{{\"product_id\": \"x3\", \"price\": 1.0}}': column 'product_id' holds 'x3', which is not bigint",
        f"{prefix} 'not json': it is not a JSON object",
    ])


@pytest.mark.parametrize("options", [{"mode": "DROPMALFORMED"}, {"mode": "FAILFAST"},
                                     {"columnNameOfCorruptRecord": "bad"}])
def test_a_reader_option_that_would_drop_or_hide_malformed_records_is_refused_naming_it(tmp_path, options):
    with pytest.raises(SourceError, match=r"folder source '.*landing': option mode=.* is the source's own: a record "
                                          r"that does not fit the schema fails the range naming it"):
        FolderSource(str(tmp_path / "landing"), format="csv", schema=PRICES, options=options)
