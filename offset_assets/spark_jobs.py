"""Counting the Spark jobs a block of code starts: a deterministic measure of fixed cost.

A run's wall time depends on the machine; the number of Spark jobs it starts does not,
so tests can assert a job budget and benchmarks can report where time goes.

    with count_spark_jobs(spark) as jobs:
        engine.run_full(t)
    assert jobs.count <= 8, jobs.describe()

Jobs are tagged with a job tag unique to the counter (`SparkContext.addJobTag`) and
looked up in Spark's status store when the block ends. Tags rather than a job group:
tags add up, so counters nest (an outer counter still sees the jobs of an inner one)
and a caller's own job group is left alone. Tags are per thread, like job groups: jobs
started by other Python threads are not counted; jobs Spark SQL starts on its own
threads for a query (broadcasts, subqueries) inherit the tag and are.

`spark_context` and `jobs_by_tag` are the same two steps for a caller that tags jobs
itself (a run's profile, `run_profile.py`): tag, then one status-store read at the end.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

from py4j.protocol import Py4JJavaError
from pyspark import SparkContext
from pyspark.sql import SparkSession

from offset_assets.errors import OffsetAssetsError

TAG_PREFIX = "offset-assets-job-count-"
# The status store forgets jobs beyond spark.ui.retainedJobs; a count that reaches it
# may have lost some, so it is refused rather than reported low.
RETAINED_JOBS_CONF = "spark.ui.retainedJobs"
DEFAULT_RETAINED_JOBS = 1000
LISTENER_WAIT_MS = 60_000


class SparkJobCountError(OffsetAssetsError):
    """The jobs of a block could not be counted exactly."""


@dataclass(frozen=True)
class SparkJob:
    """One job started inside a counted block: its id, its name (Spark names a job after
    the action and call site that started it, e.g. `collect at .../keys.py:206`) and its
    wall time from submission to completion (None when the status store has no times
    for it)."""

    job_id: int
    name: str
    seconds: float | None = None

    def __str__(self) -> str:
        took = "" if self.seconds is None else f" ({self.seconds:.2f} s)"
        return f"job {self.job_id}{took}: {self.name or '(no name)'}"


@dataclass
class SparkJobCounter:
    """The jobs counted by `count_spark_jobs`; filled when the block ends."""

    tag: str
    jobs: list[SparkJob] = field(default_factory=list)

    @property
    def count(self) -> int:
        return len(self.jobs)

    def describe(self) -> str:
        """One line per job, for assertion messages and benchmark logs."""
        return "\n".join(str(job) for job in self.jobs) or "no Spark job"


def spark_context(spark: SparkSession) -> SparkContext | None:
    """The session's SparkContext; None over Spark Connect, whose client has none (nor
    a status store to read jobs from)."""
    try:
        return spark.sparkContext
    except Exception:  # noqa: BLE001 - Spark Connect raises its own not-implemented error here
        return None


def jobs_by_tag(sc: SparkContext, tags: Sequence[str]) -> dict[str, list[SparkJob]]:
    """Per tag, every job that carried it, oldest first, from the status store: no Spark
    job, three JVM calls per tag and about ten per job (each job read once; its fields
    one by one: writing the record as JSON in the JVM would take two, but Jackson's
    first write of a job record costs 100-200 ms, which every Dagster run's fresh driver
    would pay). Raises `SparkJobCountError` when the store may have forgotten some
    (more jobs than `spark.ui.retainedJobs`)."""
    _wait_for_listeners(sc)
    tracker = sc._jsc.sc().statusTracker()
    ids = {tag: _job_ids(sc, tracker, tag) for tag in tags}
    store = sc._jsc.sc().statusStore()
    jobs = {job_id: _tagged_job(store, job_id) for job_id in sorted({i for found in ids.values() for i in found})}
    return {tag: [jobs[job_id] for job_id in found] for tag, found in ids.items()}


def _tagged_job(store, job_id: int) -> SparkJob:  # noqa: ANN001 - a py4j AppStatusStore
    try:
        data = store.job(job_id)
    except Py4JJavaError:  # NoSuchElementException: the store no longer keeps that job
        return SparkJob(job_id, "", None)
    return SparkJob(job_id, str(data.name()), _seconds(data))


@contextmanager
def count_spark_jobs(spark: SparkSession) -> Iterator[SparkJobCounter]:
    """Count the Spark jobs started in the block by the current thread (see module doc).

    The counter is filled on exit, also when the block raises. Needs a classic session:
    a Spark Connect client has no SparkContext to tag jobs or read the status store.
    """
    sc = spark_context(spark)
    if sc is None:
        raise SparkJobCountError(
            f"counting Spark jobs needs a classic Spark session with a SparkContext, not {type(spark).__module__}"
        )
    counter = SparkJobCounter(f"{TAG_PREFIX}{uuid.uuid4().hex}")
    sc.addJobTag(counter.tag)
    try:
        yield counter
    finally:
        sc.removeJobTag(counter.tag)
        counter.jobs = jobs_by_tag(sc, [counter.tag])[counter.tag]


def _wait_for_listeners(sc: SparkContext) -> None:
    # Job events reach the status store through the asynchronous listener bus: wait
    # until it has delivered everything posted so far, or recent jobs would be missed.
    sc._jsc.sc().listenerBus().waitUntilEmpty(LISTENER_WAIT_MS)


def _job_ids(sc: SparkContext, tracker, tag: str) -> list[int]:  # noqa: ANN001 - a py4j SparkStatusTracker
    # The ids as one string: reading a Java array from Python is a JVM call per element.
    listed = str(sc._jvm.java.util.Arrays.toString(tracker.getJobIdsForTag(tag)))
    job_ids = sorted(int(job_id) for job_id in listed.strip("[]").split(",") if job_id.strip())
    # SparkContext.getConf copies every setting, one JVM call each: read the one needed.
    retained = int(sc._conf.get(RETAINED_JOBS_CONF, str(DEFAULT_RETAINED_JOBS)))
    if len(job_ids) >= retained:
        raise SparkJobCountError(
            f"{len(job_ids)} jobs counted under tag {tag!r}, the status store keeps only "
            f"{RETAINED_JOBS_CONF}={retained}: raise it to count a block this large"
        )
    return job_ids


def _seconds(data) -> float | None:  # noqa: ANN001 - a py4j JobData
    # Each Option's get() straight away (a job without a time is rare): asking isDefined
    # first is another JVM call per time.
    try:
        return (data.completionTime().get().getTime() - data.submissionTime().get().getTime()) / 1000
    except Py4JJavaError:  # NoSuchElementException: None.get
        return None
