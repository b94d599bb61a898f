"""Ingestion of a SQL source by id ranges: the first load of a large table, then a small
increment.

A SQLite source `customers(id INTEGER PRIMARY KEY AUTOINCREMENT, name, city)` of `--rows`
rows is ingested with `IngestionJob` + `SqlTableSource` + `AutoIncrementIdPlanner` (its
default ranges of at most 1,000,000 ids) into a versioned table, in one `local[2]`
session (unless `--master`: `standalone` starts a throwaway standalone cluster of one
worker with this machine's cores, the driver keeping Spark's default 1g); then
`--increment` rows are added and ingested as one more range. Reported per load: seconds,
ranges, rows and rows per second (source read, the write's classification against the
table and the commit, end to end), its Spark jobs and the seconds spent in them and
outside, and per range the rows, the slices the source was read in and the range's
profile (driver time and Spark jobs per phase). Writes `docs/bench/ingest/ingest.json`.

    .venv/bin/python -m bench.ingest                          # 5,000,000 rows + 10,000
    .venv/bin/python -m bench.ingest --rows 1000000 --out /tmp/ingest_1m.json
    .venv/bin/python -m bench.ingest --master standalone --out docs/bench/ingest/cluster.json
    .venv/bin/python -m bench.ingest --rows 1000000 --order-by id --out /tmp/ingest_ordered.json
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pyspark.sql import SparkSession
from pyspark.sql import types as T

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


def run(rows: int, increment: int, master: str, workdir: Path, order_by: str | None = None) -> dict:
    source_db = workdir / "source.db"
    started = time.perf_counter()
    add_customers(source_db, 1, rows)
    filled_s = time.perf_counter() - started
    (workdir / "warehouse").mkdir()
    with spark_master(master) as (url, cluster_conf):
        spark = get_spark_session(master=url, app_name="bench-ingest",
                                  conf={"spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false",
                                        **cluster_conf})
        try:
            return load_twice(spark, source_db, workdir, rows, increment, master, filled_s, order_by)
        finally:
            spark.stop()  # before its cluster goes


def load_twice(spark: SparkSession, source_db: Path, workdir: Path, rows: int, increment: int, master: str,
               filled_s: float, order_by: str | None = None) -> dict:
    """The first load of the source, then `increment` more rows ingested as one range;
    with `order_by`, the source's rows of one key are ordered by it (the write reduces
    them to the last: the ordered classification, on rows that have one per key)."""
    spark.sparkContext.setLogLevel("ERROR")
    source = SqlTableSource(f"sqlite:///{source_db}", "customers", id_column="id", order_by=order_by)
    job = IngestionJob("raw_customers", source, AutoIncrementIdPlanner(),
                       TargetTable("raw_customers", ["id"], CUSTOMERS))
    ingestion = RangeIngestion(spark, connect(f"sqlite:///{workdir / 'control_plane.db'}"), job,
                               str(workdir / "warehouse"))
    parallelism = spark.sparkContext.defaultParallelism
    first = timed_load(ingestion, "first-load", source, parallelism)
    add_customers(source_db, rows + 1, increment)
    second = timed_load(ingestion, "increment", source, parallelism)
    return {
        "source_rows": rows, "increment_rows": increment, "master": master, "order_by": order_by,
        "driver_memory": spark.conf.get("spark.driver.memory", "1g"),
        "parallelism": parallelism,
        "rows_per_slice": source.rows_per_slice, "fetch_size": source.fetch_size,
        "source_fill_s": round(filled_s, 2), "first_load": first, "increment": second,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=5_000_000)
    parser.add_argument("--increment", type=int, default=10_000)
    parser.add_argument("--master", default="local[2]",
                        help="local[N], spark://host:port, or standalone (a throwaway cluster of this machine's cores)")
    parser.add_argument("--out", default=str(OUT))
    parser.add_argument("--order-by", default=None,
                        help="the source's order_by column (e.g. id): the write keeps a key's last row by it")
    args = parser.parse_args()
    # A driver of this process: its tasks' Python workers run this interpreter.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    with tempfile.TemporaryDirectory(prefix="bench-ingest-") as workdir:
        report = {"commit": git_commit(), "command": " ".join([".venv/bin/python -m bench.ingest", *sys.argv[1:]]),
                  "cpus": os.cpu_count(), **run(args.rows, args.increment, args.master, Path(workdir),
                                                args.order_by)}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
