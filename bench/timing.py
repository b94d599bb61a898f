"""Timing a repeated action: the one helper of the benchmarks that time reads by repetition
(it imports nothing of Spark, so a benchmark's child process without a JVM can use it)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable


def timed(action: Callable[[], object], repeat: int) -> dict:
    """The median and the fastest of `repeat` runs of `action`, in seconds."""
    seconds = []
    for _ in range(repeat):
        start = time.perf_counter()
        action()
        seconds.append(time.perf_counter() - start)
    return {"median_s": round(statistics.median(seconds), 3), "min_s": round(min(seconds), 3)}
