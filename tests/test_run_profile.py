"""A run's profile: where its time went (the driver's seconds by phase) and the Spark
jobs each phase started, in the run's result, its debug log and its Dagster metadata."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import dagster as dg
import pytest

from bench.posts_world import make_world
from offset_assets.control_plane import connect
from offset_assets.dagster_adapter import OffsetStore
from offset_assets.engine import IncrementalEngine
from offset_assets.local_frames import local_frame
from offset_assets.run_profile import OTHER, PHASES, TAG_PREFIX, Profiler
from offset_assets.spark import temporary_setting
from offset_assets.spark_jobs import count_spark_jobs
from offset_assets.versioned.evaluation import CODEGEN_FACTORY_MODE
from tests.dagster_resources import engine_resources
from tests.spark_cluster import run_client
from tests.test_dagster_assets import enriched_asset, materialization, seed, user_post_stats_asset
from tests.test_engine_job_budget import SRC, copy_world

ROOT = Path(__file__).resolve().parent.parent


def changed_copy_world(spark, sqlite_url, warehouse):
    """A copy transformation run once over 50 rows, then 10 rows changed and 5 added.
    The engine leaves even rows this few to Spark (`held_rows_limit=0`; the driver would
    read and write them itself): the profile's phases are those of Spark's path."""
    plane, src, dst, copy = copy_world(spark, sqlite_url, warehouse)
    src.write_delta(local_frame(spark, [(str(i), i) for i in range(50)], SRC))
    engine = IncrementalEngine(spark, plane, held_rows_limit=0)
    engine.run_full(copy)
    src.write_delta(local_frame(spark, [(str(i), i * 10) for i in range(40, 55)], SRC))
    return engine, copy


def test_a_runs_profile_names_its_phases_and_counts_the_jobs_count_spark_jobs_counts(
        spark, sqlite_url, warehouse):
    engine, copy = changed_copy_world(spark, sqlite_url, warehouse)

    with count_spark_jobs(spark) as jobs:
        result = engine.run_full(copy)

    profile = result.profile
    assert result.changed_keys == 15
    assert [phase.name for phase in profile.phases] == [*PHASES, OTHER]
    assert profile.jobs_counted and profile.not_counted is None
    assert profile.job_count == result.spark_jobs == jobs.count > 0
    assert [job.job_id for job in profile.jobs] == [job.job_id for job in jobs.jobs]
    # Every job in exactly one phase; the changed index, the reads and the write start jobs.
    assert sum(phase.jobs for phase in profile.phases) == jobs.count
    assert {job.phase for job in profile.jobs} <= {*PHASES, OTHER}
    for name in ("changed_index", "input_reads", "output_write"):
        assert profile.phase(name).jobs > 0, profile.describe()
    assert profile.phase("open").jobs == 0  # the control plane alone
    assert all(job.name and job.seconds is not None and job.seconds >= 0 for job in profile.jobs)
    # Each phase's own time: none negative, and together the run's wall time, no more.
    assert all(phase.seconds >= 0 for phase in profile.phases)
    assert sum(phase.seconds for phase in profile.phases) == pytest.approx(profile.wall_s)
    assert profile.wall_s <= result.duration_s
    assert f"{jobs.count} Spark job(s)" in result.summary()
    # The driver JVM's own time: a small run evaluates interpreted, so compiles no code.
    jvm = profile.driver_jvm
    assert jvm is not None and jvm.gc_s >= 0 and (jvm.classes_compiled, jvm.compile_s) == (0, 0)
    # The JVM's CPU: its threads' work for the run (Linux's /proc, in ticks of 10 ms), at least its collections'.
    assert jvm.cpu_s is not None and jvm.cpu_s > 0 and jvm.cpu_s + 0.02 >= jvm.gc_s and jvm.jit_s >= 0
    assert f"Driver JVM during the run: {jvm}." in profile.markdown() and str(jvm) in profile.describe()
    assert str(jvm).startswith(f"CPU {jvm.cpu_s:.3f} s, JIT compilation {jvm.jit_s:.3f} s, garbage collection ")
    assert profile.as_dict()["driver_jvm"] == {"cpu_s": round(jvm.cpu_s, 4), "jit_s": round(jvm.jit_s, 4),
                                               "gc_s": round(jvm.gc_s, 4), "classes_compiled": 0, "compile_s": 0}


def test_a_run_that_compiles_its_expressions_shows_the_code_it_compiled_in_its_profile(
        spark, sqlite_url, warehouse):
    plane, src, _dst, copy = copy_world(spark, sqlite_url, warehouse)
    src.write_delta(local_frame(spark, [(str(i), i) for i in range(50)], SRC))
    compiling = IncrementalEngine(spark, plane, small_run_rows_limit=0)
    with temporary_setting(spark, CODEGEN_FACTORY_MODE, "FALLBACK"):  # a user's session: compiling
        jvm = compiling.run_full(copy).profile.driver_jvm
    # Its delta numbers and offsets are literals in the generated code: new code to compile.
    assert jvm.classes_compiled > 0 and jvm.compile_s > 0, jvm


def test_a_run_with_nothing_to_do_has_a_profile_of_no_spark_job(spark, sqlite_url, warehouse):
    engine, copy = changed_copy_world(spark, sqlite_url, warehouse)
    engine.run_full(copy)

    with count_spark_jobs(spark) as jobs:
        result = engine.run_full(copy)

    assert jobs.count == 0
    assert result.profile.job_count == 0 and result.profile.jobs == ()
    assert [phase.name for phase in result.profile.phases] == ["open", "changed_index", "commit", OTHER]


def test_the_profile_is_logged_at_debug_with_every_job_its_phase_and_call_site(
        spark, sqlite_url, warehouse, caplog):
    engine, copy = changed_copy_world(spark, sqlite_url, warehouse)

    with caplog.at_level(logging.DEBUG, logger="offset_assets.engine.run"):
        result = engine.run_full(copy)

    [logged] = [record.getMessage() for record in caplog.records if record.getMessage().startswith("profile of run")]
    assert f"{result.spark_jobs} Spark jobs" in logged
    for job in result.profile.jobs:
        assert f"job {job.job_id} [{job.phase}]" in logged and job.name in logged


def test_a_phase_inside_another_owns_its_jobs_and_its_time(spark):
    profiler = Profiler.start(spark)
    with profiler.phase("outer"):
        spark.range(5).collect()
        with profiler.phase("inner"):
            spark.range(5).collect()
            spark.range(5).collect()
        spark.range(5).collect()
    spark.range(5).collect()  # outside every phase
    profile = profiler.finish()

    assert [(phase.name, phase.jobs) for phase in profile.phases] == [("outer", 2), ("inner", 2), (OTHER, 1)]
    assert [job.phase for job in profile.jobs] == ["outer", "inner", "inner", "outer", OTHER]
    assert sum(phase.seconds for phase in profile.phases) == pytest.approx(profile.wall_s)
    assert "| inner |" in profile.markdown() and "| **total** |" in profile.markdown()


def test_a_run_that_raises_logs_its_profile_and_leaves_no_job_tag_on_the_thread(
        spark, sqlite_url, warehouse, caplog):
    engine, copy = changed_copy_world(spark, sqlite_url, warehouse)

    with (caplog.at_level(logging.DEBUG, logger="offset_assets.engine.run"),
          pytest.raises(RuntimeError, match="stopped mid-run"), engine.open_run(copy) as run):
        run.input_frames(run.batches[0])
        raise RuntimeError("stopped mid-run")

    assert not [tag for tag in spark.sparkContext.getJobTags() if tag.startswith(TAG_PREFIX)]
    [logged] = [record.getMessage() for record in caplog.records
                if record.getMessage().startswith(f"profile of unfinished run {run.run_id}")]
    assert "input_reads" in logged and "[input_reads]" in logged


def test_the_dagster_materialization_carries_the_runs_profile(spark, sqlite_url, warehouse):
    world = make_world(spark, connect(sqlite_url), warehouse)
    seed(world)
    resources = engine_resources(OffsetStore(db_url=sqlite_url), warehouse)

    result = dg.materialize([enriched_asset(), user_post_stats_asset()], resources=resources)

    # The asset body's run and the IO manager's (inputs loaded, the function run by
    # Dagster between them: its time is the profile's `other`).
    for asset in ("enriched_posts", "user_post_stats"):
        meta = materialization(result, asset)
        assert meta["profile.spark_jobs"] > 0
        table = meta["profile"]
        for name in ("open", "changed_index", "input_reads", "output_write", "commit", OTHER):
            assert f"| {name} |" in table
        assert "| **total** | " in table and f" | {meta['profile.spark_jobs']} | " in table
        assert f"and {meta['profile.spark_jobs']} Spark job(s)" in meta["summary"]
    assert "| function |" in materialization(result, "enriched_posts")["profile"]


@pytest.mark.slow
def test_over_spark_connect_the_profile_has_the_drivers_times_and_a_small_run_or_range_asks_one_analysis(
        connect_server, tmp_path):
    (tmp_path / "warehouse").mkdir()
    child = run_client(["-m", "tests.connect_profile", connect_server.url, f"sqlite:///{tmp_path / 'cp.db'}",
                        str(tmp_path / "warehouse")], connect_server, {}, timeout=600)
    assert child.returncode == 0, child.stderr[-3000:]
    run = json.loads(child.stdout.strip().splitlines()[-1])

    profile = run["profile"]
    assert run["processed_keys"] == 6
    assert run["spark_jobs"] is None and profile["spark_jobs"] is None and profile["jobs"] == []
    assert "Spark Connect" in profile["not_counted"]
    assert list(profile["phases"]) == [*PHASES, OTHER]
    assert all(phase["jobs"] is None and phase["seconds"] >= 0 for phase in profile["phases"].values())
    # Rounded to 0.1 ms in the JSON: the phases add up to the wall time, within the run's.
    assert sum(phase["seconds"] for phase in profile["phases"].values()) == pytest.approx(profile["wall_s"], abs=1e-3)
    assert profile["wall_s"] <= run["duration_s"] + 1e-4
    assert profile["phases"]["output_write"]["seconds"] > 0
    assert profile["driver_jvm"] is None  # the server's JVM is not the client's to read
    # The Dagster metadata: the table of times, no job count, and why.
    assert "profile.spark_jobs" not in run["metadata"]
    assert "| output_write |" in run["metadata"]["profile"]
    assert "Spark jobs not counted: Spark Connect" in run["metadata"]["profile"]
    assert "Spark job" not in run["summary"]
    # A small change's run asks the server to analyse one plan: the function's output,
    # whose columns are checked against the declared ones. Every other column the engine
    # builds on is one it named itself, and the output write reads its observed counts
    # from the write's reply, not through `Observation` (which asks whether the plan is a
    # stream): 10 analyses before 3ce79d6, 2 before d0712fb.
    small = run["small_change"]
    assert small["processed_keys"] == 3
    assert small["analysed"] == {"schema": 1}
    # An ingestion range of a SQL table written by Spark asks for one too: the source's
    # schema (once, for the target's columns and types); 7 before 3ce79d6. Read and
    # written by the driver (a range this small, by default), it asks for none.
    assert run["ingestion_range_analysed"] == {"schema": 1}
    assert run["held_ingestion_range_analysed"] == {}
    # Those counts still refuse a write: two states of one key, nothing kept.
    refused = run["refused_conflict"]
    assert refused["error"]["keys"] == [{"post_id": 11}] and "posts" in refused["error"]["message"]
    assert refused["unchanged"] is True
    # Over Spark Connect a list is a local relation: the client counts its rows (a bound
    # through a filter), without a request to the server; a projection may hold a
    # generator (the server plans `explode` as added rows), so its count is unknown.
    assert run["local_rows"] == {"list": 3, "filtered": 3, "union": 6, "projected": None, "analysed": 0}
