"""A throwaway story of the engine on a few rows in a folder of its own, with a SQLite
control plane of its own: a first run and incremental runs of a transformation, each
after a changed reference row (Parquet writes and reads, the reverse and filtered joins,
the classification of a write, a commit), and the ingestion of an id range of a small
SQLite table (Spark's Python workers reading the SQL source's slices, the range's
one-pass write). The project's control plane and warehouse are never touched.

Run on a fresh JVM, it makes that JVM load the classes and compile the code every run
goes through, before a pipeline's first run needs them.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType

from offset_assets.control_plane import ControlPlane, connect, database
from offset_assets.engine import IncrementalEngine
from offset_assets.engine.transformation import Transformation, TransformInput
from offset_assets.local_frames import local_frame
from offset_assets.ranges.ingestion import IngestionJob, RangeIngestion, TargetTable
from offset_assets.ranges.planners import AutoIncrementIdPlanner
from offset_assets.ranges.sources.sql import SqlTableSource
from offset_assets.versioned.table import VersionedTable

POSTS = StructType([StructField("post_id", LongType(), False), StructField("user_id", LongType()),
                    StructField("text", StringType())])
USERS = StructType([StructField("id", LongType(), False), StructField("name", StringType())])
ENRICHED = StructType([*POSTS.fields, StructField("author", StringType())])
HOLDER = "startup-story"


def _write(table: VersionedTable, rows: list[tuple]) -> None:
    """A delta of `rows`, as rows the driver holds: written in one pass, as a small run
    writes (`HotDelta.write`)."""
    table.write_delta(local_frame(table.spark, rows, table.schema), holder=HOLDER)


def _enrich(posts: DataFrame, users: DataFrame) -> DataFrame:
    authors = users.select(F.col("id").alias("user_id"), F.col("name").alias("author"))
    return posts.join(authors, on="user_id", how="left").select("post_id", "user_id", "text", "author")


def _ingest_users(spark: SparkSession, plane: ControlPlane, folder: str) -> None:
    """Ingest the id range of a three-row SQLite table into a versioned table."""
    source = Path(folder) / "source.db"
    with sqlite3.connect(source) as conn:
        conn.execute("CREATE TABLE users (id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT)")
        conn.executemany("INSERT INTO users (id, name) VALUES (?, ?)", [(u, f"user{u}") for u in range(1, 4)])
    job = IngestionJob("startup_users", SqlTableSource(f"sqlite:///{source}", "users", id_column="id"),
                       AutoIncrementIdPlanner(), TargetTable("raw_users", ["id"], USERS))
    RangeIngestion(spark, plane, job, folder).run_pending(run_id=HOLDER)


def run_story(spark: SparkSession, folder: str, incremental_runs: int) -> None:
    """The story in `folder` (empty; the caller deletes it): a first run and
    `incremental_runs` runs after it, then the ingestion."""
    url = f"sqlite:///{folder}/control_plane.db"
    plane = connect(url)
    try:
        posts = VersionedTable(spark, plane, "posts", ["post_id"], POSTS, warehouse=folder)
        users = VersionedTable(spark, plane, "users", ["id"], USERS, warehouse=folder)
        enriched = VersionedTable(spark, plane, "enriched", ["post_id"], ENRICHED, warehouse=folder)
        t = Transformation("startup", [TransformInput(posts), TransformInput(users, join_keys={"user_id": "id"})],
                           ["post_id"], [enriched], func=_enrich)
        engine = IncrementalEngine(spark, plane)
        _write(users, [(u, f"user{u}") for u in range(1, 4)])
        _write(posts, [(p, p % 3 + 1, f"post {p}") for p in range(1, 13)])
        engine.run_full(t)
        for run in range(incremental_runs):
            _write(users, [(1, f"renamed {run}")])
            _write(posts, [(2, 2, f"edited {run}")])
            engine.run_full(t)
        _ingest_users(spark, plane, folder)
    finally:
        database.forget(url)
