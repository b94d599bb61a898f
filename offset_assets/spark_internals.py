"""Every PySpark and Spark internal offset-assets reaches, and the public fallback of each.

Checked against PySpark 4.3.0 (`CHECKED_WITH`). Each internal saves a cost every run
would pay through public API (a Spark job, JVM calls by the hundred, a figure missing);
where a PySpark or Spark version lacks one (an attribute gone, a Scala method or class
renamed), the caller gets the public route's answer, or fewer figures, never an error,
and the log says once which internal was missing:

- the jobs that carried a job tag (`job_ids_for_tags`): Scala's
  `SparkStatusTracker.getJobIdsForTag` through PySpark's private `SparkContext._jsc`, the
  ids as one string through `_jvm` (PySpark's `StatusTracker` lists jobs by group only).
  Missing: None; `spark_jobs.count_spark_jobs` counts by job group instead, a profile
  says its jobs were not counted;
- waiting until the status store has every event posted so far
  (`wait_for_listener_bus`: `SparkContext.listenerBus`, private to Spark). Missing:
  False; the caller polls the public status tracker until what it lists settles;
- a job's name and wall time (`job_records`: `SparkContext.statusStore`, private to
  Spark). Missing: the jobs without name or time;
- one setting of the context (`context_setting`: PySpark's `SparkContext._conf`; the
  public `getConf()` copies every setting, one JVM call each). Missing: `getConf()`;
- the driver JVM's process id and counters (`driver_jvm_pid`, `driver_jvm_counters`:
  `java.lang.management`, Spark's code generator's metrics, through `_jvm`). Missing:
  None; a run's profile has no driver JVM figures;
- how many rows a frame of local rows holds (`local_relation_rows`: the analysed plan
  through `DataFrame._jdf`, or a Spark Connect client's plan classes, `_plan`, `_child`,
  `_table`). Missing: None; the caller counts the rows with a Spark job;
- a Spark Connect frame's rows as the Arrow table the server sent (`connect_arrow_rows`:
  the client's `DataFrame._to_table`): one round trip, where the public `toArrow` first
  asks the server to analyse the plan for a schema the caller, who casts to the one it
  declared, has no use for. Missing: `toArrow()`.

Over Spark Connect the client has no SparkContext: the callers check for one first
(`spark_jobs.spark_context`).
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, TypeVar

import pyspark
from py4j.java_gateway import JavaPackage
from py4j.protocol import Py4JError, Py4JJavaError
from pyspark import SparkContext
from pyspark.sql import DataFrame

logger = logging.getLogger(__name__)

CHECKED_WITH = ("4.3.0",)
# What an internal a version lacks raises: an attribute gone (AttributeError), a Scala
# method or a JVM class gone (Py4JError: "Method ... does not exist", `_jvm_class`).
# Py4JJavaError, an exception thrown in the JVM by a call that exists, is not among them.
_MISSING = (AttributeError, Py4JError)
_reported: set[str] = set()
# Per context, whether it lists jobs by tag, asked once (for the JVM context it holds).
_lists_by_tag: weakref.WeakKeyDictionary[SparkContext, tuple[Any, bool]] = weakref.WeakKeyDictionary()
_PROBE_TAG = "offset-assets-probe"

# Plan nodes that hold at most the rows of their one child.
_CLASSIC_NARROWING = frozenset({"Project", "Filter", "SubqueryAlias", "ResolvedHint"})
# Over Spark Connect a client-side projection may hold a generator (`explode`), which the
# server plans as rows added: only nodes that cannot hold one pass.
_CONNECT_NARROWING = frozenset({"Filter", "SubqueryAlias", "WithColumnsRenamed", "ToSchema"})

T = TypeVar("T")


def is_connect_session(spark: Any) -> bool:
    """True for a Spark Connect client session (no JVM, no `sparkContext` in this process):
    PySpark's Connect classes live under `pyspark.sql.connect` (`offset_assets.spark`
    exports this for every caller)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def _reached(internal: str, fallback: str, reach: Callable[[], T]) -> T | None:
    """`reach()`, or None when this PySpark or Spark lacks the internal (logged once)."""
    try:
        return reach()
    except Py4JJavaError:
        raise
    except _MISSING as exc:
        if internal not in _reported:
            _reported.add(internal)
            logger.warning("PySpark %s: %s is unavailable (%s: %s; checked with %s): %s", pyspark.__version__,
                           internal, type(exc).__name__, str(exc).splitlines()[0] if str(exc) else "",
                           ", ".join(CHECKED_WITH), fallback)
        return None


def job_ids_for_tags(sc: SparkContext, tags: Sequence[str]) -> dict[str, list[int]] | None:
    """Per tag, the ids of the jobs that carried it, oldest first: two JVM calls, then
    two per tag (the ids as one string: reading a Java array from Python is a JVM call
    per element); None where the internal is missing."""

    def reach() -> dict[str, list[int]]:
        tracker = sc._jsc.sc().statusTracker()
        listed = {tag: str(sc._jvm.java.util.Arrays.toString(tracker.getJobIdsForTag(tag))) for tag in tags}
        return {tag: sorted(int(job_id) for job_id in ids.strip("[]").split(",") if job_id.strip())
                for tag, ids in listed.items()}

    return _reached("SparkStatusTracker.getJobIdsForTag", "jobs are counted by job group, or not", reach)


def jobs_submitted(sc: SparkContext) -> int | None:
    """How many jobs `sc` has been asked to run so far, by any thread (the DAG scheduler's
    next job id): one JVM call. Equal before and after a block, no job ran in it, so
    nothing needs to be listed by tag. None where the internal is missing."""

    def reach() -> int:
        found = sc._jsc.sc().dagScheduler().nextJobId()  # an AtomicInteger, given as its value
        return int(found.get() if hasattr(found, "get") else found)

    return _reached("DAGScheduler.nextJobId", "a run's jobs are always listed by tag", reach)


def lists_jobs_by_tag(sc: SparkContext) -> bool:
    """Whether `job_ids_for_tags` answers for `sc` (asked once per context: four JVM calls)."""
    jsc = getattr(sc, "_jsc", None)
    known = _lists_by_tag.get(sc)
    if known is None or known[0] is not jsc:
        known = (jsc, job_ids_for_tags(sc, [_PROBE_TAG]) is not None)
        _lists_by_tag[sc] = known
    return known[1]


def wait_for_listener_bus(sc: SparkContext, timeout_ms: int) -> bool:
    """Wait until the listener bus has delivered every event posted so far to the status
    store (job events reach it asynchronously); False where the internal is missing."""

    def reach() -> bool:
        sc._jsc.sc().listenerBus().waitUntilEmpty(timeout_ms)
        return True

    return bool(_reached("SparkContext.listenerBus", "the status tracker is polled until it settles", reach))


def job_records(sc: SparkContext, job_ids: Sequence[int]) -> dict[int, tuple[str, float | None]]:
    """Each job's name (Spark names a job after its action and call site) and wall time
    from submission to completion, from the status store: about ten JVM calls a job, its
    fields one by one (writing the record as JSON in the JVM would take two, but Jackson's
    first write of a job record costs 100-200 ms, which every Dagster run's fresh driver
    would pay). A job the store no longer keeps, or every job where the store is out of
    reach, has no name ("") and no time (None)."""
    store = _reached("SparkContext.statusStore", "jobs have no name or time", lambda: sc._jsc.sc().statusStore())
    return {job_id: ("", None) if store is None else _job_record(store, job_id) for job_id in job_ids}


def _job_record(store: Any, job_id: int) -> tuple[str, float | None]:
    try:
        data = store.job(job_id)
    except Py4JJavaError:  # NoSuchElementException: the store no longer keeps that job
        return "", None
    # Each Option's get() straight away (a job without a time is rare): asking isDefined
    # first is another JVM call per time.
    try:
        seconds = (data.completionTime().get().getTime() - data.submissionTime().get().getTime()) / 1000
    except Py4JJavaError:  # NoSuchElementException: None.get
        seconds = None
    return str(data.name()), seconds


def context_setting(sc: SparkContext, key: str, default: str) -> str:
    """One setting of the context, in one JVM call."""
    conf = _reached("SparkContext._conf", "settings are read through getConf()", lambda: sc._conf)
    return (conf if conf is not None else sc.getConf()).get(key, default)


class JvmCounters(NamedTuple):
    """The driver JVM's counters since it started: JIT compilation and garbage collection
    seconds, classes of generated code compiled and the seconds that took."""

    jit_s: float
    gc_s: float
    classes_compiled: int
    compile_s: float


def _jvm_class(sc: SparkContext, name: str) -> Any:
    """The JVM class `name`; py4j answers a name the JVM has no class of with a package."""
    found = getattr(sc._jvm, name)
    if isinstance(found, JavaPackage):
        raise Py4JError(f"the JVM has no class {name}")
    return found


def driver_jvm_pid(sc: SparkContext) -> int | None:
    """The process id of the JVM `sc` runs on; None where it cannot be asked."""
    return _reached("the JVM's ProcessHandle (SparkContext._jvm)", "the driver JVM's CPU time is not read",
                    lambda: int(_jvm_class(sc, "java.lang.ProcessHandle").current().pid()))


def driver_jvm_counters(sc: SparkContext) -> JvmCounters | None:
    """The driver JVM's counters (about 40 JVM calls); None where they cannot be read."""

    def reach() -> JvmCounters:
        management = _jvm_class(sc, "java.lang.management.ManagementFactory")
        collectors = management.getGarbageCollectorMXBeans()
        # By index: iterating a Java list from Python ends in an exception the JVM throws,
        # which PySpark's error conversion inspects with some fifty more JVM calls.
        gc_ms = sum(max(0, collectors[i].getCollectionTime()) for i in range(len(collectors)))  # -1: unknown
        jit_ms = max(0, management.getCompilationMXBean().getTotalCompilationTime())
        codegen = _jvm_class(sc, "org.apache.spark.sql.catalyst.expressions.codegen.CodeGenerator")
        compilations = _jvm_class(sc, "org.apache.spark.metrics.source.CodegenMetrics").METRIC_COMPILATION_TIME()
        return JvmCounters(jit_ms / 1000, gc_ms / 1000, compilations.getCount(), codegen.compileTime() / 1e9)

    return _reached("the driver JVM's counters (SparkContext._jvm)", "a profile has no driver JVM figures", reach)


def local_relation_rows(df: DataFrame) -> int | None:
    """How many rows `df` holds at most, when its plan says so without a Spark job: local
    relations, through projections, filters and unions of them; None for any other plan,
    and where the plan cannot be read."""
    if is_connect_session(df.sparkSession):
        return _reached("a Spark Connect DataFrame's plan (DataFrame._plan)", "the caller counts the rows",
                        lambda: _connect_rows(df._plan))
    return _reached("the analysed plan (DataFrame._jdf)", "the caller counts the rows",
                    lambda: _classic_rows(df._jdf.queryExecution().analyzed()))


def connect_arrow_rows(df: DataFrame, columns: Sequence[str]) -> Any:
    """The rows of `df`, a Spark Connect frame, as the `pyarrow.Table` the server sent,
    its `columns` selected (the caller casts them to the types it declared)."""
    table = _reached("DataFrame._to_table (Spark Connect)", "toArrow(), which analyses the plan first",
                     lambda: df._to_table()[0])
    if table is None or not set(columns) <= set(table.column_names):
        table = df.toArrow()
    return table.select(list(columns))


def _classic_rows(plan: Any) -> int | None:
    kind = plan.getClass().getSimpleName()
    if kind == "LocalRelation":
        return plan.data().length()
    children = plan.children()
    if kind in _CLASSIC_NARROWING:
        return _classic_rows(children.apply(0))
    if kind == "Union":
        return _sum([_classic_rows(children.apply(i)) for i in range(children.length())])
    return None


def _connect_rows(plan: Any) -> int | None:
    kind = type(plan).__name__
    if kind == "LocalRelation":
        return plan._table.num_rows if plan._table is not None else 0
    if kind in _CONNECT_NARROWING:
        return _connect_rows(plan._child)
    if kind == "SetOperation" and plan.set_op == "union":
        return _sum([_connect_rows(plan._child), _connect_rows(plan.other)])
    return None


def _sum(counts: list[int | None]) -> int | None:
    return None if any(count is None for count in counts) else sum(counts)
