"""The engine story, run by a process of its own against a Spark cluster or a Spark
Connect server, and the same story on any session for comparison.

A test process holds one classic local session for the whole pytest run, and PySpark
allows one driver per process (a Connect client also switches the process's functions
to Connect): so the cluster and Connect stories run here, in a child process, and print
their results as JSON for the test to compare with the local run.

Usage: python -m tests.remote_story COMMAND (--master URL | --remote URL) DB_URL WAREHOUSE [MARKER]
COMMAND:
  story    the engine story; with MARKER, its first run is slow (a Python UDF sleeping
           on the executors) and writes MARKER once under way, so that a test can kill
           an executor in the middle of it
  crash    seed, then SIGKILL this process inside the commit of a run (output files
           written, nothing committed)
  recover  one run of the enriched transformation and its outputs
  timestamps  runs of a transformation keyed by timestamps that the process's clock
           shows as one (`timestamp_keys_story`)
"""

from __future__ import annotations

import datetime
import json
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import DoubleType, LongType, StringType, StructField, StructType, TimestampType

from bench.posts_world import World, enrich, make_world, rows_of
from offset_assets.control_plane import connect
from offset_assets.control_plane.delta_catalog import DeltaCatalog
from offset_assets.engine import IncrementalEngine
from offset_assets.engine.transformation import Transformation, TransformInput
from offset_assets.spark import get_spark_session
from offset_assets.versioned.layout import WarehousePathError
from offset_assets.versioned.table import VersionedTable
from tests.spark_cluster import CLUSTER_APP_CONF

# Two instants that New York's clock shows as one time (01:30:05 on 1 November 2026).
REPEATED_HOUR = tuple(datetime.datetime(2026, 11, 1, hour, 30, 5, tzinfo=datetime.UTC) for hour in (5, 6))
INITIAL_PROFILES = [(1, "ann"), (2, "bob"), (3, "cy")]
INITIAL_POSTS = [(10, 1, "a"), (11, 1, "b"), (12, 2, "c"), (13, 2, "d"), (14, 3, "e"), (15, 3, "f")]


def sorted_rows(df: DataFrame) -> list[list[Any]]:
    return sorted([list(row) for row in rows_of(df)], key=repr)


def seed(world: World) -> None:
    world.write_profiles(INITIAL_PROFILES)
    world.write_posts(INITIAL_POSTS)


def slow_enrich(marker: str) -> Callable[[DataFrame, DataFrame], DataFrame]:
    """`enrich`, but every row costs two seconds on an executor, and `marker` is written
    when the function is called (the run is under way)."""

    @F.udf(StringType())
    def slow_text(text: str) -> str:
        time.sleep(2.0)
        return text

    def enrich_slowly(posts: DataFrame, profiles: DataFrame) -> DataFrame:
        Path(marker).write_text("running")
        return enrich(posts.withColumn("text", slow_text("text")), profiles)

    return enrich_slowly


def _cause(error: str) -> str:
    """The line of an error text that names its cause (Python worker errors put it last)."""
    lines = [line for line in error.splitlines() if line.strip()]
    return next((line for line in reversed(lines) if "Error" in line), lines[0])[:300]


def engine_story(spark: SparkSession, db_url: str, warehouse: str, marker: str | None = None) -> dict[str, Any]:
    """A relative warehouse refused first; then the first run, a round of changes
    (insert, update, delete, a profile rename), the second run: what each run processed,
    the phases of the second run of `enrich_posts` that started Spark jobs (None where
    they are not counted, over Spark Connect), and the final outputs, row for row."""
    refused = relative_warehouse(spark, db_url)
    world = make_world(spark, connect(db_url), warehouse)
    engine = IncrementalEngine(spark, world.posts.plane)
    seed(world)
    first_enriched = world.enriched_transformation(**({"func": slow_enrich(marker)} if marker else {}))
    first_run = engine.run_full(first_enriched)
    first = [first_run.processed_keys, engine.run_full(world.stats_transformation()).processed_keys]
    world.write_posts([(16, 1, "new"), (11, 1, "b2")], deletes=[13])
    world.write_profiles([(3, "cyrus")])
    second_enriched = engine.run_full(world.enriched_transformation())
    second = [second_enriched.processed_keys, engine.run_full(world.stats_transformation()).processed_keys]
    profile = second_enriched.profile
    jobs_by_phase = {phase.name: phase.jobs for phase in profile.phases if phase.jobs} \
        if profile.jobs_counted else None
    third = engine.run_full(world.enriched_transformation()).processed_keys
    return {
        "processed": {"first": first, "second": second, "third": third},
        "second_jobs_by_phase": jobs_by_phase,
        "first_errors": [_cause(error) for error in first_run.errors],
        "enriched": sorted_rows(world.enriched.read_actual()),
        "stats": sorted_rows(world.stats.read_actual()),
        "expected_enriched": sorted(map(list, world.expected_enriched()), key=repr),
        "expected_stats": sorted(map(list, world.expected_stats()), key=repr),
        "hot": [t.hot() is not None for t in (world.enriched, world.stats)],
        "relative_warehouse": refused,
    }


def crash_in_commit(spark: SparkSession, db_url: str, warehouse: str) -> None:
    """Seed, then run `enrich_posts` and die (SIGKILL) when it commits: its output
    files are written, nothing is committed."""
    world = make_world(spark, connect(db_url), warehouse)
    seed(world)
    DeltaCatalog.commit = lambda *args, **kwargs: os.kill(os.getpid(), signal.SIGKILL)
    IncrementalEngine(spark, world.posts.plane).run_full(world.enriched_transformation())
    sys.exit(3)  # the kill point was never reached


def recover(spark: SparkSession, db_url: str, warehouse: str) -> dict[str, Any]:
    world = make_world(spark, connect(db_url), warehouse)
    committed_before = sorted_rows(world.enriched.read_actual())
    engine = IncrementalEngine(spark, world.posts.plane)
    processed = engine.run_full(world.enriched_transformation()).processed_keys
    return {
        "committed_before": committed_before,
        "processed": processed,
        "processed_again": engine.run_full(world.enriched_transformation()).processed_keys,
        "enriched": sorted_rows(world.enriched.read_actual()),
        "expected_enriched": sorted(map(list, world.expected_enriched()), key=repr),
        "hot": world.enriched.hot() is not None,
    }


def relative_warehouse(spark: SparkSession, db_url: str) -> dict[str, Any]:
    """Tables on a relative warehouse path: the error, and what was written before it."""
    plane = connect(db_url)
    try:
        make_world(spark, plane, "relative/warehouse")
    except WarehousePathError as exc:
        return {"error": str(exc), "tables": DeltaCatalog(plane).tables(),
                "written": Path("relative").exists()}
    return {"error": None}


def _copy(**frames: DataFrame) -> DataFrame:
    (frame,) = frames.values()
    return frame


def timestamp_keys_story(spark: SparkSession, db_url: str, warehouse: str) -> dict[str, Any]:
    """Two readings whose times the process's clock shows as one (`REPEATED_HOUR`, run
    with TZ=America/New_York), keyed by the time alone and with a
    sensor id, each key a batch of its own: what each run processed and the instants
    (microseconds since the epoch) and values stored."""
    first, second = REPEATED_HOUR
    schema = StructType([StructField("sensor", LongType(), False), StructField("at", TimestampType(), False),
                         StructField("value", DoubleType())])
    plane = connect(db_url)
    told: dict[str, Any] = {}
    for keys in (["sensor", "at"], ["at"]):
        name = "_".join(keys)
        readings = VersionedTable(spark, plane, f"readings_{name}", keys, schema, warehouse=warehouse)
        copied = VersionedTable(spark, plane, f"copied_{name}", keys, schema, warehouse=warehouse)
        readings.write_delta(spark.createDataFrame([(1, first, 1.0), (1, second, 2.0)], schema))
        t = Transformation(f"copy_{name}", [TransformInput(readings)], keys, [copied], _copy, batch_size=1)
        engine = IncrementalEngine(spark, plane)
        runs = [engine.run_full(t)]
        readings.write_delta(spark.createDataFrame([(1, second, 2.5)], schema))
        runs.append(engine.run_full(t))
        stored = copied.read_actual().selectExpr("unix_micros(at)", "value").collect()
        told[name] = {"processed": [run.processed_keys for run in runs],
                      "errors": [_cause(error) for run in runs for error in run.errors],
                      "stored": sorted([list(row) for row in stored])}
    return told


def session(flag: str, url: str) -> SparkSession:
    if flag == "--remote":
        return get_spark_session(remote=url)
    return get_spark_session(master=url, app_name="offset-assets-cluster-tests", conf=CLUSTER_APP_CONF)


def main(command: str, flag: str, url: str, db_url: str, warehouse: str, *rest: str) -> None:
    spark = session(flag, url)
    if command == "story":
        print(json.dumps(engine_story(spark, db_url, warehouse, *rest)))
    elif command == "crash":
        crash_in_commit(spark, db_url, warehouse)
    elif command == "recover":
        print(json.dumps(recover(spark, db_url, warehouse)))
    elif command == "timestamps":
        print(json.dumps(timestamp_keys_story(spark, db_url, warehouse)))
    else:
        raise SystemExit(f"unknown command {command!r}")


if __name__ == "__main__":
    main(*sys.argv[1:])
