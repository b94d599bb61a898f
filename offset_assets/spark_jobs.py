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

Listing jobs by tag reaches past PySpark's public API (`spark_internals.py`). Where a
PySpark version has no such way, a counter counts the jobs of a job group of its own
instead (PySpark's `StatusTracker`), with the same nesting: the thread's job group is
the counter's for the block, and the one it had again after.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import pyspark
from pyspark import SparkContext
from pyspark.sql import SparkSession

from offset_assets import spark_internals
from offset_assets.errors import OffsetAssetsError

TAG_PREFIX = "offset-assets-job-count-"
# The status store forgets jobs beyond spark.ui.retainedJobs; a count that reaches it
# may have lost some, so it is refused rather than reported low.
RETAINED_JOBS_CONF = "spark.ui.retainedJobs"
DEFAULT_RETAINED_JOBS = 1000
LISTENER_WAIT_MS = 60_000
SETTLE_POLL_S = 0.05
# The thread's job group, as `SparkContext.setJobGroup` sets it.
JOB_GROUP_PROPERTIES = ("spark.jobGroup.id", "spark.job.description", "spark.job.interruptOnCancel")


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
    job, a few JVM calls per tag and about ten per job (`spark_internals`). Raises
    `SparkJobCountError` when the store may have forgotten some (more jobs than
    `spark.ui.retainedJobs`), or where this PySpark cannot list jobs by tag."""
    ids = _listed(sc, lambda: spark_internals.job_ids_for_tags(sc, tags))
    if ids is None:
        raise SparkJobCountError(f"PySpark {pyspark.__version__} gives no way to list Spark jobs by tag "
                                 f"(checked with {', '.join(spark_internals.CHECKED_WITH)})")
    for tag, job_ids in ids.items():
        _check_retained(sc, tag, job_ids)
    records = spark_internals.job_records(sc, sorted({i for found in ids.values() for i in found}))
    return {tag: [SparkJob(job_id, *records[job_id]) for job_id in found] for tag, found in ids.items()}


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
    if not spark_internals.lists_jobs_by_tag(sc):
        with _counted_by_job_group(sc, counter):
            yield counter
        return
    sc.addJobTag(counter.tag)
    try:
        yield counter
    finally:
        sc.removeJobTag(counter.tag)
        counter.jobs = jobs_by_tag(sc, [counter.tag])[counter.tag]


def _check_retained(sc: SparkContext, tag: str, job_ids: list[int]) -> None:
    retained = int(spark_internals.context_setting(sc, RETAINED_JOBS_CONF, str(DEFAULT_RETAINED_JOBS)))
    if len(job_ids) >= retained:
        raise SparkJobCountError(
            f"{len(job_ids)} jobs counted under tag {tag!r}, the status store keeps only "
            f"{RETAINED_JOBS_CONF}={retained}: raise it to count a block this large"
        )


def _listed(sc: SparkContext, read: Callable[[], Mapping[str, list[int]] | None]
            ) -> Mapping[str, list[int]] | None:
    """What `read` lists of the status store once the store has every job event posted
    so far. Job events reach it asynchronously through the listener bus, which is waited
    for; where it cannot be, the public status tracker is polled until two reads agree
    and none of the jobs listed is still running (an ended job's end event comes last)."""
    if spark_internals.wait_for_listener_bus(sc, LISTENER_WAIT_MS):
        return read()
    deadline = time.monotonic() + LISTENER_WAIT_MS / 1000
    listed = read()
    while listed is not None:
        time.sleep(SETTLE_POLL_S)
        again = read()
        running = set(sc.statusTracker().getActiveJobsIds())
        settled = again == listed and not running & {i for ids in (again or {}).values() for i in ids}
        if settled or time.monotonic() > deadline:
            return again
        listed = again
    return None


# The job groups of the counters open on this thread, innermost last, each with the jobs
# of the counters that ran inside it (`_counted_by_job_group`).
_open_groups = threading.local()


@contextmanager
def _counted_by_job_group(sc: SparkContext, counter: SparkJobCounter) -> Iterator[None]:
    """The block's jobs as those of a job group of its own, through PySpark's public
    status tracker: the fallback where jobs cannot be listed by tag. The thread's job
    group is the counter's for the block, then the one it had again; a counter inside
    another hands its jobs to the outer one, as tags add up."""
    before = {key: sc.getLocalProperty(key) for key in JOB_GROUP_PROPERTIES}
    stack = _open_groups.__dict__.setdefault("stack", [])
    inner: set[int] = set()
    stack.append(inner)
    sc.setJobGroup(counter.tag, "offset-assets: counting Spark jobs")
    try:
        yield
    finally:
        for key, value in before.items():
            sc.setLocalProperty(key, value)
        stack.pop()
        tracker = sc.statusTracker()
        own = _listed(sc, lambda: {counter.tag: sorted(tracker.getJobIdsForGroup(counter.tag))}) or {}
        job_ids = sorted({*own.get(counter.tag, []), *inner})
        if stack:
            stack[-1].update(job_ids)
        records = spark_internals.job_records(sc, job_ids)
        counter.jobs = [SparkJob(job_id, *records[job_id]) for job_id in job_ids]
