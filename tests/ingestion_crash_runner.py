"""Ingest one range in a child process and SIGKILL it while it holds the target's hot delta.

Usage: python -m tests.ingestion_crash_runner DB_URL WAREHOUSE KIND SOURCE POINT
KIND: `sql` (SOURCE: the customers table's SQLite URL; its small range is written by the
driver), `sql-spark` (the same, written by Spark), `kafka` (SOURCE: `bootstrap|topic`),
or `dagster` (the sql job's `id:0-5` partition materialized by Dagster, SOURCE as for sql).
POINT: `during_write` (the range's files written, the write not returned) or
`inside_commit` (inside the commit transaction, the delta and job_log SUCCESS written, not
committed). The jobs are tests.test_ingestion_dead_writer's; the run id is `crashed-run`
(a Dagster run's own id under `dagster`).
"""

from __future__ import annotations

import os
import signal
import sys

from offset_assets.control_plane import connect
from offset_assets.control_plane.job_log import JobLog
from offset_assets.ranges.ingestion import RangeIngestion
from offset_assets.spark import LOCAL_TEST_CONF, SHORT_JVM_OPTIONS, get_spark_session
from offset_assets.versioned import delta_files, held_writes
from tests.test_ingestion_dead_writer import DAGSTER_PARTITION, customers_job, events_job


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def arm(point: str) -> None:
    if point == "during_write":  # a range's files written, by Spark or by the driver (a small one)
        write_sorted, write_versions = delta_files._write_sorted, held_writes.write_versions

        def write_then_die(*args, **kwargs):
            write_sorted(*args, **kwargs)
            die()

        def write_held_then_die(*args, **kwargs):
            write_versions(*args, **kwargs)
            die()

        delta_files._write_sorted = write_then_die
        held_writes.write_versions = write_held_then_die
    elif point == "inside_commit":
        mark_success = JobLog.mark_success

        def mark_then_die(self, *args, **kwargs):
            mark_success(self, *args, **kwargs)
            die()

        JobLog.mark_success = mark_then_die
    else:
        raise SystemExit(f"unknown kill point {point!r}")


def main(db_url: str, warehouse: str, kind: str, source: str, point: str) -> None:
    conf = {**LOCAL_TEST_CONF, "spark.driver.extraJavaOptions": SHORT_JVM_OPTIONS}
    spark = get_spark_session(master="local[2]", conf=conf)
    arm(point)
    if kind == "dagster":
        import dagster as dg

        from offset_assets.dagster_adapter import OffsetStore
        from offset_assets.dagster_adapter.ingestion.assets import ingestion_asset
        from tests.dagster_resources import engine_resources

        asset = ingestion_asset(customers_job(source))
        with dg.instance_for_test() as instance:
            instance.add_dynamic_partitions("raw_customers_ranges", [DAGSTER_PARTITION])
            dg.materialize([asset], partition_key=DAGSTER_PARTITION, instance=instance,
                           resources=engine_resources(OffsetStore(db_url=db_url), warehouse))
    else:
        job = customers_job(source) if kind.startswith("sql") else events_job(*source.split("|"))
        held = {"held_rows_limit": 0} if kind == "sql-spark" else {}
        RangeIngestion(spark, connect(db_url), job, warehouse, **held).run_pending(run_id="crashed-run")
    sys.exit(3)  # reaching this line means the kill point was never hit


if __name__ == "__main__":
    main(*sys.argv[1:])
