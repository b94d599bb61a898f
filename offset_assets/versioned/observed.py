"""Aggregates observed while a frame built on them is written: a write's counts without
a Spark job of their own.

A classic session reads them from pyspark's `Observation`. A Spark Connect client does
not: there `Observation` first asks the server whether the plan is a stream, an analysis
of the whole plan (0.05-0.13 s for a transformation's output write), so the metrics are
named by a string and read from the written frame's `executionInfo`, which the server's
reply to the write fills.
"""

from __future__ import annotations

import uuid
from typing import Any

from pyspark.sql import Column, DataFrame, Observation

from offset_assets.spark import is_connect_session
from offset_assets.versioned.errors import VersionedTableError


class ObservedAggregates:
    """`frame` observed with `aggregates` (`observed`); `read(written)` returns their values,
    by alias, once `written` (a frame built on `observed`) has been written into `table`."""

    def __init__(self, table: str, frame: DataFrame, *aggregates: Column) -> None:
        self.table = table
        self.name = f"write-{uuid.uuid4().hex}"
        if is_connect_session(frame.sparkSession):
            self._observation = None
            self.observed = frame.observe(self.name, *aggregates)
        else:
            self._observation = Observation(self.name)
            self.observed = frame.observe(self._observation, *aggregates)

    def read(self, written: DataFrame) -> dict[str, Any]:
        """The observed values; `written`: the frame whose `write` ran the job."""
        if self._observation is not None:
            return self._observation.get
        info = written.executionInfo
        for name, values in info.flows if info is not None else ():
            if name == self.name:
                return values
        # Never read as zero counts: a write's counts are what refuses bad rows.
        raise VersionedTableError(self.table, f"the Spark Connect server's reply to a write holds no metrics "
                                              f"{self.name!r}: the write is not kept")
