"""One engine run over Spark Connect, its profile printed as JSON, then the plans that a
small change's run and an ingestion range ask the server to analyse, and a write refused
by the counts it observes: run in a child process by `tests/test_run_profile.py` (a
Connect client switches its process's functions to Connect, and the test process holds
a classic session).

Usage: python -m tests.connect_profile CONNECT_URL DB_URL WAREHOUSE
"""

from __future__ import annotations

import json
import sqlite3
import sys
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType

from bench.posts_world import POSTS, World, make_world
from offset_assets.control_plane import connect
from offset_assets.dagster_adapter.incremental.run_report import run_metadata
from offset_assets.engine import IncrementalEngine
from offset_assets.local_frames import local_rows
from offset_assets.ranges.ingestion import IngestionJob, RangeIngestion, TargetTable
from offset_assets.ranges.planners import AutoIncrementIdPlanner
from offset_assets.ranges.sources import SqlTableSource
from offset_assets.spark import get_spark_session
from offset_assets.versioned.errors import ConflictingStatesError
from tests.remote_story import seed, sorted_rows


@contextmanager
def analyses_counted(spark: SparkSession) -> Iterator[Counter[str]]:
    """The client's requests to analyse a plan (each a round trip), counted by kind."""
    analysed: Counter[str] = Counter()
    analyse = spark.client._analyze

    def counted(method: str, **kwargs: Any) -> Any:
        analysed[method] += 1
        return analyse(method, **kwargs)

    spark.client._analyze = counted
    try:
        yield analysed
    finally:
        spark.client._analyze = analyse


def ingestion_analyses(spark: SparkSession, db_url: str, warehouse: str, held_rows_limit: int) -> dict[str, int]:
    """The analyses of a 40-row id range of a SQL table, after a first range, written by
    Spark (`held_rows_limit` 0) or by the driver."""
    source = Path(warehouse).parent / f"source_{held_rows_limit}.db"
    with sqlite3.connect(source) as conn:
        conn.execute("CREATE TABLE posts (id INTEGER PRIMARY KEY AUTOINCREMENT, user_id INTEGER, text TEXT)")
    schema = StructType([StructField("id", LongType(), False), StructField("user_id", LongType()),
                         StructField("text", StringType())])
    job = IngestionJob(f"raw_posts_load_{held_rows_limit}",
                       SqlTableSource(f"sqlite:///{source}", "posts", id_column="id"),
                       AutoIncrementIdPlanner(), TargetTable(f"raw_posts_{held_rows_limit}", ["id"], schema))
    ingestion = RangeIngestion(spark, connect(db_url), job, warehouse, held_rows_limit=held_rows_limit)
    for first in (0, 40):
        with sqlite3.connect(source) as conn:
            conn.executemany("INSERT INTO posts (user_id, text) VALUES (?, ?)",
                             [(k % 7, f"t{k}") for k in range(first, first + 40)])
        with analyses_counted(spark) as analysed:
            (done,) = ingestion.run_pending()
    assert done.rows_read == 40, done
    return dict(analysed)


def refused_conflict(spark: SparkSession, world: World) -> dict[str, Any]:
    """A one-pass write of two states of post 11 (a list: over Spark Connect a local
    relation, whose rows the client counts): its counts come back in the write's reply,
    and they refuse it; nothing of it is kept."""
    before = sorted_rows(world.posts.read_actual())
    hot = world.posts.open_delta(holder="connect-profile")
    try:
        hot.write(spark.createDataFrame([(11, 1, "x"), (11, 1, "y")], POSTS), last=True)
        error = None
    except ConflictingStatesError as refused:
        error = {"keys": refused.keys, "message": str(refused)}
    finally:
        hot.rollback()
    return {"error": error, "unchanged": sorted_rows(world.posts.read_actual()) == before}


def local_rows_over_connect(spark: SparkSession) -> dict[str, int | None]:
    """What the client counts of frames built from lists, without asking the server."""
    listed = spark.createDataFrame([(11, 1, "x"), (12, 1, "y"), (13, 2, "z")], POSTS)
    with analyses_counted(spark) as analysed:
        counted = {"list": local_rows(listed), "filtered": local_rows(listed.where("user_id = 1")),
                   "union": local_rows(listed.unionByName(listed)),
                   "projected": local_rows(listed.withColumn("sys_op", F.lit(0)))}
    return {**counted, "analysed": sum(analysed.values())}


def main(url: str, db_url: str, warehouse: str) -> None:
    spark = get_spark_session(remote=url)
    world = make_world(spark, connect(db_url), warehouse)
    seed(world)
    engine = IncrementalEngine(spark, world.posts.plane)
    result = engine.run_full(world.enriched_transformation())
    metadata = run_metadata(result, [world.enriched.name])
    # A small change: one post edited, one profile renamed (3 keys).
    world.write_posts([(11, 1, "b2")])
    world.write_profiles([(3, "cyrus")])
    with analyses_counted(spark) as analysed:
        small = engine.run_full(world.enriched_transformation())
    print(json.dumps({
        "processed_keys": result.processed_keys,
        "duration_s": result.duration_s,
        "spark_jobs": result.spark_jobs,
        "profile": result.profile.as_dict(),
        "metadata": {name: metadata[name].value for name in metadata if name.startswith("profile")},
        "summary": result.summary(),
        "small_change": {"processed_keys": small.processed_keys, "analysed": dict(analysed)},
        "ingestion_range_analysed": ingestion_analyses(spark, db_url, warehouse, held_rows_limit=0),
        "held_ingestion_range_analysed": ingestion_analyses(spark, db_url, warehouse, held_rows_limit=1_000),
        "refused_conflict": refused_conflict(spark, world),
        "local_rows": local_rows_over_connect(spark),
    }))


if __name__ == "__main__":
    main(*sys.argv[1:])
