"""Running an ingestion job's ranges: each claimed, read, written and committed with its
job_log SUCCESS and step_log rows in one transaction, or logged FAILURE (see the
package's docstring). What the rows become: `rows.py`; the writes: `writes.py`."""

from __future__ import annotations

import json
import logging
import re
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from pyspark.errors import PythonException
from pyspark.sql import SparkSession
from sqlalchemy import Connection

from offset_assets.control_plane.database import ControlPlane
from offset_assets.control_plane.delta_catalog import DeltaCatalog
from offset_assets.control_plane.job_log import JobLog
from offset_assets.control_plane.job_log.errors import ClaimLostError
from offset_assets.control_plane.job_log.records import Claim, JobRecord, JobStatus, StepRecord
from offset_assets.lazy_session import LazySession, SessionSource
from offset_assets.ranges import errors as range_errors
from offset_assets.ranges.claims import Heartbeat, claim_range
from offset_assets.ranges.errors import IngestionError, PlanningError, SourceError
from offset_assets.ranges.ingestion.held import HeldRange, held_range, may_hold
from offset_assets.ranges.ingestion.job import IngestionJob, OnMalformed, is_open_window, plan_ranges
from offset_assets.ranges.ingestion.malformed_policy import split_malformed
from offset_assets.ranges.ingestion.rows import read_batch, shape_rows
from offset_assets.ranges.ingestion.writes import RangeWrites
from offset_assets.ranges.planners import (
    DataRange,
    RangeKind,
    recorded_end,
)
from offset_assets.ranges.sources.batch import HeldRangeSource, RangeEndSource
from offset_assets.run_profile import Profiler, RunProfile
from offset_assets.versioned.commit import commit_transaction
from offset_assets.versioned.evaluation import DEFAULT_SMALL_RUN_ROWS_LIMIT
from offset_assets.versioned.held_files import DEFAULT_HELD_ROWS_LIMIT, HELD_BYTES_LIMIT
from offset_assets.versioned.hot_delta import HotDelta
from offset_assets.versioned.table import VersionedTable

logger = logging.getLogger(__name__)

TARGET_TYPE = "versioned_table"


@dataclass(frozen=True)
class RangeResult:
    """How one range run ended (always successfully: failures raise)."""

    job_id: int
    attempt: int
    data_range: DataRange  # end: the end actually reached (job_log's, except for an open window)
    rows_read: int
    rows_upserted: int
    rows_deleted: int
    rows_unchanged: int
    delta_num: int | None  # None: nothing changed, no delta committed
    commit_ts: float | None
    took_over_run_id: str | None = None
    open_window: bool = False  # ingested before its end: job_log holds end = start
    profile: RunProfile | None = None  # where the range's time went: claim, source_read, write, commit
    keys_written: int = 0  # keys the range gave a state (a version, or unchanged)
    superseded_in_range: int = 0  # rows that gave their key no state: a later row of the key won
    rows_quarantined: int = 0  # malformed records set aside in the job's quarantine table
    quarantine_delta_num: int | None = None  # the quarantine table's delta, when one was committed


class _Steps:
    """The steps of one attempt, written to step_log with the attempt's outcome."""

    def __init__(self, clock: Callable[[], float], source_type: str) -> None:
        self._clock = clock
        self._source_type = source_type
        self.done: list[StepRecord] = []
        self.current: tuple[str, float] | None = None

    def start(self, step_id: str) -> None:
        self.current = (step_id, self._clock())

    def finish(self, **counts: Any) -> None:
        step_id, started = self.current or ("?", self._clock())
        self.done.append(StepRecord(step_id, JobStatus.SUCCESS, started, self._clock(),
                                    source_type=self._source_type, target_type=TARGET_TYPE,
                                    **counts))
        self.current = None

    def failed(self, error: str) -> list[StepRecord]:
        if self.current is None:
            return self.done
        step_id, started = self.current
        return [*self.done, StepRecord(step_id, JobStatus.FAILURE, started, self._clock(),
                                       error=error, source_type=self._source_type,
                                       target_type=TARGET_TYPE)]


class RangeIngestion:
    """Runs the ranges of one `IngestionJob` against a control plane and a warehouse.

    `small_run_rows_limit`: a range whose rows and target table's stored versions are at
    most this many in all is written as a small run: Spark's expressions interpreted, not
    compiled, without adaptive execution (as a transformation's run,
    `offset_assets.versioned.evaluation`).

    `held_rows_limit`: a range of at most this many rows, as the source counts them, is
    read and written by the driver, without Spark (`held.py`; 0: every range by Spark)."""

    def __init__(
        self,
        spark: SessionSource,
        plane: ControlPlane,
        job: IngestionJob,
        warehouse: str | None = None,
        clock: Callable[[], float] = time.time,
        small_run_rows_limit: int = DEFAULT_SMALL_RUN_ROWS_LIMIT,
        held_rows_limit: int = DEFAULT_HELD_ROWS_LIMIT,
    ) -> None:
        self._session = LazySession(spark, on_start=self._session_started)
        self._profiler: Profiler | None = None
        self.plane = plane
        self.job = job
        self.warehouse = warehouse
        self.small_run_rows_limit = small_run_rows_limit
        self.held_rows_limit = held_rows_limit
        self.log = JobLog(plane, clock=clock)
        self._clock = clock
        self.writes = RangeWrites(self._session, plane, job, warehouse, self.log, small_run_rows_limit)

    @property
    def spark(self) -> SparkSession:
        """The Spark session, started now when given as the function that starts it: a
        range the driver reads and writes itself (`held.py`) never asks for it."""
        return self._session.get()

    def _session_started(self, spark: SparkSession) -> None:
        if self._profiler is not None:  # started during a range: its jobs are the range's
            self._profiler.attach(spark)

    # -- planning -----------------------------------------------------------------------

    def history(self) -> list[JobRecord]:
        return self.log.history(self.job.name)

    def plan(self, now: datetime | None = None) -> list[DataRange]:
        """The ranges due now, in the order they must run (a failed one first)."""
        return plan_ranges(self.job, self.log, now)

    # -- running ------------------------------------------------------------------------

    def run_pending(
        self, now: datetime | None = None, run_id: str | None = None
    ) -> list[RangeResult]:
        """Run the due ranges in order (one plan's worth: a planner lists at most its
        `max_ranges_per_plan`); the first failure stops the run (and is raised), and the
        next run retries that range first."""
        results = []
        for data_range in self.plan(now):
            results.append(self.run_range(data_range, run_id=run_id, now=now))
        return results

    def refresh(self, ranges: Sequence[DataRange], run_id: str | None = None) -> list[RangeResult]:
        """Re-ingest explicit ranges, done or not, without moving the pointer past a gap."""
        return [self.run_range(replace(r, refresh=True), run_id=run_id) for r in ranges]

    def run_range(
        self,
        data_range: DataRange,
        run_id: str | None = None,
        now: datetime | None = None,
        runtime_args: dict[str, Any] | None = None,
    ) -> RangeResult:
        """Claim, read, write and commit one range; raises on failure (range logged FAILURE).

        A time window that has not ended at `now` (default: the current time) runs as a
        refresh that leaves the window due (see the module docstring). A range a revert of
        the target undid (REVERTED in job_log) runs as a refresh: it is loaded again, and
        the pointer stays where it is."""
        run_id = run_id or f"local-{uuid.uuid4().hex}"
        window_open = is_open_window(data_range, now or datetime.now(UTC))
        if window_open:
            data_range = replace(data_range, refresh=True)
        data_range = self._as_recorded(data_range)
        pending = [] if data_range.refresh else self.plan(now)
        planned = pending[0] if pending and pending[0].start == data_range.start else None
        if planned is not None:
            data_range = _as_planned(data_range, planned)
        elif not data_range.refresh and self._was_reverted(data_range):
            data_range = replace(data_range, refresh=True)  # no plan runs it: a run of it loads it again
        if data_range.max_size is None:  # a Kafka range from a partition key: the planner's cap
            data_range = replace(data_range, max_size=self.job.planner.keyed_range_max_size)
        profiler = Profiler.start(self.spark if self._session.started else None)
        self._profiler = profiler
        try:
            return self._run_claimed(data_range, pending, planned, window_open, run_id, runtime_args, profiler)
        finally:
            self._profiler = None
            profiler.stop()  # a range that raised leaves no tag on the jobs that follow

    def _run_claimed(self, data_range: DataRange, pending: list[DataRange], planned: DataRange | None,
                     window_open: bool, run_id: str, runtime_args: dict[str, Any] | None,
                     profiler: Profiler) -> RangeResult:
        with profiler.phase("claim"):
            claim = self._claim(data_range, pending, planned, window_open, run_id, runtime_args)
        steps = _Steps(self._clock, self.job.source.source_type)
        hot: HotDelta | None = None
        quarantine: HotDelta | None = None
        try:
            with Heartbeat(self.log, claim, self.job.claim_policy.heartbeat_interval_s):
                steps.start("read")
                with profiler.phase("source_read"):
                    data_range = self._record_end(data_range, claim)
                    held = self._read_held(data_range)
                    if held is None:
                        batch = read_batch(self.spark, self.job, data_range)
                        records, malformed = split_malformed(self.job, batch)
                        shaped = shape_rows(self.spark, self.job, batch, records)
                        rows_read = batch.row_count if batch.row_count is not None else shaped.rows.count()
                        reached, quarantined = batch.end, batch.malformed or 0
                    else:
                        malformed, rows_read, reached, quarantined = None, held.rows.num_rows, held.end, 0
                steps.finish(source_count=rows_read)

                steps.start("write")
                with profiler.phase("write"):
                    # Registered once the range is read: a range that fails its read (its
                    # records not fitting the declared types) leaves no table behind.
                    table = VersionedTable(self._session.get, self.plane, self.job.target.name,
                                           self.job.target.primary_key, self.job.target.schema,
                                           warehouse=self.warehouse)
                    hot = self.writes.open_target_delta(table, run_id)
                    if held is None:
                        stats = self.writes.write(hot, table, batch, shaped, rows_read)
                    else:
                        stats = self.writes.write_held(hot, held)
                changed = stats.rows_upserted + stats.rows_deleted
                steps.finish(
                    source_count=rows_read, target_count=changed,
                    success_count=changed + stats.rows_unchanged, failure_count=quarantined,
                    output=json.dumps({"table": table.name,
                                       "delta_num": hot.delta_num if changed else None,
                                       "rows_unchanged": stats.rows_unchanged,
                                       "keys_written": stats.keys_written,
                                       "superseded_in_range": stats.rows_superseded}),
                )
                if malformed is not None:
                    steps.start("quarantine")
                    with profiler.phase("write"):
                        quarantine, set_aside = self.writes.quarantine(malformed, quarantined, claim, run_id)
                    steps.finish(source_count=quarantined, target_count=set_aside,
                                 success_count=quarantined, failure_count=0,
                                 output=json.dumps({"table": self.job.quarantine_name,
                                                    "delta_num": quarantine.delta_num if quarantine else None}))
                end = reached if reached is not None else data_range.end
                # An open window holds nothing yet: end = start keeps it due until it closes.
                logged_end = data_range.start if window_open else end

                # The delta the range's rows are committed in: a revert of the table finds
                # the range by it (`JobLog.mark_reverted`).
                target = (table.name, hot.delta_num if changed else None)

                def log_success(conn: Connection) -> None:
                    self.log.mark_success(claim.job_id, logged_end, conn=conn, run_id=run_id, target=target)
                    for step in steps.done:
                        self.log.record_step(claim.job_id, claim.attempt, step, conn=conn)

                commit_ts: float | None = None
                delta_num: int | None = None
                with profiler.phase("commit"):
                    if not changed:
                        hot.rollback()  # nothing changed: no empty delta for readers to process
                        hot = None
                    committed = [h for h in (hot, quarantine) if h is not None]
                    if committed:  # job_log SUCCESS with the deltas
                        with commit_transaction(committed) as commit:
                            log_success(commit.conn)
                        commit_ts, delta_num = commit.commit_ts, hot.delta_num if hot is not None else None
                    else:
                        with self.plane.begin() as conn:
                            log_success(conn)
        except ClaimLostError:
            self._discard(hot)
            self._discard(quarantine)
            raise
        except Exception as exc:
            self._discard(hot)
            self._discard(quarantine)
            self._record_failure(claim, steps, exc)
            raise IngestionError(
                f"job {self.job.name!r} range {data_range.start!r}..{data_range.end!r} failed "
                f"(job_id {claim.job_id}, attempt {claim.attempt}): {_one_line(exc)}"
            ) from _source_error(exc)
        profile = profiler.finish()
        logger.debug("ingestion %s range %r..%r: %s", self.job.name, data_range.start, end, profile.describe())
        return RangeResult(
            claim.job_id, claim.attempt, replace(data_range, end=end), rows_read,
            stats.rows_upserted, stats.rows_deleted, stats.rows_unchanged, delta_num, commit_ts,
            claim.previous_run_id if claim.took_over else None, window_open, profile,
            keys_written=stats.keys_written, superseded_in_range=stats.rows_superseded,
            rows_quarantined=quarantined,
            quarantine_delta_num=quarantine.delta_num if quarantine is not None else None,
        )

    def _claim(self, data_range: DataRange, pending: list[DataRange], planned: DataRange | None,
               window_open: bool, run_id: str, runtime_args: dict[str, Any] | None) -> Claim:
        return claim_range(
            self.log, self.job.name, data_range, pending, run_id=run_id,
            policy=self.job.claim_policy, workflow_name=self.job.workflow_name,
            period=self.job.planner.period_minutes,
            load_type=self.job.load_type,
            runtime_args={**(runtime_args or {}), "refresh": data_range.refresh,
                          **({"open_window": True} if window_open else {}),
                          **_backlog_args(planned)},
        )

    def _as_recorded(self, data_range: DataRange) -> DataRange:
        """A range that has run keeps the end job_log recorded for it: ids and Kafka
        offsets, whose ends are decided when a range runs (time windows and upstream
        ranges are their own bounds). Another end asked for such a range is refused."""
        if data_range.kind not in (RangeKind.AUTO_INC_ID, RangeKind.KAFKA_OFFSET):
            return data_range
        end = recorded_end(self.log.get_range(self.job.name, data_range.start))
        if end is None or data_range.end == end:
            return data_range
        if data_range.end is not None:
            raise PlanningError(
                f"job {self.job.name!r} range {data_range.start!r} has run as "
                f"{data_range.start!r}..{end!r} (job_log); a range keeps its bounds once it has "
                f"run, so it cannot run to {data_range.end!r}: run it with its end (or none)"
            )
        return replace(data_range, end=end)

    def _was_reverted(self, data_range: DataRange) -> bool:
        row = self.log.get_range(self.job.name, data_range.start)
        return row is not None and row.status == JobStatus.REVERTED

    def _read_held(self, data_range: DataRange) -> HeldRange | None:
        """The range's rows read by the driver for its own write (`held.py`), None when
        Spark reads and writes them: more than `held_rows_limit` rows or
        `HELD_BYTES_LIMIT` bytes of them, or a job, source,
        target or rows the driver does not write. Without an id range bounding its
        lookups, the target may hold at most `held_rows_limit` versions."""
        source = self.job.source
        if self.held_rows_limit <= 0 or not isinstance(source, HeldRangeSource) or not may_hold(self.job):
            return None
        marked = self.job.on_malformed == OnMalformed.QUARANTINE
        batch = source.read_held(data_range, self.held_rows_limit, HELD_BYTES_LIMIT, marked)
        held = None if batch is None else held_range(self.job, batch)
        if held is None or held.key_range is not None:
            return held
        name = self.job.target.name
        stored = DeltaCatalog(self.plane).versions_stored([name])[name]
        return held if stored is not None and stored <= self.held_rows_limit else None

    def _record_end(self, data_range: DataRange, claim: Claim) -> DataRange:
        """The range with its end decided, when it has none (the head range: a Kafka
        range's offsets, an id range's max id, read from the source now), and recorded in
        job_log before a row is read, so that whatever runs the range next reads this same
        slice. A source that is no `RangeEndSource` decides its end as it reads."""
        if data_range.end is not None or not isinstance(self.job.source, RangeEndSource):
            return data_range
        end = self.job.source.range_end(data_range)
        if end is None:
            return data_range
        self.log.record_end(claim.job_id, end, run_id=claim.run_id)
        return replace(data_range, end=end)

    @property
    def holder(self) -> str:
        """The holder name of the hot deltas this job opens."""
        return self.writes.holder

    @staticmethod
    def _discard(hot: HotDelta | None) -> None:
        if hot is not None and hot.is_open:
            hot.rollback()

    def _record_failure(self, claim: Claim, steps: _Steps, exc: BaseException) -> None:
        error = _one_line(exc)
        with self.plane.begin() as conn:
            if self.log.mark_failure(claim.job_id, error, conn=conn, run_id=claim.run_id):
                for step in steps.failed(error):
                    self.log.record_step(claim.job_id, claim.attempt, step, conn=conn)


def _as_planned(requested: DataRange, planned: DataRange) -> DataRange:
    """The requested range, run as the planner planned the range at its start: due again
    (an empty or upstream re-run) is a refresh; an end left to the run (`id:100-`, an old
    partition key) is the planned end, so it stays within the planner's bound."""
    if planned.refresh:
        requested = replace(requested, refresh=True)
    if requested.end is None:
        requested = replace(requested, end=planned.end)
    return requested


def _backlog_args(planned: DataRange | None) -> dict[str, Any]:
    """The backlog the range belongs to, recorded in job_log's runtime_args for progress."""
    if planned is None or planned.backlog is None:
        return {}
    return {"backlog_end": planned.backlog.end, "backlog_ranges": planned.backlog.ranges}


def _source_error(exc: BaseException) -> BaseException:
    """The source's own error when `exc` is an executor's Python worker failing with one
    (a SQL slice's malformed value, a Kafka slice's broker timeout: sources read on the
    executors), chained to Spark's error; else `exc`. So a range fails with the same
    error type wherever its rows were read."""
    lines = str(exc).strip().splitlines() if isinstance(exc, PythonException) else []
    found = _WORKER_ERROR.fullmatch(lines[-1]) if lines else None
    kind = getattr(range_errors, found["name"], None) if found else None
    if not (isinstance(kind, type) and issubclass(kind, SourceError)):
        return exc
    error = kind(found["message"])
    error.__cause__ = exc
    return error


_WORKER_ERROR = re.compile(r"offset_assets\.ranges\.errors\.(?P<name>\w+): (?P<message>.*)")


def _one_line(exc: BaseException) -> str:
    """What failed, in one line for job_log. An error raised in an executor's Python
    worker (a source's read) arrives as a PythonException whose first line only says so;
    its last line is the worker's own error."""
    text = str(exc).strip()
    lines = text.splitlines()
    if isinstance(exc, PythonException) and lines:
        return lines[-1]
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"
