"""A run over small tables evaluates Spark's expressions interpreted, not compiled, runs
without adaptive execution and its shuffles in few partitions, and gives the session its
own settings back afterwards (real Spark, through the engine and an ingestion range); how
small is small comes from the catalog's counts."""

from __future__ import annotations

from datetime import datetime

import pytest
from pyspark.sql.types import LongType, StringType, StructField, StructType

from offset_assets.control_plane import connect
from offset_assets.engine import IncrementalEngine
from offset_assets.engine.transformation import Transformation, TransformInput
from offset_assets.local_frames import local_frame
from offset_assets.ranges.ingestion import RangeIngestion
from offset_assets.spark import temporary_setting
from offset_assets.versioned import VersionedTable, delta_files, hot_delta
from offset_assets.versioned.evaluation import (
    ADAPTIVE_EXECUTION,
    CODEGEN_FACTORY_MODE,
    INTERPRETED,
    SHUFFLE_PARTITIONS,
    is_small_run,
    small_run_shuffle_partitions,
)
from tests.test_ingestion import id_job, insert_customers

ITEMS = StructType([StructField("item_id", LongType(), False), StructField("name", StringType(), True)])
# What Spark does when nothing is set: compile (and fall back to interpreting when that
# fails), adaptive execution; and a user's number of shuffle partitions (Spark's 200 would
# make the runs beyond the limit slow to no purpose here).
COMPILED = "FALLBACK"
SETTINGS = (CODEGEN_FACTORY_MODE, ADAPTIVE_EXECUTION, SHUFFLE_PARTITIONS)
USERS_SETTINGS = (COMPILED, "true", "8")
SMALL_RUN_SETTINGS = (INTERPRETED, "false", "1")


@pytest.fixture
def compiled_session(spark):
    """The session as a user's is: compiling, adaptive (the test session itself interprets,
    without adaptive execution, in 2 shuffle partitions; conftest restores them)."""
    for key, value in zip(SETTINGS, USERS_SETTINGS, strict=True):
        spark.conf.set(key, value)
    return spark


def settings(spark) -> tuple[str, ...]:
    return tuple(spark.conf.get(key) for key in SETTINGS)


def copy_items(spark, plane, warehouse, seen: list[str]) -> Transformation:
    items = VersionedTable(spark, plane, "items", ["item_id"], ITEMS, warehouse=warehouse)
    copies = VersionedTable(spark, plane, "item_copies", ["item_id"], ITEMS, warehouse=warehouse)
    items.write_delta(spark.createDataFrame([(1, "bolt"), (2, "nut"), (3, "gear")], ITEMS))

    def copy(items):
        seen.append(settings(spark))
        return items

    return Transformation("copy_items", [TransformInput(items)], ["item_id"], [copies], copy)


def test_the_decision_reads_the_tables_sizes_and_keeps_unknown_sizes_as_configured():
    assert is_small_run([3, 0, 0], limit=3)
    assert not is_small_run([3, 1], limit=3)
    assert not is_small_run([1, None], limit=100)
    assert not is_small_run([1], limit=0)


def test_a_small_runs_shuffles_have_a_partition_per_50000_rows_within_the_sessions_number():
    assert small_run_shuffle_partitions(0, configured=200) == 1
    assert small_run_shuffle_partitions(50_000, configured=200) == 1
    assert small_run_shuffle_partitions(100_000, configured=200) == 2
    assert small_run_shuffle_partitions(100_001, configured=200) == 3
    assert small_run_shuffle_partitions(100_000, configured=1) == 1


def test_a_run_over_small_tables_runs_as_a_small_run_and_restores_the_sessions_settings(
        compiled_session, sqlite_url, warehouse):
    spark, seen = compiled_session, []
    t = copy_items(spark, connect(sqlite_url), warehouse, seen)
    result = IncrementalEngine(spark, connect(sqlite_url)).run_full(t)
    assert (result.processed_keys, seen) == (3, [SMALL_RUN_SETTINGS])
    assert settings(spark) == USERS_SETTINGS
    assert sorted(tuple(r) for r in t.outputs[0].read_actual().select("item_id", "name").collect()) == [
        (1, "bolt"), (2, "nut"), (3, "gear")]


def test_a_run_over_tables_beyond_the_limit_keeps_the_sessions_settings(compiled_session, sqlite_url, warehouse):
    spark, seen = compiled_session, []
    t = copy_items(spark, connect(sqlite_url), warehouse, seen)
    # Each run's input holds more than 2 versions; a limit of 0 makes no run small.
    for limit in (2, 0):
        t.inputs[0].table.write_delta(spark.createDataFrame([(limit + 10, "washer")], ITEMS))
        IncrementalEngine(spark, connect(sqlite_url), small_run_rows_limit=limit).run_full(t)
    assert seen == [USERS_SETTINGS, USERS_SETTINGS]


def test_a_failing_block_gets_the_sessions_setting_back_and_an_unset_one_stays_unset(spark):
    key = "spark.offset_assets.test.setting"
    with pytest.raises(RuntimeError, match="the block failed"), temporary_setting(spark, key, "on"):
        assert spark.conf.get(key) == "on"
        raise RuntimeError("the block failed")
    assert spark.conf.get(key, None) is None
    spark.conf.set(key, "off")
    with temporary_setting(spark, key, "on"):
        assert spark.conf.get(key) == "on"
    assert spark.conf.get(key) == "off"


def test_an_ingestion_range_into_a_small_table_is_written_as_a_small_run(compiled_session, sqlite_url, warehouse,
                                                                       source_url, monkeypatch):
    spark, seen = compiled_session, []
    write = hot_delta.HotDelta.write

    def recording_write(self, *args, **kwargs):
        seen.append(settings(spark))
        return write(self, *args, **kwargs)

    monkeypatch.setattr(hot_delta.HotDelta, "write", recording_write)
    insert_customers(source_url, ("ann", "Oslo", datetime(2022, 1, 1)), ("bob", "Rome", datetime(2022, 1, 1)))
    plane = connect(sqlite_url)
    # Written by Spark (held_rows_limit=0): the driver would write ranges this small itself.
    (small,) = RangeIngestion(spark, plane, id_job(source_url), warehouse, held_rows_limit=0).run_pending()
    insert_customers(source_url, ("cid", "Lima", datetime(2022, 1, 2)))
    # The target holds 2 versions and the range 1 row: beyond a limit of 2.
    (large,) = RangeIngestion(spark, plane, id_job(source_url), warehouse, small_run_rows_limit=2,
                              held_rows_limit=0).run_pending()
    assert (small.rows_upserted, large.rows_upserted) == (2, 1)
    assert seen == [SMALL_RUN_SETTINGS, USERS_SETTINGS]
    assert settings(spark) == USERS_SETTINGS


def test_a_direct_write_of_local_rows_into_a_small_table_is_written_as_a_small_run(
        compiled_session, sqlite_url, warehouse, monkeypatch):
    spark, seen = compiled_session, []
    write_sorted = delta_files._write_sorted

    def recording_write_sorted(frame, path, primary_key):
        seen.append(settings(spark))
        return write_sorted(frame, path, primary_key)

    monkeypatch.setattr(delta_files, "_write_sorted", recording_write_sorted)
    items = VersionedTable(spark, connect(sqlite_url), "items", ["item_id"], ITEMS, warehouse=warehouse)
    items.write_delta(local_frame(spark, [(1, "bolt"), (2, "nut")], ITEMS))
    # Classified against 2 versions; its unchanged row gets a file of its own (2 writes).
    items.write_delta(local_frame(spark, [(2, "nut"), (3, "gear")], ITEMS))
    hot = items.open_delta()
    hot.delete(local_frame(spark, [(1,)], "item_id long"))
    hot.commit()
    # A list is an RDD of Python rows, whose size Spark does not know: the session's settings.
    items.write_delta(spark.createDataFrame([(4, "washer")], ITEMS))
    # Local rows into a table beyond the limit: the session's settings.
    monkeypatch.setattr(hot_delta, "DEFAULT_SMALL_RUN_ROWS_LIMIT", 2)
    items.write_delta(local_frame(spark, [(5, "spring")], ITEMS))
    assert seen == [SMALL_RUN_SETTINGS] * 4 + [USERS_SETTINGS] * 2
    assert settings(spark) == USERS_SETTINGS
    assert sorted(tuple(r) for r in items.read_actual().select("item_id", "name").collect()) == [
        (2, "nut"), (3, "gear"), (4, "washer"), (5, "spring")]
