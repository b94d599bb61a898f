"""How a small run's queries execute: expressions interpreted, not compiled, and plans
fixed before they run, not re-planned stage by stage.

Spark compiles the expressions of every query into Java classes (Janino, then the JVM's
JIT) and keeps the classes by their source text. The engine's queries carry each run's
delta numbers, offsets and commit times as literals, which Spark writes into that source,
so one run's classes never serve the next: every run compiles its code afresh and runs
it before the JVM has optimised it. On small tables that costs more than it saves (the
demo's small change, 82 keys of a 2,000-row table: 2.2-2.9 s -> 1.5-1.9 s interpreted);
on large ones the compiled code pays back (the copy workload at 1M rows: an incremental
run 1.4 s compiled, 1.8 s interpreted).

Adaptive execution (Spark's default) plans a query again each time one of its stages
ends, to resize its shuffles and choose its joins by the rows they really hold. A small
run's plans need neither: the engine reads bounded data in one partition, and the
function's joins of small inputs broadcast either way. The second planning costs more
than the first on a driver that has run few queries (the demo's small change: after the
function's join broadcast the profiles, 342-355 ms passed before the write's job
started, 103-130 ms without adaptive execution). What adaptive execution would do to a
small run's shuffles, merging them into few partitions, is done by the number the run
sets: one partition per `ROWS_PER_PARTITION` rows the run's tables hold, never more than
the session's own setting.

So a run whose tables are small sets, on the session while it works, Spark's own
interpreted path (`spark.sql.codegen.factoryMode`, the one it falls back to when
compiling fails), adaptive execution off and that number of shuffle partitions; the
session's settings are restored when the run ends. How large is small is read from the
catalog before the first query: the versions every table the run reads has stored, which
no read of it can exceed.

A direct write of rows the driver holds (`HotDelta.write` of a local relation) is such a
run too: its query reads those rows and the committed versions it is classified against,
nothing else (a young JVM compiling each write's expressions took 2.1-2.4 s for a write
of 12 rows, 0.4-0.6 s interpreted). Here in the versioned layer for that reason; the
engine and the ingestion ranges decide the same way for their runs.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from contextlib import AbstractContextManager, ExitStack, nullcontext

from pyspark.sql import SparkSession

from offset_assets.spark import temporary_setting

CODEGEN_FACTORY_MODE = "spark.sql.codegen.factoryMode"
INTERPRETED = "NO_CODEGEN"
ADAPTIVE_EXECUTION = "spark.sql.adaptive.enabled"
SHUFFLE_PARTITIONS = "spark.sql.shuffle.partitions"
# At most this many stored versions in all the tables a run reads (inputs, outputs and
# meta): the copy workload at 100,000 rows, whose tables hold three times that, ran as
# fast either way, so the limit leaves every table of that size as Spark is configured.
DEFAULT_SMALL_RUN_ROWS_LIMIT = 100_000
# Rows per partition of a write that is not small, and of a small run's shuffles.
ROWS_PER_PARTITION = 50_000


def is_small_run(sizes: Iterable[int | None], limit: int) -> bool:
    """Whether a run over data of `sizes` (each table's stored versions, a range's rows)
    is small: at most `limit` rows in all (an unknown size is a large one; a limit of 0
    makes no run small)."""
    sizes = list(sizes)
    if limit <= 0 or any(size is None for size in sizes):
        return False
    return sum(sizes) <= limit


def small_run_shuffle_partitions(rows: int, configured: int) -> int:
    """Shuffle partitions of a small run over `rows` stored versions: one per
    `ROWS_PER_PARTITION`, at least one, at most the session's `configured` number."""
    return max(1, min(configured, math.ceil(rows / ROWS_PER_PARTITION)))


def small_run_settings(spark: SparkSession, sizes: Iterable[int | None], limit: int,
                       ) -> AbstractContextManager[None]:
    """The session's settings while a run over data of `sizes` works: those of a small
    run (`is_small_run`), or the session's own."""
    sizes = list(sizes)
    if not is_small_run(sizes, limit):
        return nullcontext()
    with ExitStack() as settings:
        settings.enter_context(temporary_setting(spark, CODEGEN_FACTORY_MODE, INTERPRETED))
        settings.enter_context(temporary_setting(spark, ADAPTIVE_EXECUTION, "false"))
        configured = int(spark.conf.get(SHUFFLE_PARTITIONS))
        partitions = small_run_shuffle_partitions(sum(sizes), configured)
        settings.enter_context(temporary_setting(spark, SHUFFLE_PARTITIONS, str(partitions)))
        # Set: handed to the caller, who restores the session's settings when the run ends.
        return settings.pop_all()
