"""The physical plans of the queries a block of code ran, from Spark's SQL status store.

Every action (a count, a collect, a write, the broadcasts and subqueries Spark starts for
it) is one SQL execution, and the status store keeps the plan it ran (`formatted`
explain text; under adaptive execution the final plan). Recording the executions that
started inside the block sees every query the engine built, without wrapping its
DataFrames. A classic session only (the store is in the driver's JVM).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from pyspark.sql import SparkSession

LISTENER_WAIT_MS = 60_000
# Operators that build a relation in one JVM and send it to every task.
BROADCAST_OPERATORS = ("BroadcastExchange", "BroadcastHashJoin", "BroadcastNestedLoopJoin")


@dataclass(frozen=True)
class ExecutedPlan:
    execution_id: int
    description: str
    plan: str

    @property
    def broadcasts(self) -> bool:
        return any(op in self.plan for op in BROADCAST_OPERATORS)


@dataclass
class PlanRecorder:
    plans: list[ExecutedPlan] = field(default_factory=list)

    def with_broadcast(self) -> list[ExecutedPlan]:
        return [p for p in self.plans if p.broadcasts]

    def with_operator(self, name: str) -> list[ExecutedPlan]:
        return [p for p in self.plans if name in p.plan]

    def describe(self, plans: list[ExecutedPlan] | None = None) -> str:
        return "\n\n".join(f"execution {p.execution_id} ({p.description}):\n{p.plan}"
                           for p in (self.plans if plans is None else plans))


def _executions(spark: SparkSession) -> list:
    spark.sparkContext._jsc.sc().listenerBus().waitUntilEmpty(LISTENER_WAIT_MS)
    store = spark._jsparkSession.sharedState().statusStore()
    found, it = [], store.executionsList().iterator()
    while it.hasNext():
        found.append(it.next())
    return found


@contextmanager
def recorded_plans(spark: SparkSession) -> Iterator[PlanRecorder]:
    """The plans of the SQL executions started in the block (filled when it ends)."""
    before = max((e.executionId() for e in _executions(spark)), default=-1)
    recorder = PlanRecorder()
    try:
        yield recorder
    finally:
        recorder.plans = sorted(
            (ExecutedPlan(e.executionId(), e.description(), e.physicalPlanDescription())
             for e in _executions(spark) if e.executionId() > before),
            key=lambda p: p.execution_id,
        )
