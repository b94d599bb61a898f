"""The PySpark and Spark internals `spark_internals.py` reaches, each made unavailable for
one test, as a PySpark or Spark version without it would show it: the callers get the
public route's answer, or fewer figures, and no error."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyspark
import pytest
from py4j.protocol import Py4JError

from offset_assets import spark_internals
from offset_assets.local_frames import local_frame, local_rows
from offset_assets.run_profile import Profiler
from offset_assets.spark_jobs import count_spark_jobs


class Lacking:
    """A py4j object as a version without some of its members shows it: `missing` raise
    as py4j does for a method that does not exist, `replaced` answer instead of the real
    object's, and everything else is the real object's."""

    def __init__(self, real: Any, missing: frozenset[str] = frozenset(), **replaced: Callable[..., Any]) -> None:
        self._real, self._missing, self._replaced = real, missing, replaced

    def __getattr__(self, name: str) -> Any:
        if name in self._missing:
            raise Py4JError(f"An error occurred while calling {name}. Trace:\npy4j.Py4JException: "
                            f"Method {name}([]) does not exist")
        if name in self._replaced:
            return self._replaced[name]
        return getattr(self._real, name)


@pytest.fixture
def without_in_scala_context(spark, monkeypatch):
    """Make members of the Scala SparkContext (and of its status tracker) unavailable."""
    sc = spark.sparkContext
    scala = sc._jsc.sc()

    def lacking(*missing: str, tracker_missing: tuple[str, ...] = ()) -> None:
        tracker = Lacking(scala.statusTracker(), frozenset(tracker_missing))
        context = Lacking(scala, frozenset(missing), statusTracker=lambda: tracker)
        monkeypatch.setattr(sc, "_jsc", Lacking(sc._jsc, sc=lambda: context))

    return lacking


def test_the_internals_were_checked_against_the_installed_pyspark():
    assert pyspark.__version__ in spark_internals.CHECKED_WITH


def test_without_the_listener_bus_jobs_are_counted_once_the_status_tracker_settles(spark, without_in_scala_context):
    without_in_scala_context("listenerBus")
    df = spark.range(100)
    with count_spark_jobs(spark) as outer:
        df.collect()
        with count_spark_jobs(spark) as inner:
            df.where("id > 50").collect()
    assert (outer.count, inner.count) == (2, 1), outer.describe()
    assert all(job.name.startswith("collect at ") and job.seconds is not None for job in outer.jobs)


def test_without_jobs_listed_by_tag_counters_count_a_job_group_of_their_own_nest_and_restore_the_callers(
        spark, without_in_scala_context):
    without_in_scala_context(tracker_missing=("getJobIdsForTag",))
    sc = spark.sparkContext
    sc.setJobGroup("the-callers-group", "the caller's own job group")
    try:
        df = spark.range(100)
        with count_spark_jobs(spark) as outer:
            df.collect()
            with count_spark_jobs(spark) as inner:
                df.where("id > 50").collect()
            df.count()
        assert (outer.count, inner.count) == (3, 1), outer.describe()
        assert set(inner.jobs) < set(outer.jobs)
        assert all(job.name and job.seconds is not None for job in outer.jobs)  # the status store names them
        assert sc.getLocalProperty("spark.jobGroup.id") == "the-callers-group"
        assert sc.getLocalProperty("spark.job.description") == "the caller's own job group"
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)
        sc.setLocalProperty("spark.job.description", None)
        sc.setLocalProperty("spark.job.interruptOnCancel", None)


def test_without_jobs_listed_by_tag_a_profile_has_the_drivers_times_and_says_its_jobs_were_not_counted(
        spark, without_in_scala_context):
    without_in_scala_context(tracker_missing=("getJobIdsForTag",))
    profiler = Profiler.start(spark)
    with profiler.phase("write"):
        spark.range(10).collect()
    profile = profiler.finish()
    assert not profile.jobs_counted and profile.job_count is None and profile.jobs == ()
    assert profile.not_counted == (f"PySpark {pyspark.__version__} gives no way to list Spark jobs by tag "
                                   f"(checked with {', '.join(spark_internals.CHECKED_WITH)})")
    assert [phase.name for phase in profile.phases] == ["write", "other"]
    assert profile.phase("write").seconds > 0 and profile.phase("write").jobs is None
    assert "Spark jobs not counted: PySpark" in profile.markdown()


def test_without_the_status_store_jobs_are_counted_without_names_or_times(spark, without_in_scala_context):
    without_in_scala_context("statusStore")
    with count_spark_jobs(spark) as jobs:
        spark.range(10).collect()
        spark.range(20).collect()
    assert jobs.count == 2
    assert [(job.name, job.seconds) for job in jobs.jobs] == [("", None), ("", None)]
    assert jobs.describe().splitlines()[0].endswith(": (no name)")


def test_without_the_jvms_counters_a_profile_has_no_driver_jvm_figures_and_counts_its_jobs(spark, monkeypatch):
    sc = spark.sparkContext
    metrics = "org.apache.spark.metrics.source.CodegenMetrics"
    # A class a Spark version lacks is a package to py4j, and calling into it fails.
    monkeypatch.setattr(sc, "_jvm", Lacking(sc._jvm, **{metrics: getattr(sc._jvm, f"{metrics}Gone")}))
    profiler = Profiler.start(spark)
    with profiler.phase("write"):
        spark.range(10).collect()
    profile = profiler.finish()
    assert profile.driver_jvm is None
    assert profile.jobs_counted and profile.phase("write").jobs == 1
    assert "Driver JVM" not in profile.markdown()


def test_without_the_analysed_plan_a_local_frames_rows_are_unknown_so_the_caller_counts_them(spark, monkeypatch):
    frame = local_frame(spark, [(1, "a"), (2, "b")], "id long, name string")
    assert local_rows(frame) == 2
    monkeypatch.setattr(frame, "_jdf", Lacking(frame._jdf, frozenset({"queryExecution"})))
    assert local_rows(frame) is None
    assert frame.count() == 2
