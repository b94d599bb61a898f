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
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from py4j.protocol import Py4JJavaError
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
    """One job started inside a counted block: its id, the names of its stages (Spark
    names a stage after the action and call site that started it) and its wall time
    from submission to completion (None when the status store has no times for it)."""

    job_id: int
    stage_names: tuple[str, ...]
    seconds: float | None = None

    def __str__(self) -> str:
        took = "" if self.seconds is None else f" ({self.seconds:.2f} s)"
        return f"job {self.job_id}{took}: {'; '.join(self.stage_names) or '(no stage)'}"


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


@contextmanager
def count_spark_jobs(spark: SparkSession) -> Iterator[SparkJobCounter]:
    """Count the Spark jobs started in the block by the current thread (see module doc).

    The counter is filled on exit, also when the block raises. Needs a classic session:
    a Spark Connect client has no SparkContext to tag jobs or read the status store.
    """
    try:
        sc = spark.sparkContext
    except Exception as exc:  # Spark Connect raises its own not-implemented error here
        raise SparkJobCountError(
            f"counting Spark jobs needs a classic Spark session with a SparkContext, not {type(spark).__module__}"
        ) from exc
    counter = SparkJobCounter(f"{TAG_PREFIX}{uuid.uuid4().hex}")
    sc.addJobTag(counter.tag)
    try:
        yield counter
    finally:
        sc.removeJobTag(counter.tag)
        counter.jobs = _jobs_with_tag(spark, counter.tag)


def _jobs_with_tag(spark: SparkSession, tag: str) -> list[SparkJob]:
    jsc = spark.sparkContext._jsc.sc()
    # Job events reach the status store through the asynchronous listener bus: wait
    # until it has delivered everything posted so far, or recent jobs would be missed.
    jsc.listenerBus().waitUntilEmpty(LISTENER_WAIT_MS)
    job_ids = sorted(int(job_id) for job_id in jsc.statusTracker().getJobIdsForTag(tag))
    retained = int(spark.sparkContext.getConf().get(RETAINED_JOBS_CONF, str(DEFAULT_RETAINED_JOBS)))
    if len(job_ids) >= retained:
        raise SparkJobCountError(
            f"{len(job_ids)} jobs counted under tag {tag!r}, the status store keeps only "
            f"{RETAINED_JOBS_CONF}={retained}: raise it to count a block this large"
        )
    tracker = spark.sparkContext.statusTracker()
    jobs = []
    for job_id in job_ids:
        info = tracker.getJobInfo(job_id)
        stage_ids = info.stageIds if info is not None else []
        stages = (tracker.getStageInfo(stage_id) for stage_id in stage_ids)
        names = tuple(stage.name for stage in stages if stage is not None)
        jobs.append(SparkJob(job_id, names, _job_seconds(jsc, job_id)))
    return jobs


def _job_seconds(jsc, job_id: int) -> float | None:
    """Submission to completion of `job_id`, from the status store (the times the UI shows)."""
    try:
        data = jsc.statusStore().job(job_id)
    except Py4JJavaError:  # NoSuchElementException: the store no longer keeps that job
        return None
    submitted, completed = data.submissionTime(), data.completionTime()
    if not (submitted.isDefined() and completed.isDefined()):
        return None
    return (completed.get().getTime() - submitted.get().getTime()) / 1000
