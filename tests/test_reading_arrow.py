"""Reads without a JVM (`offset_assets/reading/arrow.py`): a table's actual state from the
catalog and the Parquet files equals Spark's read of it, row for row and type for type,
at every delta, across a compaction and a schema evolution; in a process with no Java;
refused beyond `max_bytes`; a file removed under a read fails it clearly."""

from __future__ import annotations

import datetime
import decimal
import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from offset_assets.control_plane import connect
from offset_assets.control_plane.delta_catalog.errors import UnknownTableError
from offset_assets.local_frames import local_frame
from offset_assets.reading.arrow import ArrowRead, _newest_per_key, read_arrow
from offset_assets.reading.errors import FilesRemovedError, TableTooLargeError
from offset_assets.reading.tables import to_arrow
from offset_assets.versioned.compaction import compact
from offset_assets.versioned.errors import VersionedTableError
from offset_assets.versioned.maintenance import cleanup
from offset_assets.versioned.table import VersionedTable

ROOT = Path(__file__).resolve().parent.parent
UTC = datetime.UTC
THINGS = StructType([
    StructField("id", LongType(), False),
    StructField("at", TimestampType()),
    StructField("day", DateType()),
    StructField("amount", DecimalType(12, 2)),
    StructField("tags", ArrayType(StringType())),
    StructField("local", TimestampNTZType()),
    StructField("point", StructType([StructField("x", IntegerType()), StructField("y", DoubleType())])),
    StructField("raw", BinaryType()),
    StructField("ok", BooleanType()),
])
# A column added to the definition after the third delta (older files read it as null).
EVOLVED = StructType([*THINGS.fields, StructField("note", StringType())])


def thing(key: int, version: int, sys_op: int = 0, *notes: str | None) -> tuple:
    """A row of THINGS (of EVOLVED with a note)."""
    row = (key, datetime.datetime(2026, 1, 1, tzinfo=UTC) + datetime.timedelta(hours=version),
           datetime.date(900 + version, 1, 1), decimal.Decimal(f"{version}.25"), [f"t{version}", None],
           datetime.datetime(2026, 2, 1, 1, version), (version, version / 4), bytes([version]), version % 2 == 0,
           sys_op)
    return (*row[:-1], *notes, sys_op)


def with_op(schema: StructType) -> StructType:
    return StructType([*schema.fields, StructField("sys_op", LongType())])


def by_key(table: pa.Table) -> list[dict]:
    return sorted(table.to_pylist(), key=lambda row: row["id"])


@pytest.fixture
def things(spark, sqlite_url, warehouse) -> VersionedTable:
    """Inserts, updates, deletes and a re-insert over five deltas; compacted after the
    third; the schema evolved after it."""
    plane = connect(sqlite_url)
    table = VersionedTable(spark, plane, "things", ["id"], THINGS, warehouse=warehouse)
    table.write_delta(local_frame(spark, [thing(k, 1) for k in range(1, 6)], with_op(THINGS)))
    table.write_delta(local_frame(spark, [thing(1, 2), thing(2, 2, sys_op=1), thing(6, 2)], with_op(THINGS)))
    table.write_delta(local_frame(spark, [thing(3, 3, sys_op=1), thing(2, 3)], with_op(THINGS)))
    compact(table)
    table = VersionedTable(spark, plane, "things", ["id"], EVOLVED, warehouse=warehouse)
    table.write_delta(local_frame(spark, [thing(4, 4, 0, "n4"), thing(6, 4, 1, None)],
                                  with_op(EVOLVED)))
    table.write_delta(local_frame(spark, [thing(7, 5, 0, "n7"), thing(1, 5, 0, "n1")], with_op(EVOLVED)))
    return table


@pytest.mark.quick
def test_the_read_without_a_jvm_equals_sparks_at_every_delta_across_a_compaction_and_a_schema_evolution(
        things, sqlite_url):
    for delta in (None, 0, 1, 2, 3, 4, 5):
        without_jvm = read_arrow(sqlite_url, "things", as_of_delta=delta)
        spark_read = to_arrow(things.read_actual(as_of_delta=delta))

        assert without_jvm.schema == spark_read.schema, delta
        assert by_key(without_jvm) == by_key(spark_read), delta
    latest = by_key(read_arrow(sqlite_url, "things"))
    assert [(row["id"], row["sys_from"], row["note"]) for row in latest] == [
        (1, 5, "n1"), (2, 3, None), (4, 4, "n4"), (5, 1, None), (7, 5, "n7")]
    assert latest[0]["update_ts"] == things.delta(5).commit_ts
    assert latest[3]["day"] == datetime.date(901, 1, 1)  # before year 1000, as Spark wrote it


def test_as_of_a_time_reads_the_state_a_reader_saw_then(things, sqlite_url):
    between = (things.delta(3).commit_ts + things.delta(4).commit_ts) / 2
    expected = by_key(to_arrow(things.read_as_of_timestamp(between)))
    moment = datetime.datetime.fromtimestamp(between, UTC)

    assert by_key(read_arrow(sqlite_url, "things", as_of=between)) == expected
    assert by_key(read_arrow(sqlite_url, "things", as_of=moment)) == expected
    # Text without an offset is UTC, as the project's Spark sessions read a TIMESTAMP.
    assert by_key(read_arrow(sqlite_url, "things", as_of=moment.replace(tzinfo=None).isoformat())) == expected
    assert read_arrow(sqlite_url, "things", as_of="1999-01-01").num_rows == 0


def test_a_table_beyond_max_bytes_unknown_names_and_deltas_are_one_clear_error(things, sqlite_url):
    planned = ArrowRead.plan(sqlite_url, "things")

    with pytest.raises(TableTooLargeError, match=rf"^table 'things': its actual state is read from "
                                                 rf"{planned.bytes_on_disk:,} bytes of files, above max_bytes=1,000 "
                                                 r"for a read without a JVM: read it with Spark"):
        read_arrow(sqlite_url, "things", max_bytes=1000)
    with pytest.raises(VersionedTableError, match=r"^table 'things': delta 6 is not committed \(last committed: 5\)$"):
        read_arrow(sqlite_url, "things", as_of_delta=6)
    with pytest.raises(UnknownTableError, match=r"^no versioned table 'thing' in the delta catalog"):
        read_arrow(sqlite_url, "thing")


def test_a_snapshot_removed_by_cleanup_while_a_read_runs_fails_it_clearly_and_a_new_read_succeeds(
        spark, things, sqlite_url):
    planned = ArrowRead.plan(sqlite_url, "things", as_of_delta=4)  # the snapshot at delta 3, and delta 4
    compact(things)
    assert cleanup(things, retention_s=0).expired_snapshots == [3]

    with pytest.raises(FilesRemovedError, match=r"^table 'things': a file of its state as of delta 4 was removed "
                                                r"while this read ran \(.*\): read it again$"):
        planned.read()

    assert by_key(ArrowRead.plan(sqlite_url, "things", as_of_delta=4).read()) == by_key(
        to_arrow(things.read_actual(as_of_delta=4)))


def test_the_read_runs_in_a_process_without_java(things, sqlite_url, tmp_path):
    reader = ("import json, sys; from offset_assets.reading import read_pandas; "
              "frame = read_pandas(sys.argv[1], 'things'); "
              "print(json.dumps(sorted([int(i), n] for i, n in zip(frame['id'], frame['note'].fillna('-')))))")
    no_java = {**os.environ, "JAVA_HOME": str(tmp_path / "no-java"),
               "PATH": os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep)
                                       if not (Path(p) / "java").exists())}

    child = subprocess.run([sys.executable, "-c", reader, sqlite_url], cwd=ROOT, env=no_java,
                           capture_output=True, text=True, timeout=300)

    assert child.returncode == 0, child.stderr[-2000:]
    assert json.loads(child.stdout) == [[1, "n1"], [2, "-"], [4, "n4"], [5, "-"], [7, "n7"]]


def test_the_newest_version_of_each_key_treats_null_and_nan_keys_as_keys():
    versions = pa.table({
        "k": pa.array([None, 1.0, float("nan"), None, float("nan"), 1.0], pa.float64()),
        "s": pa.array(["a", "a", "b", "b", "c", "c"]),
        "sys_from": pa.array([1, 1, 1, 2, 2, 2], pa.int64()),
    })

    def told(table: pa.Table) -> list[tuple]:
        return sorted((tuple("nan" if v != v else v for v in row.values()) for row in table.to_pylist()), key=repr)

    assert told(versions.take(_newest_per_key(versions, ["k", "s"]))) == sorted([
        (None, "a", 1), (1.0, "a", 1), ("nan", "b", 1), (None, "b", 2), ("nan", "c", 2), (1.0, "c", 2)], key=repr)
    one_key = versions.select(["k", "sys_from"])
    assert told(one_key.take(_newest_per_key(one_key, ["k"]))) == sorted([(None, 2), (1.0, 2), ("nan", 2)], key=repr)


def test_a_compacted_tables_later_deltas_replace_and_delete_its_rows_null_key_included_as_sparks_read_does(
        spark, sqlite_url, warehouse):
    schema = StructType([StructField("code", StringType()), StructField("n", LongType())])
    plane = connect(sqlite_url)
    table = VersionedTable(spark, plane, "codes", ["code"], schema, warehouse=warehouse)
    table.write_delta(local_frame(spark, [(None, 1, 0), ("a", 1, 0), ("b", 1, 0), ("c", 1, 0)], with_op(schema)))
    compact(table)
    table.write_delta(local_frame(spark, [(None, 2, 0), ("b", 2, 1), ("d", 2, 0)], with_op(schema)))
    table.write_delta(local_frame(spark, [("d", 3, 1), ("c", 3, 0)], with_op(schema)))

    without_jvm = read_arrow(sqlite_url, "codes")
    spark_read = to_arrow(table.read_actual())

    def rows(read: pa.Table) -> list[tuple]:
        return sorted(((r["code"], r["n"], r["sys_from"]) for r in read.to_pylist()), key=repr)

    assert without_jvm.schema == spark_read.schema
    assert rows(without_jvm) == rows(spark_read) == sorted([(None, 2, 2), ("a", 1, 1), ("c", 3, 3)], key=repr)


def test_a_floating_point_key_replaced_after_a_compaction_reads_as_sparks_read_does(spark, sqlite_url, warehouse):
    """-0.0 and 0.0 are one key to Spark; Arrow's hash tells them apart, so a floating
    point key is never looked up by hash (`_HASHED_KEY_TYPES`)."""
    schema = StructType([StructField("x", DoubleType()), StructField("n", LongType())])
    table = VersionedTable(spark, connect(sqlite_url), "points", ["x"], schema, warehouse=warehouse)
    table.write_delta(local_frame(spark, [(0.0, 1, 0), (1.5, 1, 0), (None, 1, 0)], with_op(schema)))
    compact(table)
    table.write_delta(local_frame(spark, [(-0.0, 2, 0), (1.5, 2, 1)], with_op(schema)))

    def rows(read: pa.Table) -> list[tuple]:
        return sorted(((r["x"], r["n"]) for r in read.to_pylist()), key=repr)

    assert rows(read_arrow(sqlite_url, "points")) == rows(to_arrow(table.read_actual()))
    assert len(read_arrow(sqlite_url, "points")) == 2  # the NULL key and one zero
