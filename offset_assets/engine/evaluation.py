"""How a run's queries evaluate their expressions: compiled into Java, or interpreted.

Spark compiles the expressions of every query into Java classes (Janino, then the JVM's
JIT) and keeps the classes by their source text. The engine's queries carry each run's
delta numbers, offsets and commit times as literals, which Spark writes into that source,
so one run's classes never serve the next: every run compiles its code afresh and runs
it before the JVM has optimised it. On small tables that costs more than it saves (the
demo's small change, 82 keys of a 2,000-row table: 2.2-2.9 s -> 1.5-1.9 s interpreted);
on large ones the compiled code pays back (the copy workload at 1M rows: an incremental
run 1.4 s compiled, 1.8 s interpreted). A run whose tables are small therefore evaluates
interpreted, with Spark's own interpreted path (`spark.sql.codegen.factoryMode`, the one
it falls back to when compiling fails); the session's setting is restored when the run
ends. How large is small is read from the catalog before the first query: the versions
every table the run reads has stored, which no read of it can exceed.
"""

from __future__ import annotations

from collections.abc import Iterable
from contextlib import AbstractContextManager, nullcontext

from pyspark.sql import SparkSession

from offset_assets.spark import temporary_setting

CODEGEN_FACTORY_MODE = "spark.sql.codegen.factoryMode"
INTERPRETED = "NO_CODEGEN"
# At most this many stored versions in all the tables a run reads (inputs, outputs, meta):
# the copy workload at 100,000 rows, whose tables hold three times that, ran as fast
# either way, so the limit leaves every table of that size compiled.
DEFAULT_INTERPRETED_ROWS_LIMIT = 100_000


def evaluates_interpreted(sizes: Iterable[int | None], limit: int) -> bool:
    """Whether a run over data of `sizes` (each table's stored versions, a range's rows)
    evaluates interpreted: when they are at most `limit` rows in all (an unknown size is a
    large one; a limit of 0 keeps every run compiled)."""
    sizes = list(sizes)
    if limit <= 0 or any(size is None for size in sizes):
        return False
    return sum(sizes) <= limit


def run_evaluation(spark: SparkSession, sizes: Iterable[int | None], limit: int) -> AbstractContextManager[None]:
    """The session's evaluation while a run over data of `sizes` works."""
    if evaluates_interpreted(sizes, limit):
        return temporary_setting(spark, CODEGEN_FACTORY_MODE, INTERPRETED)
    return nullcontext()
