"""Ingestion of a SQL source by id ranges: the first load of a large table, then a small
increment.

A SQLite source `customers(id INTEGER PRIMARY KEY AUTOINCREMENT, name, city)` of `--rows`
rows (`--source postgresql`: the same table in a throwaway PostgreSQL server) is ingested
with `IngestionJob` + `SqlTableSource` + `AutoIncrementIdPlanner` (its default ranges
of at most 1,000,000 ids) into a versioned table, in one `local[2]` session (unless
`--master`: `standalone` starts a throwaway standalone cluster of one worker with this
machine's cores, the driver keeping Spark's default 1g); then
`--increment` rows are added and ingested as one more range. Reported per load: seconds,
ranges, rows and rows per second (source read, the write's classification against the
table and the commit, end to end), its Spark jobs and the seconds spent in them and
outside, and per range the rows, the slices the source was read in and the range's
profile (driver time and Spark jobs per phase). Writes `docs/bench/ingest/ingest.json`.

    .venv/bin/python -m bench.ingest                          # 5,000,000 rows + 10,000
    .venv/bin/python -m bench.ingest --rows 1000000 --out /tmp/ingest_1m.json
    .venv/bin/python -m bench.ingest --master standalone --out docs/bench/ingest/cluster.json
    .venv/bin/python -m bench.ingest --rows 1000000 --order-by id --out /tmp/ingest_ordered.json
    .venv/bin/python -m bench.ingest --source postgresql --out docs/bench/ingest/postgresql.json
    .venv/bin/python -m bench.ingest --sql-driver sqlalchemy --out /tmp/ingest_sqlalchemy.json  # the reads before ADBC
    .venv/bin/python -m bench.ingest --read-cpu --rows 1000000 --source postgresql  # one slice's CPU, both ways
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path

import sqlalchemy as sa
from pyspark.sql import SparkSession
from pyspark.sql import types as T

from bench.postgres_server import PostgresServer
from bench.standalone_cluster import spark_master
from offset_assets.control_plane import connect
from offset_assets.ranges.ingestion import IngestionJob, RangeIngestion, TargetTable
from offset_assets.ranges.planners import AutoIncrementIdPlanner
from offset_assets.ranges.sources import SqlTableSource
from offset_assets.ranges.sources.sql_read import slice_count
from offset_assets.spark import get_spark_session
from offset_assets.spark_jobs import count_spark_jobs

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "bench" / "ingest" / "ingest.json"
CUSTOMERS = T.StructType([T.StructField("id", T.LongType()), T.StructField("name", T.StringType()),
                          T.StructField("city", T.StringType())])
INSERT_CHUNK = 100_000


def git_commit() -> str | None:
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    return done.stdout.strip() or None


def add_customers(path: Path, first_id: int, count: int) -> None:
    """`count` customers with ids from `first_id` on, written straight through sqlite3."""
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS customers "
                     "(id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT, city TEXT)")
        for start in range(first_id, first_id + count, INSERT_CHUNK):
            stop = min(start + INSERT_CHUNK, first_id + count)
            conn.executemany("INSERT INTO customers (id, name, city) VALUES (?, ?, ?)",
                             ((i, f"customer-{i}", f"city-{i % 1000}") for i in range(start, stop)))


def timed_load(ingestion: RangeIngestion, run_id: str, source: SqlTableSource, parallelism: int) -> dict:
    started = time.perf_counter()
    with count_spark_jobs(ingestion.spark) as jobs:
        results = ingestion.run_pending(run_id=run_id)
    seconds = time.perf_counter() - started
    rows = sum(r.rows_read for r in results)
    in_jobs = sum(job.seconds or 0 for job in jobs.jobs)
    return {
        "seconds": round(seconds, 2), "rows": rows, "rows_per_s": round(rows / seconds),
        # Where the time went: in Spark jobs (the read, classification and write run in
        # them), and around them (planning, catalog, commit, the driver's Python).
        "spark_jobs": jobs.count, "spark_job_s": round(in_jobs, 2), "outside_jobs_s": round(seconds - in_jobs, 2),
        "ranges": [{"range": f"({r.data_range.start}, {r.data_range.end}]", "rows": r.rows_read,
                    "rows_upserted": r.rows_upserted,
                    "profile": r.profile.as_dict() if r.profile else None,
                    "slices": slice_count(r.rows_read, source.rows_per_slice, parallelism)} for r in results],
    }


def add_postgres_customers(url: str, first_id: int, count: int) -> None:
    """`count` customers with ids from `first_id` on, generated by PostgreSQL itself."""
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE IF NOT EXISTS customers (id bigint PRIMARY KEY, name text, city text)")
        conn.exec_driver_sql(
            f"INSERT INTO customers SELECT i, 'customer-' || i, 'city-' || mod(i, 1000) "
            f"FROM generate_series({first_id}, {first_id + count - 1}) i")
    engine.dispose()


@contextlib.contextmanager
def customers_source(source: str, workdir: Path) -> Iterator[tuple[str, Callable[[int, int], None]]]:
    """The source's URL and how to add customers to it: a SQLite file, or a table in a
    throwaway PostgreSQL server."""
    if source == "sqlite":
        path = workdir / "source.db"
        yield f"sqlite:///{path}", partial(add_customers, path)
        return
    server = PostgresServer.start()
    try:
        url = server.url_for("postgres")
        yield url, partial(add_postgres_customers, url)
    finally:
        server.stop()


def run(rows: int, increment: int, master: str, workdir: Path, order_by: str | None = None,
        source: str = "sqlite", arrow_driver: bool = True) -> dict:
    (workdir / "warehouse").mkdir()
    with customers_source(source, workdir) as (source_url, add):
        started = time.perf_counter()
        add(1, rows)
        filled_s = time.perf_counter() - started
        with spark_master(master) as (url, cluster_conf):
            spark = get_spark_session(master=url, app_name="bench-ingest",
                                      conf={"spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false",
                                            **cluster_conf})
            try:
                return {"source": source, "arrow_driver": arrow_driver,
                        **load_twice(spark, source_url, add, workdir, rows, increment, master, filled_s, order_by,
                                     arrow_driver)}
            finally:
                spark.stop()  # before its cluster goes


def load_twice(spark: SparkSession, source_url: str, add: Callable[[int, int], None], workdir: Path, rows: int,
               increment: int, master: str, filled_s: float, order_by: str | None = None,
               arrow_driver: bool = True) -> dict:
    """The first load of the source, then `increment` more rows ingested as one range;
    with `order_by`, the source's rows of one key are ordered by it (the write reduces
    them to the last: the ordered classification, on rows that have one per key)."""
    spark.sparkContext.setLogLevel("ERROR")
    source = SqlTableSource(source_url, "customers", id_column="id", order_by=order_by, arrow_driver=arrow_driver)
    job = IngestionJob("raw_customers", source, AutoIncrementIdPlanner(),
                       TargetTable("raw_customers", ["id"], CUSTOMERS))
    ingestion = RangeIngestion(spark, connect(f"sqlite:///{workdir / 'control_plane.db'}"), job,
                               str(workdir / "warehouse"))
    parallelism = spark.sparkContext.defaultParallelism
    first = timed_load(ingestion, "first-load", source, parallelism)
    add(rows + 1, increment)
    second = timed_load(ingestion, "increment", source, parallelism)
    return {
        "source_rows": rows, "increment_rows": increment, "master": master, "order_by": order_by,
        "driver_memory": spark.conf.get("spark.driver.memory", "1g"),
        "parallelism": parallelism,
        "rows_per_slice": source.rows_per_slice, "fetch_size": source.fetch_size,
        "source_fill_s": round(filled_s, 2), "first_load": first, "increment": second,
        "peak_rss_bytes": peak_rss(spark),
    }


def peak_rss(spark: SparkSession) -> dict:
    """The peak resident memory of this Python driver and of its local JVM (Linux's
    VmHWM of the process `spark-submit` became; absent for a remote driver)."""
    import resource

    peaks = {"python_driver": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}
    gateway = getattr(spark.sparkContext._gateway, "proc", None)
    status = Path(f"/proc/{gateway.pid}/status") if gateway is not None else None
    if status is not None and status.exists():
        for line in status.read_text().splitlines():
            if line.startswith("VmHWM:"):
                peaks["driver_jvm"] = int(line.split()[1]) * 1024
    return peaks


def read_cpu(rows: int, source: str, workdir: Path) -> dict:
    """The CPU seconds of reading the source's `rows` rows as one slice in this process
    (no Spark, the task's work alone), through the ADBC driver and through SQLAlchemy: a
    figure a busy machine disturbs far less than a wall time."""
    import resource
    from dataclasses import replace

    from offset_assets.ranges.sources.sql import spark_type_for
    from offset_assets.ranges.sources.sql_read import SlicedRead, source_engine

    def cpu_s() -> float:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return usage.ru_utime + usage.ru_stime

    with customers_source(source, workdir) as (url, add):
        add(1, rows)
        table = sa.Table("customers", sa.MetaData(), autoload_with=source_engine(url))
        plan = SlicedRead(url=url, table="customers", db_schema=None,
                          columns=tuple((c.name, c.type) for c in table.c),
                          schema=T.StructType([T.StructField(c.name, spark_type_for(c.type)) for c in table.c]),
                          range_column="id", range_type=table.c.id.type, kind="id", bounds=(0, rows),
                          fetch_size=10_000, key_columns=("id",))
        report = {"source": source, "rows": rows}
        for driver, arrow_driver in (("sqlalchemy", False), ("arrow", True)):
            read = replace(plan, arrow_driver=arrow_driver)
            started = cpu_s()
            read_rows = sum(batch.num_rows for batch in read.read_slice(read.slices()[0]))
            seconds = cpu_s() - started
            report[driver] = {"rows": read_rows, "cpu_s": round(seconds, 2),
                              "rows_per_cpu_s": round(read_rows / seconds)}
        return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=5_000_000)
    parser.add_argument("--increment", type=int, default=10_000)
    parser.add_argument("--master", default="local[2]",
                        help="local[N], spark://host:port, or standalone (a throwaway cluster of this machine's cores)")
    parser.add_argument("--out", default=str(OUT))
    parser.add_argument("--source", choices=["sqlite", "postgresql"], default="sqlite",
                        help="a SQLite file, or a table of a throwaway PostgreSQL server (initdb/pg_ctl)")
    parser.add_argument("--sql-driver", choices=["arrow", "sqlalchemy"], default="arrow",
                        help="SqlTableSource(arrow_driver=...): the ADBC driver where it reads exactly, or SQLAlchemy")
    parser.add_argument("--order-by", default=None,
                        help="the source's order_by column (e.g. id): the write keeps a key's last row by it")
    parser.add_argument("--read-cpu", action="store_true",
                        help="only the CPU seconds of one slice of --rows rows read in this process, both ways")
    args = parser.parse_args()
    if args.read_cpu:
        with tempfile.TemporaryDirectory(prefix="bench-ingest-") as workdir:
            print(json.dumps({"commit": git_commit(), **read_cpu(args.rows, args.source, Path(workdir))}, indent=2))
        return
    # A driver of this process: its tasks' Python workers run this interpreter.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    with tempfile.TemporaryDirectory(prefix="bench-ingest-") as workdir:
        report = {"commit": git_commit(), "command": " ".join([".venv/bin/python -m bench.ingest", *sys.argv[1:]]),
                  "cpus": os.cpu_count(), **run(args.rows, args.increment, args.master, Path(workdir),
                                                args.order_by, args.source, args.sql_driver == "arrow")}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
