"""Crash safety: a process killed with SIGKILL in the middle of a write or of a commit
leaves the table readable with exactly its committed deltas; the leftovers of the dead
holder are discarded by `discard_dead_hot` and `cleanup`. A revert is all or nothing the same
way, its job_log marks included, and the next revert discards what a dead one left."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from pyspark.sql.types import LongType, StringType, StructField, StructType

from offset_assets.control_plane import connect
from offset_assets.control_plane.job_log import JobLog
from offset_assets.versioned import VersionedTable, revert_table
from offset_assets.versioned.commit import commit_transaction
from offset_assets.versioned.errors import HotDeltaHeldError
from offset_assets.versioned.layout import WarehouseFiles
from offset_assets.versioned.maintenance import cleanup

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.sigkill  # each test SIGKILLs a child process it started
SCHEMA = StructType([StructField("id", LongType(), False), StructField("v", StringType())])

WRITER = textwrap.dedent(
    """
    import sys
    from pyspark.sql.types import LongType, StringType, StructField, StructType
    from offset_assets.control_plane import connect
    from offset_assets.spark import SHORT_JVM_OPTIONS, get_spark_session
    from offset_assets.versioned import VersionedTable

    url, warehouse = sys.argv[1:3]
    spark = get_spark_session(master="local[1]", conf={
        "spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "1", "spark.driver.memory": "512m",
        "spark.driver.extraJavaOptions": SHORT_JVM_OPTIONS})
    schema = StructType([StructField("id", LongType(), False), StructField("v", StringType())])
    table = VersionedTable(spark, connect(url), "orders", ["id"], schema, warehouse=warehouse)
    hot = table.open_delta(holder="doomed-writer")
    print("HOT", hot.data_path, flush=True)
    hot.write(spark.range(0, 300_000, numPartitions=4).selectExpr("id", "concat('new-', id) AS v"))
    print("WRITTEN", flush=True)
    """
)

COMMITTER = textwrap.dedent(
    """
    import sys, time
    from offset_assets.control_plane import connect
    from offset_assets.control_plane.delta_catalog import DeltaCatalog

    url, delta_num, data_path = sys.argv[1], int(sys.argv[2]), sys.argv[3]

    def on_commit(conn, commit_ts):
        print("IN-COMMIT", flush=True)  # the deltas are marked committed in this open transaction
        time.sleep(120)

    DeltaCatalog(connect(url)).commit([("orders", delta_num, 1, 0, data_path)], on_commit=on_commit)
    """
)


def _spawn(script: str, *args: str) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYSPARK_GATEWAY")}
    env["PYTHONPATH"] = str(REPO)
    return subprocess.Popen(
        [sys.executable, "-c", script, *args],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,  # its own process group: the Spark JVM it starts dies with it
    )


def _read_until(process: subprocess.Popen, marker: str, timeout_s: float = 180) -> str:
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        line = process.stdout.readline()
        if line.startswith(marker):
            return line
        if not line and process.poll() is not None:
            pytest.fail(f"the child exited ({process.returncode}) before printing {marker}")
    pytest.fail(f"no {marker} within {timeout_s}s")


def _kill(process: subprocess.Popen) -> None:
    os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=30)


@pytest.fixture
def orders(spark, sqlite_url, warehouse) -> VersionedTable:
    table = VersionedTable(spark, connect(sqlite_url), "orders", ["id"], SCHEMA, warehouse=warehouse)
    table.write_delta(spark.createDataFrame([(1, "committed"), (2, "committed")], SCHEMA))
    return table


def committed_state(table: VersionedTable) -> list[tuple]:
    return sorted((r.id, r.v, r.sys_from) for r in table.read_actual().collect())


def test_a_writer_killed_while_writing_files_exposes_nothing(spark, sqlite_url, warehouse, orders):
    writer = _spawn(WRITER, sqlite_url, warehouse)
    try:
        data_path = _read_until(writer, "HOT").split(maxsplit=1)[1].strip()
        deadline = time.time() + 180
        # Kill as soon as a Parquet part file is being written (the test warehouse is local).
        while not any(Path(data_path).rglob("part-*")) and writer.poll() is None and time.time() < deadline:
            time.sleep(0.01)
    finally:
        _kill(writer)
    assert any(Path(data_path).rglob("part-*")), "the writer was not killed while writing files"

    assert committed_state(orders) == [(1, "committed", 1), (2, "committed", 1)]
    assert orders.last_committed().delta_num == 1
    assert orders.read_changes_since(0).count() == 2
    with pytest.raises(HotDeltaHeldError, match="held by 'doomed-writer'"):
        orders.open_delta()

    assert orders.discard_dead_hot().holder == "doomed-writer"
    assert not WarehouseFiles().exists(data_path)
    cleanup(orders, 0)
    after = orders.write_delta(spark.createDataFrame([(3, "next")], SCHEMA))
    assert after.delta_num == 2
    assert committed_state(orders) == [(1, "committed", 1), (2, "committed", 1), (3, "next", 2)]


def test_a_process_killed_inside_the_commit_transaction_commits_nothing(spark, db_url, warehouse):
    orders = VersionedTable(spark, connect(db_url), "orders", ["id"], SCHEMA, warehouse=warehouse)
    orders.write_delta(spark.createDataFrame([(1, "committed")], SCHEMA))
    hot = orders.open_delta()
    hot.write(spark.createDataFrame([(1, "changed"), (2, "new")], SCHEMA))
    clock_before = orders.catalog.last_commit_ts()

    committer = _spawn(COMMITTER, db_url, str(hot.delta_num), hot.data_path)
    try:
        _read_until(committer, "IN-COMMIT", timeout_s=60)
    finally:
        _kill(committer)

    assert orders.hot().delta_num == 2 and orders.last_committed().delta_num == 1
    assert orders.catalog.last_commit_ts() == clock_before
    assert committed_state(orders) == [(1, "committed", 1)]
    # The delta is still hot and intact: its owner commits it.
    assert hot.commit().delta_num == 2
    assert committed_state(orders) == [(1, "changed", 2), (2, "new", 2)]


# -- a revert killed: all or nothing ------------------------------------------------------

REVERTER = textwrap.dedent(
    """
    import sys, time
    from pyspark.sql.types import LongType, StringType, StructField, StructType
    from offset_assets.control_plane import connect
    from offset_assets.control_plane.job_log import JobLog
    from offset_assets.spark import SHORT_JVM_OPTIONS, get_spark_session
    from offset_assets.versioned import VersionedTable, revert_table
    from offset_assets.versioned.delta_files import DeltaFiles

    url, warehouse, point = sys.argv[1:4]
    spark = get_spark_session(master="local[1]", conf={
        "spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "1", "spark.driver.memory": "512m",
        "spark.driver.extraJavaOptions": SHORT_JVM_OPTIONS})
    schema = StructType([StructField("id", LongType(), False), StructField("v", StringType())])
    table = VersionedTable(spark, connect(url), "orders", ["id"], schema, warehouse=warehouse)

    def waiting_after(original, marker):
        def wrapped(*args, **kwargs):
            done = original(*args, **kwargs)
            print(marker, flush=True)
            time.sleep(120)
            return done
        return wrapped

    if point == "write":  # the revert's versions are in its hot delta's files, the write not returned
        DeltaFiles.write_sorted = waiting_after(DeltaFiles.write_sorted, "WRITTEN")
    else:  # inside the commit transaction: the delta marked committed, the range marked REVERTED
        JobLog.mark_reverted = waiting_after(JobLog.mark_reverted, "IN-COMMIT")
    revert_table(table, 1)
    """
)


@pytest.mark.parametrize(("point", "marker"), [("write", "WRITTEN"), ("commit", "IN-COMMIT")])
def test_a_revert_killed_inside_its_write_or_its_commit_changes_nothing_and_the_next_revert_completes(
    spark, db_url, warehouse, point, marker
):
    """Delta 2 is a bad load of range (5, 10] of an ingestion job. A revert to delta 1 killed
    with its files written, or inside its commit transaction, leaves the table, the catalog
    and job_log as they were; its hot delta is the dead revert's, which the next revert
    discards before it completes."""
    plane = connect(db_url)
    orders = VersionedTable(spark, plane, "orders", ["id"], SCHEMA, warehouse=warehouse)
    orders.write_delta(spark.createDataFrame([(1, "good"), (2, "good")], SCHEMA))
    log = JobLog(plane)
    claim = log.claim("orders_ingest", "5", "10", run_id="loader")
    hot = orders.open_delta(holder="ingestion:orders_ingest", run_id="loader")
    hot.write(spark.createDataFrame([(1, "bad"), (3, "bad")], SCHEMA))
    with commit_transaction([hot]) as commit:
        log.mark_success(claim.job_id, "10", conn=commit.conn, run_id="loader", target=("orders", hot.delta_num))
    clock_before = orders.catalog.last_commit_ts()

    reverter = _spawn(REVERTER, db_url, warehouse, point)
    try:
        _read_until(reverter, marker)
    finally:
        _kill(reverter)

    assert orders.last_committed().delta_num == 2 and orders.catalog.last_commit_ts() == clock_before
    assert {(r.id, r.v) for r in orders.read_actual().collect()} == {(1, "bad"), (2, "good"), (3, "bad")}
    assert (log.get(claim.job_id).status, log.get(claim.job_id).reverted_by_delta) == ("SUCCESS", None)
    dead = orders.hot()
    assert dead.delta_num == 3 and dead.holder.startswith("revert:")

    again = revert_table(orders, 1)

    assert again.delta.delta_num == 3 and again.delta.holder != dead.holder
    assert not WarehouseFiles().exists(dead.data_path)
    assert {(r.id, r.v) for r in orders.read_actual().collect()} == {(1, "good"), (2, "good")}
    assert (log.get(claim.job_id).status, log.get(claim.job_id).reverted_by_delta) == ("REVERTED", 3)
