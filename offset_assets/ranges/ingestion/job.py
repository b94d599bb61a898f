"""An ingestion job: what to ingest (source), in which ranges (planner), into which
table (target), and what becomes of records whose values do not fit; and the job's due
ranges, planned from its job_log history without Spark (sensors plan too)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum

from pyspark.sql import DataFrame
from pyspark.sql.types import LongType, StringType, StructField, StructType

from offset_assets.control_plane.job_log import JobLog
from offset_assets.control_plane.job_log.records import check_job_names
from offset_assets.ranges.claims import ClaimPolicy
from offset_assets.ranges.errors import PlanningError
from offset_assets.ranges.planners import (
    DataRange,
    PlanInputs,
    Planner,
    RangeKind,
    parse_time,
)
from offset_assets.ranges.sources.batch import RangeSource
from offset_assets.versioned.table_schema import validate_table_name

# The quarantine table of a job's malformed records: one row per record of a source
# (a Kafka message's `topic/partition@offset`, a SQL row's key as JSON), with the value as
# the source sent it, why it does not fit, and the job_log row of the range that read it.
QUARANTINE_KEY = ["job_name", "source_key"]
QUARANTINE_SCHEMA = StructType([
    StructField("job_name", StringType(), False),
    StructField("source_key", StringType(), False),
    StructField("raw_value", StringType(), True),
    StructField("reason", StringType(), True),
    StructField("job_id", LongType(), True),
])


# A job that quarantines fails a range instead when more than this share of its records do
# not fit: a declaration that is wrong (a column declared bigint over values like 12.34) sets
# everything aside, and a range that committed nothing but its quarantine would look like
# success. A source sending half its records malformed is worth a stop as well.
DEFAULT_MAX_MALFORMED_SHARE = 0.5
# A range of fewer records is not judged by its share: one malformed message alone in a
# quiet topic's range would otherwise stop the job at a record that is merely bad.
MALFORMED_SHARE_MIN_RECORDS = 10


class OnMalformed(StrEnum):
    """What a range does with a record whose values do not fit their declared type: fail
    (naming it: nothing is committed, and the range is retried as it is once the source or
    the job is fixed), or set it aside in the job's quarantine table and ingest the rest."""

    FAIL = "fail"
    QUARANTINE = "quarantine"


@dataclass(frozen=True)
class TargetTable:
    """The versioned table a job ingests into."""

    name: str
    primary_key: Sequence[str]
    schema: StructType


@dataclass(frozen=True)
class IngestionJob:
    """What to ingest (source), in which ranges (planner), into which table (target).

    `name` is the job_name of its job_log rows (the Dagster asset name). `transform`
    shapes source rows into the target's columns; without it the target's columns (and
    `sys_op` when present) are selected from the source rows. A transform keeps `sys_op`
    (a Kafka tombstone's delete) and the source's order columns (a Kafka range's
    `kafka_partition` and `kafka_offset`, a declared `order_by`) in its output: they
    decide which of several rows of one key is its state, and are not stored unless the
    target has them.

    `on_malformed` (`OnMalformed`): a record whose values do not fit fails the range
    (`"fail"`), or goes to `quarantine_table` (default `<target>__quarantine`,
    `QUARANTINE_SCHEMA`) in the range's commit (`"quarantine"`). A range of at least
    `MALFORMED_SHARE_MIN_RECORDS` records more than `max_malformed_share` of which do not
    fit fails even so, naming the first: that many points at the declaration (None: never).
    """

    name: str
    source: RangeSource
    planner: Planner
    target: TargetTable
    workflow_name: str | None = None
    load_type: str = "incremental"
    transform: Callable[[DataFrame], DataFrame] | None = None
    claim_policy: ClaimPolicy = field(default_factory=ClaimPolicy)
    on_malformed: OnMalformed | str = OnMalformed.FAIL
    quarantine_table: str | None = None
    max_malformed_share: float | None = DEFAULT_MAX_MALFORMED_SHARE

    def __post_init__(self) -> None:
        # Refused here, before any range is claimed or any table registered.
        check_job_names(job_name=self.name, workflow_name=self.workflow_name, load_type=self.load_type)
        validate_table_name(self.target.name)
        try:
            object.__setattr__(self, "on_malformed", OnMalformed(self.on_malformed))
        except ValueError:
            raise PlanningError(f"job {self.name!r}: on_malformed must be one of "
                                f"{[str(p) for p in OnMalformed]}, got {self.on_malformed!r}") from None
        if self.on_malformed == OnMalformed.QUARANTINE:
            validate_table_name(self.quarantine_name)
        share = self.max_malformed_share
        if share is not None and (isinstance(share, bool) or not isinstance(share, int | float)
                                  or not 0 <= share <= 1):
            raise PlanningError(f"job {self.name!r}: max_malformed_share must be a share between 0 and 1 "
                                f"(or None: never fail a range for its share), got {share!r}")

    @property
    def quarantine_name(self) -> str:
        """The versioned table of the job's malformed records."""
        return self.quarantine_table or f"{self.target.name}__quarantine"


def is_open_window(data_range: DataRange, now: datetime) -> bool:
    """Whether `data_range` is a time window that has not ended at `now`: rows can still
    arrive in it, so ingesting it cannot complete it."""
    if data_range.kind != RangeKind.TIME_WINDOW or data_range.end is None:
        return False
    moment = now.astimezone(UTC).replace(tzinfo=None) if now.tzinfo else now
    return parse_time(data_range.end) > moment


def plan_inputs(job: IngestionJob, log: JobLog, now: datetime | None = None) -> PlanInputs:
    """Read the outside facts the job's planner needs (source max id, Kafka offsets,
    upstream job log); no Spark, so sensors can call it."""
    try:
        return job.planner.gather(job.source, log.history, now)
    except PlanningError as refused:
        raise PlanningError(f"job {job.name!r}: {refused}") from None


def plan_ranges(job: IngestionJob, log: JobLog, now: datetime | None = None) -> list[DataRange]:
    """The job's due ranges from its job_log history, in run order."""
    return job.planner.plan(log.history(job.name), plan_inputs(job, log, now))
