"""A history of inserts, updates and deletes over several deltas (a compaction in the
middle), read through SQL with every system-time clause and through `VersionedTable`'s
own reads: `tests/test_reading_sql.py` runs it on the test session, and
`tests/test_reading_connect.py` as a Spark Connect client in a child process (a test
process holds a classic session, and a Connect client would switch its functions).

Usage: python -m tests.reading_story COMMAND --remote URL DB_URL WAREHOUSE
COMMAND:
  clauses  every clause through SQL and the same read through VersionedTable, as JSON
  views    every table a global temp view (as `make dev` keeps them), read from another
           session of the same server, before and after a commit
  dev_views  `make dev`'s thread, started before the control plane exists
"""

from __future__ import annotations

import datetime
import json
import sys
import threading
import time
from functools import reduce
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType

from assets_defs.dev import serve_global_views
from offset_assets.control_plane import connect
from offset_assets.local_frames import local_frame
from offset_assets.reading.tables import VersionedTables
from offset_assets.reading.views import GlobalViews
from offset_assets.spark import get_spark_session
from offset_assets.versioned.compaction import compact
from offset_assets.versioned.table import VersionedTable

POSTS = StructType([StructField("post_id", LongType(), False), StructField("user_id", LongType()),
                    StructField("text", StringType())])
PROFILES = StructType([StructField("id", LongType(), False), StructField("name", StringType())])
# Delta by delta: (post_id, user_id, text, sys_op). Compaction after the third.
POSTS_HISTORY = [
    [(1, 1, "a", 0), (2, 1, "b", 0), (3, 2, "c", 0), (4, 2, "d", 0), (5, 3, "e", 0)],
    [(1, 1, "a2", 0), (2, None, None, 1), (6, 3, "f", 0)],
    [(3, None, None, 1), (4, 3, "d2", 0)],
    [(2, 2, "b again", 0), (1, 1, "a3", 0)],
    [(6, None, None, 1), (7, 1, "g", 0)],
]
PROFILES_HISTORY = [[(1, "ann", 0), (2, "bob", 0), (3, "cy", 0)], [(2, "bobby", 0)]]
COMPACT_AFTER = 3
POSTS_OP = StructType([*POSTS.fields, StructField("sys_op", LongType())])
PROFILES_OP = StructType([*PROFILES.fields, StructField("sys_op", LongType())])
# STARTED IN / FINISHED IN ranges: one delta, across the compaction, the whole history.
RANGES = [(2, 2), (3, 4), (1, 5)]


def write_history(spark: SparkSession, db_url: str, warehouse: str, posts_deltas: int = len(POSTS_HISTORY),
                  ) -> tuple[VersionedTable, VersionedTable]:
    """The tables `posts` (its first `posts_deltas` deltas) and `profiles`."""
    plane = connect(db_url)
    posts = VersionedTable(spark, plane, "posts", ["post_id"], POSTS, warehouse=warehouse)
    profiles = VersionedTable(spark, plane, "profiles", ["id"], PROFILES, warehouse=warehouse)
    for n, rows in enumerate(POSTS_HISTORY[:posts_deltas], start=1):
        posts.write_delta(local_frame(spark, rows, POSTS_OP))
        if n == COMPACT_AFTER:
            compact(posts)
    for rows in PROFILES_HISTORY:
        profiles.write_delta(local_frame(spark, rows, PROFILES_OP))
    return posts, profiles


def rows(frame: DataFrame) -> list[list[Any]]:
    """A frame's rows as lists, in a stable order."""
    return sorted((list(row) for row in frame.collect()), key=repr)


def utc_text(ts: float) -> str:
    return datetime.datetime.fromtimestamp(ts, datetime.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")


def json_rows(frames: list[DataFrame]) -> list[list[dict[str, Any]]]:
    """Each frame's rows as JSON objects (null fields left out), sorted: all frames
    collected in one Spark job."""
    tagged = [frame.selectExpr(f"{i} AS _frame", "to_json(struct(*)) AS _row") for i, frame in enumerate(frames)]
    collected: list[list[str]] = [[] for _ in frames]
    for row in reduce(DataFrame.unionByName, tagged).collect():
        collected[row._frame].append(row._row)
    return [[json.loads(text) for text in sorted(texts)] for texts in collected]


def clause_reads(spark: SparkSession, db_url: str, warehouse: str) -> dict[str, list]:
    """{query: [rows through SQL, rows through VersionedTable]} for every clause over the
    history (as of deltas before, at and after the compaction; times before the first
    commit, between two, across the compaction, after the last; ranges of one delta,
    across the compaction and the whole history; ranges of commit times: two deltas' own
    times, around the whole history, and a moment between two commits, which holds none),
    a join, and the actual state."""
    posts, profiles = write_history(spark, db_url, warehouse)
    tables = VersionedTables(spark, db_url)
    times = [posts.delta(n).commit_ts for n in range(1, len(POSTS_HISTORY) + 1)]
    compared: dict[str, tuple[DataFrame, DataFrame]] = {}
    compared["SELECT * FROM posts"] = (tables.sql("SELECT * FROM posts"), posts.read_actual())
    for n in (0, 2, 3, 4, 5):
        query = f"SELECT * FROM posts FOR SYSTEM_TIME AS OF DELTA_NUM {n}"
        compared[query] = (tables.sql(query), posts.read_actual(as_of_delta=n))
    for moment in (times[0] - 60, (times[1] + times[2]) / 2, (times[2] + times[3]) / 2, times[-1] + 60):
        query = f"SELECT * FROM posts FOR SYSTEM_TIME AS OF '{utc_text(moment)}'"
        compared[query] = (tables.sql(query), posts.read_as_of_timestamp(moment))
    for d1, d2 in RANGES:
        query = f"SELECT * FROM posts FOR SYSTEM_TIME STARTED IN ({d1}, {d2})"
        compared[query] = (tables.sql(query), posts.read_started_in(d1, d2))
        query = f"SELECT * FROM posts FOR SYSTEM_TIME FINISHED IN ({d1}, {d2})"
        compared[query] = (tables.sql(query), posts.read_finished_in(d1, d2))
    between = utc_text((times[0] + times[1]) / 2)
    for first, last, deltas in ((utc_text(times[1]), utc_text(times[2]), (2, 3)),
                                (utc_text(times[0] - 60), utc_text(times[-1] + 60), (1, 5)), (between, between, None)):
        for clause, read in (("STARTED", posts.reader.started_in), ("FINISHED", posts.reader.finished_in)):
            query = f"SELECT * FROM posts FOR SYSTEM_TIME {clause} TS ('{first}', '{last}')"
            compared[query] = (tables.sql(query), read(posts.catalog.committed("posts")[deltas[0] - 1:deltas[1]]
                                                       if deltas else []))
    old, names = posts.read_actual(as_of_delta=2).alias("p"), profiles.read_actual().alias("r")
    query = ("SELECT p.post_id, p.text, profiles.name FROM posts FOR SYSTEM_TIME AS OF DELTA_NUM 2 AS p "
             "LEFT JOIN profiles ON p.user_id = profiles.id")
    compared[query] = (tables.sql(query), old.join(names, F.col("p.user_id") == F.col("r.id"), "left")
                       .select("p.post_id", "p.text", "r.name"))
    read = json_rows([frame for pair in compared.values() for frame in pair])
    return {query: read[2 * i:2 * i + 2] for i, query in enumerate(compared)}


def global_views(spark: SparkSession, remote: str, db_url: str, warehouse: str) -> dict[str, Any]:
    """Every table a global temp view (`GlobalViews`, as `make dev` keeps them), read by
    another session of the same server (a `pyspark --remote` client); a commit, then the
    views refreshed and read again."""
    posts, _profiles = write_history(spark, db_url, warehouse, posts_deltas=1)
    views = GlobalViews(VersionedTables(spark, db_url))
    other = SparkSession.builder.remote(remote).create()

    def seen() -> list[list[dict[str, Any]]]:
        return json_rows([other.sql(f"SELECT * FROM global_temp.{name}") for name in ("posts", "profiles")])

    told: dict[str, Any] = {"refreshed": views.refresh(), "registered": dict(views.registered), "seen": seen(),
                            "expected": json_rows([posts.read_actual(), _profiles.read_actual()]),
                            "unchanged": views.refresh()}
    posts.write_delta(local_frame(spark, POSTS_HISTORY[1], POSTS_OP))
    told.update(refreshed_after_commit=views.refresh(), registered_after_commit=dict(views.registered),
                posts_after_commit=seen()[0], expected_after_commit=json_rows([posts.read_actual()])[0])
    for name in ("posts", "profiles"):  # the server outlives this story
        other.catalog.dropGlobalTempView(name)
    other.stop()
    return told


def dev_views(spark: SparkSession, remote: str, db_url: str, warehouse: str) -> dict[str, Any]:
    """`make dev`'s thread (`assets_defs.dev.serve_global_views`) started before any
    control plane exists (OFFSET_ASSETS_DB_URL names one that does not), then the tables
    written: what another session of the server sees in `global_temp.posts` once the
    thread has registered it."""
    for name in ("posts", "profiles"):  # an earlier story's views on the same server
        spark.catalog.dropGlobalTempView(name)
    stop = threading.Event()
    server = threading.Thread(target=serve_global_views, args=(remote, stop, 0.2), daemon=True)
    server.start()
    other = SparkSession.builder.remote(remote).create()
    try:
        posts, _profiles = write_history(spark, db_url, warehouse, posts_deltas=1)
        (expected,) = json_rows([posts.read_actual()])
        # The thread may register the view before the delta commits (empty), then again.
        deadline, seen = time.monotonic() + 300, None
        while seen != expected and time.monotonic() < deadline:
            time.sleep(0.2)
            if other.catalog.tableExists("global_temp.posts"):
                (seen,) = json_rows([other.sql("SELECT * FROM global_temp.posts")])
    finally:
        stop.set()
        server.join()
        other.stop()
    return {"seen": seen, "expected": expected, "thread_ended": not server.is_alive()}


def main(command: str, flag: str, url: str, db_url: str, warehouse: str) -> None:
    assert flag == "--remote"
    spark = get_spark_session(remote=url)
    if command == "clauses":
        print(json.dumps(clause_reads(spark, db_url, warehouse)))
    elif command == "views":
        print(json.dumps(global_views(spark, url, db_url, warehouse)))
    elif command == "dev_views":
        print(json.dumps(dev_views(spark, url, db_url, warehouse)))
    else:
        raise SystemExit(f"unknown command {command!r}")


if __name__ == "__main__":
    main(*sys.argv[1:])
