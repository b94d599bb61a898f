"""A SQL source's id range larger than its driver's memory, ingested by a driver of its
own on a Spark standalone cluster (a test process already holds a classic local
session, and PySpark allows one driver per process).

The driver's JVM heap is `DRIVER_MEMORY`, half the range or less; Spark refuses a heap
below 450 MB for its memory manager's reserve, so `spark.testing.memory` tells the
manager it has the floor (the driver runs no task: its manager lends nothing). Were
the range's rows collected on the driver (its Python holding them, then handing them
to the JVM), neither process could hold them; and the driver accepts at most
`MAX_RESULT_SIZE` of task results, so no job can bring them back to it either. The
table's contents are checked on the executors (aggregates, not rows) against what the
source holds. The story prints its findings as JSON.

Usage: python -m tests.small_driver_story MASTER_URL SOURCE_URL WORKDIR
"""

from __future__ import annotations

import json
import resource
import sys
from pathlib import Path

import sqlalchemy as sa
from pyspark.sql import functions as F
from pyspark.sql import types as T

from offset_assets.control_plane import connect
from offset_assets.ranges.ingestion import IngestionJob, RangeIngestion, TargetTable
from offset_assets.ranges.planners import AutoIncrementIdPlanner
from offset_assets.ranges.sources import SqlTableSource
from offset_assets.spark import get_spark_session
from offset_assets.versioned.table import VersionedTable
from tests.spark_cluster import CLUSTER_APP_CONF

DRIVER_MEMORY = "160m"
MAX_RESULT_SIZE = "32m"
ROWS = 36_000
PAYLOAD_CHARS = 10_000  # ROWS documents: 360 MB of text
FETCH_SIZE = 500  # rows per Arrow batch an executor's Python worker builds: 5 MB of payload
SLICES = 4

DOCUMENTS = T.StructType([
    T.StructField("id", T.LongType(), False),
    T.StructField("body", T.StringType()),
])


def body(document_id: int) -> str:
    """A document's text: PAYLOAD_CHARS characters, different for every id."""
    return f"{document_id:010d}" * (PAYLOAD_CHARS // 10)


def make_documents(url: str, rows: int = ROWS) -> None:
    """The source table, written a thousand rows at a time (this process never holds it)."""
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.execute(sa.text("CREATE TABLE documents (id INTEGER PRIMARY KEY AUTOINCREMENT, body TEXT)"))
        for first in range(1, rows + 1, 1000):
            conn.execute(sa.text("INSERT INTO documents (id, body) VALUES (:i, :b)"),
                         [{"i": i, "b": body(i)} for i in range(first, min(first + 1000, rows + 1))])
    engine.dispose()


def main(args: list[str]) -> None:
    master, source_url, workdir = args
    spark = get_spark_session(master=master, app_name="small-driver-story", conf={
        **CLUSTER_APP_CONF, "spark.driver.memory": DRIVER_MEMORY,
        "spark.testing.memory": str(512 * 1024 * 1024), "spark.driver.maxResultSize": MAX_RESULT_SIZE})
    plane = connect(f"sqlite:///{Path(workdir) / 'control_plane.db'}")
    warehouse = str(Path(workdir) / "warehouse")
    source = SqlTableSource(source_url, "documents", id_column="id", fetch_size=FETCH_SIZE, slices=SLICES)
    job = IngestionJob("documents", source, AutoIncrementIdPlanner(),
                       TargetTable("documents", ["id"], DOCUMENTS))
    # The Python's peak before the range: what the range's run adds to it is what this
    # process held of the range (its own baseline, imports and session, is not the range's).
    peak_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    results = RangeIngestion(spark, plane, job, warehouse).run_pending()
    peak_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

    table = VersionedTable(spark, plane, "documents", ["id"], DOCUMENTS, warehouse=warehouse)
    expected_body = F.repeat(F.lpad(F.col("id").cast("string"), 10, "0"), PAYLOAD_CHARS // 10)
    (found,) = table.read_actual().agg(
        F.count("*").alias("rows"), F.countDistinct("id").alias("ids"),
        F.min("id").alias("min_id"), F.max("id").alias("max_id"),
        F.sum(F.length("body")).alias("chars"),
        F.sum((F.col("body") != expected_body).cast("int")).alias("wrong_bodies"),
    ).collect()
    print(json.dumps({
        "ranges": [(r.data_range.start, r.data_range.end, r.rows_read, r.rows_upserted) for r in results],
        "found": found.asDict(),
        "driver_heap_bytes": spark.sparkContext._jvm.java.lang.Runtime.getRuntime().maxMemory(),
        "driver_python_peak_rss_bytes": peak_after,
        "driver_python_peak_growth_bytes": peak_after - peak_before,
    }))
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1:])
