"""Ingestion assets: one partition = one log-driven data range, ingested exactly once.

`ingestion_asset(job)` builds a partitioned Dagster asset from an `IngestionJob`
(source, planner, target table). Materializing a partition runs `RangeIngestion.run_range`
for its range under the Dagster run id: the range's rows and its job_log SUCCESS
commit together. Which run it is:
- the next range of the job (pointer, or the failed range to retry): a plain run;
  a later range fails with "waits for earlier range ..." (ranges run in order);
- a range already ingested, a backfill (tag `dagster/backfill`) or a run tagged
  `offset_assets/refresh`: a refresh, re-ingesting the range without moving the pointer
  past a gap; rows that did not change create no version.

Time-window jobs get `TimeWindowPartitionsDefinition`s (a schedule from
`build_ingestion_schedule` runs each window as it closes); id, Kafka and upstream jobs
get dynamic partitions, added by `build_ingestion_sensor`, which plans the next ranges
from job_log and requests a run for the first one.

Like `incremental_asset`, the body takes its Spark session, control plane and
warehouse from the `OffsetIOManager` under `io_manager_key`, which also serves the
ingested table to downstream assets.
"""

# No `from __future__ import annotations`: Dagster inspects the decorated functions'
# annotations (the context type) at definition time, so they must not be strings.

import dataclasses
import uuid
from collections.abc import Callable, Mapping
from typing import Any

import dagster as dg

from offset_assets.control_plane.database import ControlPlane
from offset_assets.control_plane.job_log import JobLog, JobStatus
from offset_assets.dagster_adapter.backfill import BACKFILL_TAG
from offset_assets.dagster_adapter.metadata import TABLE_KEY, table_name_for
from offset_assets.dagster_adapter.offset_store import OffsetStore
from offset_assets.dagster_adapter.partitions import (
    range_for_partition,
    range_partition_key,
    time_window_partitions,
)
from offset_assets.errors import OffsetAssetsError
from offset_assets.ranges.ingestion import IngestionJob, RangeIngestion, RangeResult, plan_ranges
from offset_assets.ranges.planners import DataRange, TimeWindowPlanner

REFRESH_TAG = "offset_assets/refresh"
_FALSE_VALUES = frozenset({"false", "0", "no", "off", ""})


def ingestion_partitions(job: IngestionJob, end_offset: int = 0) -> dg.PartitionsDefinition:
    """Time windows for a time-window job, else dynamic partitions named after the job."""
    if isinstance(job.planner, TimeWindowPlanner):
        return time_window_partitions(job.planner, end_offset=end_offset)
    return dg.DynamicPartitionsDefinition(name=f"{job.name}_ranges")


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


def ingestion_asset(
    job: IngestionJob,
    *,
    key_prefix: str | list[str] | None = None,
    io_manager_key: str = "io_manager",
    end_offset: int = 0,
    metadata: Mapping[str, Any] | None = None,
    **asset_kwargs: Any,
) -> dg.AssetsDefinition:
    """A partitioned asset ingesting `job`'s ranges into its target versioned table.

    The asset key is `key_prefix` + `job.name`; its versioned table must be the one the
    IO manager serves for that key (`job.target.name`). Other keyword arguments
    (group_name, description, owners, tags, deps, retry_policy, ...) go to `dg.asset`.
    """
    asset_key = dg.AssetKey([*_as_list(key_prefix), job.name])
    if table_name_for(asset_key) != job.target.name:
        raise dg.DagsterInvalidDefinitionError(
            f"ingestion asset {asset_key.to_user_string()} is read downstream as table "
            f"{table_name_for(asset_key)!r}, but its job writes {job.target.name!r}: "
            "name the target table after the asset key"
        )
    partitions_def = ingestion_partitions(job, end_offset)

    @dg.asset(
        key=asset_key,
        partitions_def=partitions_def,
        required_resource_keys={io_manager_key},
        io_manager_key=io_manager_key,
        kinds=asset_kwargs.pop("kinds", {"spark"}),
        description=asset_kwargs.pop(
            "description",
            f"Ingests {job.source.source_type} data by {job.planner.kind} ranges into the "
            f"versioned table {job.target.name!r}, one partition per job_log range.",
        ),
        metadata={
            TABLE_KEY: job.target.name,
            "offset_assets/log_driven_type": str(job.planner.kind),
            "offset_assets/source_type": job.source.source_type,
            **(metadata or {}),
        },
        **asset_kwargs,
    )
    def _ingest(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
        io_manager = getattr(context.resources, io_manager_key)
        policy = job.claim_policy
        if policy.is_run_dead is None:
            policy = dataclasses.replace(policy, is_run_dead=dagster_run_is_dead(context.instance))
        ingestion = RangeIngestion(io_manager.spark.spark_session, io_manager.control_plane(),
                                   dataclasses.replace(job, claim_policy=policy),
                                   warehouse=io_manager.warehouse)
        results: list[tuple[str, RangeResult]] = []
        for key in _partition_keys(context):
            data_range = _range_to_run(ingestion.log, job, partitions_def, key, context.run.tags)
            context.log.info(f"{job.name}: ingesting range {key} "
                             f"({'refresh' if data_range.refresh else 'in order'})")
            try:
                result = ingestion.run_range(data_range, run_id=context.run_id,
                                             runtime_args={"partition_key": key})
            except OffsetAssetsError as exc:
                raise dg.Failure(description=f"{job.name} range {key}: {exc}") from exc
            results.append((key, result))
        return dg.MaterializeResult(metadata=_metadata(results))

    return _ingest


def _as_list(prefix: str | list[str] | None) -> list[str]:
    if prefix is None:
        return []
    return [prefix] if isinstance(prefix, str) else list(prefix)


def _partition_keys(context: dg.AssetExecutionContext) -> list[str]:
    # A single-run backfill passes a key range: its ranges run in order, in one run.
    return list(context.partition_keys) if context.has_partition_key_range else [
        context.partition_key]


def _range_to_run(log: JobLog, job: IngestionJob, partitions_def: dg.PartitionsDefinition,
                  key: str, tags: Mapping[str, str]) -> DataRange:
    data_range = range_for_partition(partitions_def, key)
    if data_range.kind != job.planner.kind:
        raise dg.Failure(description=f"{job.name}: partition {key!r} is a {data_range.kind} "
                                     f"range, the job plans {job.planner.kind} ranges")
    existing = log.get_range(job.name, data_range.start)
    done = (existing is not None and existing.status == JobStatus.SUCCESS
            and existing.data_range_end != existing.data_range_start)
    refresh_tag = tags.get(REFRESH_TAG)
    asked = refresh_tag is not None and refresh_tag.strip().lower() not in _FALSE_VALUES
    return dataclasses.replace(data_range, refresh=done or asked or BACKFILL_TAG in tags)


def _metadata(results: list[tuple[str, RangeResult]]) -> dict[str, Any]:
    if len(results) == 1:
        key, result = results[0]
        fields = {"partition_key": key, **result.as_metadata()}
        return {k: v for k, v in fields.items() if v is not None}
    return {
        "partition_keys": [key for key, _ in results],
        "rows_read": sum(r.rows_read for _, r in results),
        "rows_upserted": sum(r.rows_upserted for _, r in results),
        "rows_deleted": sum(r.rows_deleted for _, r in results),
        "rows_unchanged": sum(r.rows_unchanged for _, r in results),
        "delta_nums": [r.delta_num for _, r in results if r.delta_num is not None],
    }


# -- sensor and schedule ---------------------------------------------------------------


def build_ingestion_sensor(
    job: IngestionJob,
    assets_def: dg.AssetsDefinition,
    *,
    name: str | None = None,
    minimum_interval_seconds: int = 60,
    default_status: dg.DefaultSensorStatus = dg.DefaultSensorStatus.STOPPED,
) -> dg.SensorDefinition:
    """A sensor that plans `job`'s next ranges from job_log, adds them as dynamic
    partitions of `assets_def` and requests a run of the first one (ranges run in
    order). Reads the control plane (the `OffsetStore` resource under the key
    `offset_store`) and the source's max id or offsets; never Spark."""
    partitions_def = assets_def.partitions_def
    if not isinstance(partitions_def, dg.DynamicPartitionsDefinition):
        raise dg.DagsterInvalidDefinitionError(
            f"asset {assets_def.key.to_user_string()} has no dynamic range partitions "
            "(time-window ingestion is scheduled with build_ingestion_schedule)"
        )

    @dg.sensor(
        name=name or f"{job.name}_ranges_sensor",
        target=[assets_def.key],
        minimum_interval_seconds=minimum_interval_seconds,
        default_status=default_status,
        description=f"Plans the next {job.planner.kind} ranges of {job.name} from job_log "
                    "and materializes them in order.",
    )
    def _sensor(context: dg.SensorEvaluationContext,
                offset_store: OffsetStore) -> dg.SensorResult | dg.SkipReason:
        return evaluate_ingestion_sensor(job, partitions_def, offset_store.control_plane(),
                                         context.instance)

    return _sensor


def evaluate_ingestion_sensor(
    job: IngestionJob,
    partitions_def: dg.DynamicPartitionsDefinition,
    plane: ControlPlane,
    instance: dg.DagsterInstance,
) -> dg.SensorResult | dg.SkipReason:
    log = JobLog(plane)
    pending = plan_ranges(job, log)
    if not pending:
        return dg.SkipReason(f"{job.name}: no new range at the source")
    keys = [range_partition_key(r) for r in pending]
    first = pending[0]
    row = log.get_range(job.name, first.start)
    if row is not None and row.status != JobStatus.SUCCESS:
        # Retry exactly the range that failed (or whose run died), under its own key.
        keys[0] = row.runtime_args_dict.get("partition_key", keys[0])
    known = set(instance.get_dynamic_partitions(partitions_def.name))
    new_keys = list(dict.fromkeys(k for k in keys if k not in known))
    requests = [partitions_def.build_add_request(new_keys)] if new_keys else []
    policy = job.claim_policy
    is_dead = policy.is_run_dead or dagster_run_is_dead(instance)
    if row is not None and row.status == JobStatus.RUNNING and not log.is_stale(
        row, policy.stale_after_s, is_dead
    ):
        return dg.SensorResult(
            dynamic_partitions_requests=requests,
            skip_reason=f"{job.name}: range {keys[0]} is running under run {row.run_id}",
        )
    attempt = (row.attempt if row is not None else 0) + 1
    run = dg.RunRequest(run_key=f"{keys[0]}#{attempt}", partition_key=keys[0])
    return dg.SensorResult(run_requests=[run], dynamic_partitions_requests=requests)


def build_ingestion_schedule(
    assets_def: dg.AssetsDefinition,
    *,
    name: str | None = None,
    default_status: dg.DefaultScheduleStatus = dg.DefaultScheduleStatus.STOPPED,
) -> dg.ScheduleDefinition:
    """A schedule materializing each time window of a time-window ingestion asset once
    it has closed (the cadence is the planner's period)."""
    if not isinstance(assets_def.partitions_def, dg.TimeWindowPartitionsDefinition):
        raise dg.DagsterInvalidDefinitionError(
            f"asset {assets_def.key.to_user_string()} is not time-window partitioned "
            "(dynamic ranges are launched by build_ingestion_sensor)"
        )
    asset_name = assets_def.key.to_python_identifier()
    job = dg.define_asset_job(f"{asset_name}_ingestion", selection=[assets_def.key],
                              partitions_def=assets_def.partitions_def)
    return dg.build_schedule_from_partitioned_job(
        job, name=name or f"{asset_name}_schedule", default_status=default_status
    )
