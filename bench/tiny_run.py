"""The fixed cost of a run on tiny data: what a run costs when its data costs nothing.

The posts/profiles world of `bench/posts_world.py` (40 posts of 7 users) in one warm
`local[2]` session with the test suite's settings (`LOCAL_TEST_CONF`). Before each run
5 posts are edited (one moves between two users) and, for `enriched_posts`, the profile
of a user with one post is renamed: 6 changed keys, batch_size 2, so 3 batches:

- `enriched_posts` (reference input `profiles`: reverse and filtered join), end commit;
- `user_post_stats` (transform key user_id, not the posts' primary key), batch commit.

Per transformation: median seconds of a run, Spark jobs per run (the deterministic
measure: `offset_assets.spark_jobs`), control-plane SQL statements per run (a
SQLAlchemy `before_cursor_execute` listener) and the driver's py4j calls to the JVM
(median; the driver-side cost of building plans): those of the run's own thread, which
do not depend on timing (they grow a little as the tables gain delta folders: a read
lists each in a call), and apart the messages py4j's own thread sends to free the Java
objects Python has freed; the last run's profile (the driver's seconds and the Spark jobs by phase,
`RunResult.profile`). Writes `bench/out/tiny_run.json`.

    .venv/bin/python -m bench.tiny_run               # 7 repetitions after a warm-up
    .venv/bin/python -m bench.tiny_run --repeat 3 --profile /tmp/tiny.prof   # + cProfile of the runs
"""

from __future__ import annotations

import argparse
import cProfile
import json
import statistics
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from pyspark.sql import SparkSession
from sqlalchemy import event

from bench.posts_world import World, make_world
from offset_assets.control_plane import connect
from offset_assets.engine import IncrementalEngine
from offset_assets.engine.transformation import Transformation
from offset_assets.spark import LOCAL_TEST_CONF, get_spark_session
from offset_assets.spark_jobs import count_spark_jobs

ROOT = Path(__file__).resolve().parent.parent
OUT = Path(__file__).parent / "out"
POSTS = 40
BATCH_SIZE = 2


class StatementCounter:
    """Counts the SQL statements the control plane's engine sends while `active`."""

    def __init__(self, engine: object) -> None:
        self.count = 0
        self.active = False
        event.listen(engine, "before_cursor_execute", self._on_execute)

    def _on_execute(self, *_args: object) -> None:
        if self.active:
            self.count += 1


class JvmCallCounter:
    """Counts the driver's round trips to the JVM (py4j commands) while `active`: each
    DataFrame or Column call from Python is at least one. `count`: those the measuring
    thread makes (the same for the same work); `frees`: those py4j's own thread sends to
    release the Java objects Python has freed (when its garbage collector runs, so their
    number varies a little between runs)."""

    def __init__(self, spark: SparkSession) -> None:
        self.count = 0
        self.frees = 0
        self.active = False
        self.thread = threading.get_ident()
        client = spark.sparkContext._gateway._gateway_client
        send = client.send_command

        def counted(*args: object, **kwargs: object) -> object:
            if self.active:
                if threading.get_ident() == self.thread:
                    self.count += 1
                else:
                    self.frees += 1
            return send(*args, **kwargs)

        # Every py4j object calls its client's send_command: the instance attribute wins.
        client.send_command = counted


def git_commit() -> str | None:
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    return done.stdout.strip() or None


def user_of(post: int) -> int:
    # Users 1-6 hold 6-7 posts each; user 7 holds only the last post.
    return 7 if post == POSTS else post % 6 + 1


def changes(world: World, name: str, repetition: int, with_profile: bool) -> None:
    """The traffic before one run: posts 1-4 edited, post 5 edited and moved between
    users 6 and 1 (it marks both for `user_post_stats`) and, for the run with a
    reference input, user 7 renamed (the reverse join marks post 40)."""
    tag = f"{name}-{repetition}"
    edited = [(p, user_of(p), f"{tag}-{p}") for p in (1, 2, 3, 4)]
    edited.append((5, 1 if repetition % 2 else 6, f"{tag}-5"))
    world.write_posts(edited)
    if with_profile:
        world.write_profiles([(7, f"gil-{tag}")])


def measure(spark: SparkSession, counter: StatementCounter, jvm: JvmCallCounter, engine: IncrementalEngine,
            t: Transformation, before: Callable[[int], None], repeat: int, profiler: cProfile.Profile | None) -> dict:
    seconds, jobs, statements, jvm_calls, jvm_frees, keys = [], [], [], [], [], []
    described, profile = "", None
    for repetition in range(repeat + 1):  # the first is the warm-up
        before(repetition)
        counter.count = jvm.count = jvm.frees = 0
        counter.active = jvm.active = True
        if profiler is not None and repetition:
            profiler.enable()
        start = time.perf_counter()
        with count_spark_jobs(spark) as counted:
            result = engine.run_full(t)
        elapsed = time.perf_counter() - start
        if profiler is not None:
            profiler.disable()
        counter.active = jvm.active = False
        assert result.failed_keys == 0, result.errors
        if repetition == 0:
            continue
        seconds.append(elapsed)
        jobs.append(counted.count)
        statements.append(counter.count)
        jvm_calls.append(jvm.count)
        jvm_frees.append(jvm.frees)
        keys.append(result.changed_keys)
        described = counted.describe()
        profile = result.profile
    return {
        "median_s": round(statistics.median(seconds), 3),
        "min_s": round(min(seconds), 3),
        "spark_jobs": sorted(set(jobs)),
        "sql_statements": sorted(set(statements)),
        "jvm_calls_median": statistics.median(jvm_calls),
        "jvm_frees_median": statistics.median(jvm_frees),
        "changed_keys": sorted(set(keys)),
        "batches": -(-max(keys) // BATCH_SIZE),
        "last_run_jobs": described.splitlines(),
        "last_run_profile": profile.as_dict(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--profile", help="write a cProfile of the measured runs to this file")
    parser.add_argument("--out", default=str(OUT / "tiny_run.json"))
    args = parser.parse_args()

    spark = get_spark_session(master="local[2]", app_name="offset-assets-tiny-run", conf=LOCAL_TEST_CONF)
    spark.sparkContext.setLogLevel("ERROR")
    profiler = cProfile.Profile() if args.profile else None
    report: dict = {"commit": git_commit(), "repeat": args.repeat, "posts": POSTS, "batch_size": BATCH_SIZE}
    with tempfile.TemporaryDirectory(prefix="tiny-run-") as tmp:
        plane = connect(f"sqlite:///{tmp}/control_plane.db")
        counter = StatementCounter(plane.engine)
        jvm = JvmCallCounter(spark)
        world = make_world(spark, plane, f"{tmp}/warehouse")
        world.write_profiles([(u, f"user{u}") for u in range(1, 8)])
        world.write_posts([(p, user_of(p), f"t{p}") for p in range(1, POSTS + 1)])
        engine = IncrementalEngine(spark, plane)
        enriched = world.enriched_transformation(batch_size=BATCH_SIZE)
        stats = world.stats_transformation(batch_size=BATCH_SIZE, commit_mode="batch")
        engine.run_full(enriched)
        engine.run_full(stats)
        for name, t, with_profile in (("enriched_posts", enriched, True), ("user_post_stats", stats, False)):
            report[name] = measure(
                spark, counter, jvm, engine, t,
                lambda r, name=name, wp=with_profile: changes(world, name, r, wp),
                args.repeat, profiler,
            )
            print(f"{name}: {report[name]['median_s']} s median, {report[name]['spark_jobs']} Spark jobs, "
                  f"{report[name]['sql_statements']} SQL statements, {report[name]['jvm_calls_median']} JVM calls "
                  f"(+ {report[name]['jvm_frees_median']} frees), "
                  f"{report[name]['changed_keys']} keys")
        engine.run_full(enriched)  # the stats runs' edits, so that both outputs can be checked
        assert {tuple(r) for r in world.enriched.read_actual().drop("sys_from", "sys_to", "sys_op", "update_ts")
                .collect()} == world.expected_enriched()
        assert {tuple(r) for r in world.stats.read_actual().drop("sys_from", "sys_to", "sys_op", "update_ts")
                .collect()} == world.expected_stats()
    if profiler is not None:
        profiler.dump_stats(args.profile)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {out}")
    spark.stop()


if __name__ == "__main__":
    main()
