"""A SQL source's range read in slices by a driver of its own, against a Spark standalone
cluster or a Spark Connect server (a test process already holds a classic local
session, and PySpark allows one driver per process).

Each row read is tagged, in the same Spark task that read its slice (the scan and the
tag are one stage), with the slice (the task's partition) and the JVM the task's Python
worker belongs to: the worker's parent is the PySpark daemon, whose parent is the JVM
running the task. The story prints its findings as JSON.

Usage: python -m tests.sql_slices_story (--master URL | --remote URL) WORKDIR
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import sqlalchemy as sa
from pyspark.sql import functions as F

from offset_assets.ranges.planners import DataRange, RangeKind
from offset_assets.ranges.sources import SqlTableSource
from offset_assets.spark import get_spark_session
from tests.spark_cluster import CLUSTER_APP_CONF

ROWS = 1_000
SLICES = 4


def make_customers(url: str) -> None:
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.execute(sa.text("CREATE TABLE customers (id INTEGER PRIMARY KEY AUTOINCREMENT, "
                             "name TEXT, city TEXT)"))
        conn.execute(sa.text("INSERT INTO customers (name, city) VALUES (:n, :c)"),
                     [{"n": f"name-{i}", "c": f"city-{i % 7}"} for i in range(1, ROWS + 1)])
    engine.dispose()


def task_jvm() -> str:
    """The command of the JVM running this Python worker's task (run on the executor)."""
    daemon = os.getppid()
    jvm = int(Path(f"/proc/{daemon}/stat").read_text().rsplit(")", 1)[1].split()[1])
    command = Path(f"/proc/{jvm}/cmdline").read_bytes().split(b"\0")
    main_class = next((part.decode() for part in command if part.startswith(b"org.apache.spark")), "?")
    return f"{jvm} {main_class}"


def main(args: list[str]) -> None:
    mode, url, workdir = args
    source_url = f"sqlite:///{Path(workdir) / 'source.db'}"
    make_customers(source_url)
    if mode == "--master":
        spark = get_spark_session(master=url, app_name="sql-slices-story", conf=CLUSTER_APP_CONF)
    else:
        spark = get_spark_session(remote=url, app_name="sql-slices-story")
    source = SqlTableSource(source_url, "customers", id_column="id", slices=SLICES)
    batch = source.read_range(spark, DataRange(RangeKind.AUTO_INC_ID, "100", "900"))
    where = F.udf(task_jvm, "string")
    tagged = batch.df.select("id", F.spark_partition_id().alias("slice"), where().alias("jvm")).collect()
    # Without `slices`: one per 250 rows, 4 (the session's default parallelism is 2 or
    # unknown, and 800 rows are far from 10,000 a core).
    by_size = SqlTableSource(source_url, "customers", id_column="id", rows_per_slice=250)
    default_slices = by_size.read_range(spark, DataRange(RangeKind.AUTO_INC_ID, "100", "900")).df
    print(json.dumps({
        "default_slices": default_slices.select(F.spark_partition_id()).distinct().count(),
        "row_count": batch.row_count,
        "end": batch.end,
        "ids": sorted(row.id for row in tagged),
        "rows_per_slice": {str(s): sum(1 for row in tagged if row.slice == s)
                           for s in sorted({row.slice for row in tagged})},
        "task_jvms": sorted({row.jvm for row in tagged}),
        "driver_pid": os.getpid(),
    }))
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1:])
