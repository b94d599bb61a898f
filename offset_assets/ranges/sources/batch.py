"""What a source hands the ingestion for one range (`SourceBatch`), and how a source marks
the records whose values do not fit their declared type (`MALFORMED`).

What a source says about its rows beside them: the order of several rows of one key
(`order`: a change log's sequence column, a Kafka partition's offsets), the rows that
delete their key, and the records whose values do not fit: a read that keeps them marks
them, one that does not fails on the first.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T

from offset_assets.ranges.planners import DataRange
from offset_assets.versioned.writes import StateOrder

if TYPE_CHECKING:
    import pyarrow as pa

# A source record whose values do not fit: null for the others. `source_key` names it (a
# Kafka message's `topic/partition@offset`, a SQL row's key as JSON), `raw_value` holds it
# as the source sent it, `reason` says which value does not fit what, in one line.
MALFORMED = "__malformed"
MALFORMED_TYPE = T.StructType([T.StructField("source_key", T.StringType()),
                               T.StructField("raw_value", T.StringType()),
                               T.StructField("reason", T.StringType())])
# Characters of a value shown in a reason.
SHOWN_CHARS = 100


@dataclass(frozen=True)
class SourceBatch:
    """The rows of one range and the end reached (None: the range's own end)."""

    df: DataFrame
    end: str | None
    row_count: int | None = None  # known without a Spark job when the source counted it
    # (column, lowest, highest): the values `column` can hold in the range (an id range's).
    key_range: tuple[str, Any, Any] | None = None
    # How several rows of one key in the range are ordered (columns of `df`): the last one
    # gives the key's state. None: the source knows no order, and different states refuse.
    order: StateOrder | None = None
    # The rows that delete their key (`sys_op` 1: Kafka tombstones), counted as read, and
    # the columns such a row holds (a tombstone has no value: its message's key, offsets).
    deletes: int = 0
    deletes_keyed_by: tuple[str, ...] = ()
    # Records of `df` whose values do not fit, marked in its `MALFORMED` column, when the
    # range was read once and counted. None: `df` has no such column and fails its read on
    # such a record, naming it.
    malformed: int | None = None
    # The same range read once with its malformed records kept, marked and counted: what
    # a job that quarantines them reads. None: `malformed` is known already, or the
    # source has no such read.
    read_marked: Callable[[], SourceBatch] | None = None


@dataclass(frozen=True)
class HeldBatch:
    """A small range's rows read by the driver itself, as Arrow (`rows`, with the
    `MALFORMED` column of a marked read): what `SourceBatch` says of them beside."""

    rows: pa.Table
    end: str | None
    key_range: tuple[str, Any, Any] | None = None
    order: StateOrder | None = None

    @property
    def malformed(self) -> int:
        """The records a marked read marked (0: none, or an unmarked read)."""
        if MALFORMED not in self.rows.column_names:
            return 0
        return self.rows.num_rows - self.rows[MALFORMED].null_count


class RangeSource(Protocol):
    """Reads a range's rows. A source whose ranges may come without an end (ids, Kafka)
    is also a `RangeEndSource`; a planner may ask more of it (`planners.contract`)."""

    source_type: str

    def read_range(self, spark: SparkSession, data_range: DataRange) -> SourceBatch: ...


@runtime_checkable
class HeldRangeSource(Protocol):
    """A source that reads a small range in the driver, without Spark: its rows as Arrow
    when the source counts at most `limit` of them and they take at most `max_bytes`
    (None: more, read by Spark), marked as `SourceBatch.read_marked` marks them when
    `marked`. A value that does not fit fails the read as on the executors, with the
    same error."""

    def read_held(self, data_range: DataRange, limit: int, max_bytes: int, marked: bool) -> HeldBatch | None: ...


@runtime_checkable
class RangeEndSource(Protocol):
    """A source that decides the end of a range planned without one (the head range of
    ids or Kafka offsets), now: the ingestion records it in job_log before any row is
    read; None when the source holds nothing beyond the start. Without it a range's end
    is the one `read_range` reaches."""

    def range_end(self, data_range: DataRange) -> str | None: ...
