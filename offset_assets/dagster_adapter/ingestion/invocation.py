"""`IngestionInvocation`: one materialization of an ingestion asset, opened by the asset
body (`assets.py`) on the engine resource (`IngestionInvocation.open`) and driven by it,
as an incremental asset's is (`incremental/invocation.py`).

It decides how each range of the run is ingested once, from the partition and the run's
tags (`range_to_run`: in order, an open window, or a refresh), runs the ranges in order
(`RangeIngestion.run_range`), and yields the one materialization of the run through
`report.py`, with the quarantine check's result when the job quarantines.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

import dagster as dg

from offset_assets.control_plane.job_log import JobLog
from offset_assets.control_plane.job_log.records import JobStatus
from offset_assets.dagster_adapter.engine_resource import IncrementalEngineResource
from offset_assets.dagster_adapter.incremental.backfill import BACKFILL_TAG
from offset_assets.dagster_adapter.ingestion.partitions import range_for_partition
from offset_assets.dagster_adapter.ingestion.report import ingestion_metadata, quarantine_check_result
from offset_assets.errors import OffsetAssetsError
from offset_assets.ranges.errors import RangeOrderError
from offset_assets.ranges.ingestion import IngestionJob, OnMalformed, RangeIngestion, RangeResult, is_open_window
from offset_assets.ranges.planners import DataRange

REFRESH_TAG = "offset_assets/refresh"
QUARANTINE_CHECK = "malformed_records"
_FALSE_VALUES = frozenset({"false", "0", "no", "off", ""})


@dataclass
class IngestionInvocation:
    """The ranges of one run of `job` into its target table, run by `ingestion` (the job
    with this Dagster instance's claim policy) and reported by `stream`; `row_count`
    gives the target's `dagster/row_count` once the ranges ran."""

    context: dg.AssetExecutionContext
    job: IngestionJob
    ingestion: RangeIngestion
    row_count: Callable[[], int | None]

    @classmethod
    def open(cls, context: dg.AssetExecutionContext, job: IngestionJob,
             engine: IncrementalEngineResource) -> IngestionInvocation:
        """The invocation of `ingestion_asset`'s body: the ranges of `job`, its claims
        told which Dagster runs are dead, run on `engine`."""
        return cls(context, job, engine.range_ingestion(with_dagster_claims(job, context.instance)),
                   lambda: engine.table_rows(job.target.name))

    def stream(self) -> Iterator[dg.MaterializeResult]:
        """Ingest the run's ranges in order and yield its materialization."""
        results = [(key, self._run_range(key)) for key in _partition_keys(self.context)]
        checks = ([quarantine_check_result(results, self.job.quarantine_name, QUARANTINE_CHECK)]
                  if self.job.on_malformed == OnMalformed.QUARANTINE else [])
        yield dg.MaterializeResult(metadata=ingestion_metadata(results, self.row_count()), check_results=checks)

    def _run_range(self, key: str) -> RangeResult:
        job, context = self.job, self.context
        data_range = range_to_run(self.ingestion.log, job, context.assets_def.partitions_def, key, context.run.tags)
        context.log.info(f"{job.name}: ingesting range {key} ({_how(data_range)})")
        try:
            return self.ingestion.run_range(data_range, run_id=context.run.run_id, runtime_args={"partition_key": key})
        except RangeOrderError as exc:
            raise dg.Failure(description=f"{job.name} range {key}: {exc}. "
                                         f"{how_ranges_are_added(context.asset_key)}") from exc
        except OffsetAssetsError as exc:
            raise dg.Failure(description=f"{job.name} range {key}: {exc}") from exc


def with_dagster_claims(job: IngestionJob, instance: dg.DagsterInstance) -> IngestionJob:
    """`job`, its claims told which Dagster runs are dead (unless the job says itself)."""
    if job.claim_policy.is_run_dead is not None:
        return job
    return dataclasses.replace(job, claim_policy=dataclasses.replace(
        job.claim_policy, is_run_dead=dagster_run_is_dead(instance)))


def dagster_run_is_dead(instance: dg.DagsterInstance) -> Callable[[str], bool]:
    """`is_run_dead` for claims: a Dagster run that finished (failed, canceled, or ended
    without committing) or no longer exists. Run ids not from Dagster are left to the
    heartbeat timeout."""

    def is_dead(run_id: str) -> bool:
        try:
            uuid.UUID(run_id)
        except ValueError:
            return False
        run = instance.get_run_by_id(run_id)
        return run is None or run.is_finished

    return is_dead


def how_ranges_are_added(asset_key: dg.AssetKey) -> str:
    """Where the partitions of due ranges come from, for errors about a range that is not."""
    return (f"Due ranges are planned from job_log by the asset's ingestion sensor or schedule, or "
            f"from a shell: `offset-assets ranges plan {asset_key.to_user_string()}` adds them "
            "as partitions and prints the commands that run them in order; a range already "
            f"ingested is re-run with the run tag {REFRESH_TAG}=true")


def range_to_run(log: JobLog, job: IngestionJob, partitions_def: dg.PartitionsDefinition,
                 key: str, tags: Mapping[str, str]) -> DataRange:
    """The range of partition `key`, a refresh when it was ingested already (reverted
    since, too), or the run is a backfill or tagged `offset_assets/refresh`."""
    data_range = range_for_partition(partitions_def, key)
    if data_range.kind != job.planner.kind:
        raise dg.Failure(description=f"{job.name}: partition {key!r} is a {data_range.kind} "
                                     f"range, the job plans {job.planner.kind} ranges")
    existing = log.get_range(job.name, data_range.start)
    # Ingested already, or ingested and undone by a revert of the target (loaded again).
    done = (existing is not None and existing.status in (JobStatus.SUCCESS, JobStatus.REVERTED)
            and existing.data_range_end != existing.data_range_start)
    refresh_tag = tags.get(REFRESH_TAG)
    asked = refresh_tag is not None and refresh_tag.strip().lower() not in _FALSE_VALUES
    return dataclasses.replace(data_range, refresh=done or asked or BACKFILL_TAG in tags)


def _partition_keys(context: dg.AssetExecutionContext) -> list[str]:
    # A single-run backfill passes a key range: its ranges run in order, in one run.
    return list(context.partition_keys) if context.has_partition_key_range else [
        context.partition_key]


def _how(data_range: DataRange) -> str:
    if is_open_window(data_range, datetime.now(UTC)):
        return "open window: what the source holds so far; ingested again once it has closed"
    return "refresh" if data_range.refresh else "in order"
