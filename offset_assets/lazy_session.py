"""A Spark session given now, or the function that starts it when it is first needed.

A small ingestion range is read and written by the driver without Spark
(`ranges/ingestion/held.py`): the versioned table and the range's run then hold the
function, and a process that ingests such ranges only never starts a JVM.
"""

from __future__ import annotations

from collections.abc import Callable

from pyspark.sql import SparkSession

__all__ = ["LazySession", "SessionSource"]

# A session, or the function that returns one (called once, when first needed).
SessionSource = SparkSession | Callable[[], SparkSession]


class LazySession:
    """`source`'s session, started on the first `get`; `on_start` is told of it then."""

    def __init__(self, source: SessionSource, on_start: Callable[[SparkSession], None] | None = None) -> None:
        self._source = source
        self._session: SparkSession | None = None if callable(source) else source
        self._on_start = on_start

    @property
    def started(self) -> bool:
        return self._session is not None

    def get(self) -> SparkSession:
        if self._session is None:
            self._session = self._source()
            if self._on_start is not None:
                self._on_start(self._session)
        return self._session
