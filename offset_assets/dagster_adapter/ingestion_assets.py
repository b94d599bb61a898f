"""Ingestion assets: one partition = one log-driven data range, ingested exactly once.

`ingestion_asset(job)` builds a partitioned Dagster asset from an `IngestionJob`
(source, planner, target table). Materializing a partition runs `RangeIngestion.run_range`
for its range under the Dagster run id: the range's rows and its job_log SUCCESS
commit together. Which run it is:
- the next range of the job (pointer, or the failed range to retry): a plain run;
  a later range fails with "waits for earlier range ..." (ranges run in order);
- the current time window, not ended yet (today's, for daily windows): what the source
  holds so far, re-ingested at every run while the window grows; the window stays due
  and is ingested again, whole, once it has closed;
- a range already ingested, a backfill (tag `dagster/backfill`) or a run tagged
  `offset_assets/refresh`: a refresh, re-ingesting the range without moving the pointer
  past a gap; rows that did not change create no version.

Time-window jobs get `TimeWindowPartitionsDefinition`s whose last partition is the
current window (`end_offset=1`): a partition Dagster does not list cannot be launched
from the UI, and a materialization of a key outside the partitions definition is
dropped by declarative automation (it never counts as an update of the asset). A
schedule from `build_ingestion_schedule` runs each window as it closes. Id, Kafka and
upstream jobs get dynamic partitions, added by `build_ingestion_sensor`, which plans the
next ranges from job_log and requests a run for the first one.

Like `incremental_asset`, the body takes its Spark session, control plane and
warehouse from the typed `IncrementalEngineResource` (resource key
`incremental_engine`); the `OffsetIOManager` under `io_manager_key` serves the ingested
table to downstream assets.
"""

# No `from __future__ import annotations`: Dagster inspects the decorated functions'
# annotations (the context type) at definition time, so they must not be strings.

import dataclasses
import json
import uuid
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

import dagster as dg
from dagster._core.definitions.unresolved_asset_job_definition import UnresolvedAssetJobDefinition

from offset_assets.control_plane.database import ControlPlane
from offset_assets.control_plane.delta_catalog import DeltaCatalog
from offset_assets.control_plane.job_log import JobLog
from offset_assets.control_plane.job_log.records import JobStatus
from offset_assets.dagster_adapter.asset_spec import TABLE_KEY, table_name_for
from offset_assets.dagster_adapter.backfill import BACKFILL_TAG
from offset_assets.dagster_adapter.engine_resource import IncrementalEngineResource
from offset_assets.dagster_adapter.offset_store import OffsetStore
from offset_assets.dagster_adapter.partitions import (
    range_for_partition,
    range_partition_key,
    time_window_partitions,
)
from offset_assets.errors import OffsetAssetsError
from offset_assets.ranges.ingestion import (
    IngestionJob,
    RangeIngestion,
    RangeResult,
    is_open_window,
    plan_ranges,
)
from offset_assets.ranges.planners import DataRange, RangeKind, TimeWindowPlanner, parse_time

REFRESH_TAG = "offset_assets/refresh"
_FALSE_VALUES = frozenset({"false", "0", "no", "off", ""})


def ingestion_partitions(job: IngestionJob, end_offset: int = 1) -> dg.PartitionsDefinition:
    """Time windows for a time-window job (with `end_offset=1`, the last one is the current
    window), else dynamic partitions named after the job."""
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
    end_offset: int = 1,
    metadata: Mapping[str, Any] | None = None,
    feeds: dg.AssetKey | str | None = None,
    **asset_kwargs: Any,
) -> dg.AssetsDefinition:
    """A partitioned asset ingesting `job`'s ranges into its target versioned table.

    The asset key is `key_prefix` + `job.name`; its versioned table must be the one the
    IO manager serves for that key (`job.target.name`), unless `feeds` names another
    asset whose table the job writes into (a second ingestion path of one table, like
    edits by time window beside inserts by id range). Downstream assets then read that
    asset's table, and list this one in their `deps` for lineage. Other keyword
    arguments (group_name, description, owners, tags, deps, retry_policy, ...) go to
    `dg.asset`. The body runs on the `IncrementalEngineResource` under the resource key
    `incremental_engine`.

    `end_offset` (time windows only): how many windows past the last closed one are
    partitions. The default 1 lists the current window, so that what arrived today can
    be ingested from the UI (as it grows; see the module docstring); 0 lists closed
    windows only.
    """
    asset_key = dg.AssetKey([*_as_list(key_prefix), job.name])
    read_as = dg.AssetKey.from_coercible(feeds) if feeds is not None else asset_key
    if table_name_for(read_as) != job.target.name:
        raise dg.DagsterInvalidDefinitionError(
            f"ingestion asset {asset_key.to_user_string()} writes table {job.target.name!r}, "
            f"but asset {read_as.to_user_string()} is read downstream as table "
            f"{table_name_for(read_as)!r}: name the target table after the asset key, or "
            "pass feeds=<the asset whose table it writes>"
        )
    partitions_def = ingestion_partitions(job, end_offset)
    writes = (f"the versioned table {job.target.name!r}" if feeds is None else
              f"the versioned table {job.target.name!r} of asset {read_as.to_user_string()}")

    @dg.asset(
        key=asset_key,
        partitions_def=partitions_def,
        io_manager_key=io_manager_key,
        kinds=asset_kwargs.pop("kinds", {"spark"}),
        description=asset_kwargs.pop(
            "description",
            f"Ingests {job.source.source_type} data by {job.planner.kind} ranges into "
            f"{writes}, one partition per job_log range.",
        ),
        metadata={
            TABLE_KEY: job.target.name,
            "offset_assets/log_driven_type": str(job.planner.kind),
            "offset_assets/source_type": job.source.source_type,
            **(metadata or {}),
        },
        **asset_kwargs,
    )
    def _ingest(context: dg.AssetExecutionContext,
                incremental_engine: IncrementalEngineResource) -> dg.MaterializeResult:
        policy = job.claim_policy
        if policy.is_run_dead is None:
            policy = dataclasses.replace(policy, is_run_dead=dagster_run_is_dead(context.instance))
        ingestion = RangeIngestion(incremental_engine.spark_session, incremental_engine.control_plane(),
                                   dataclasses.replace(job, claim_policy=policy),
                                   warehouse=incremental_engine.warehouse)
        results: list[tuple[str, RangeResult]] = []
        for key in _partition_keys(context):
            data_range = _range_to_run(ingestion.log, job, partitions_def, key, context.run.tags)
            context.log.info(f"{job.name}: ingesting range {key} ({_how(data_range)})")
            try:
                result = ingestion.run_range(data_range, run_id=context.run_id,
                                             runtime_args={"partition_key": key})
            except OffsetAssetsError as exc:
                raise dg.Failure(description=f"{job.name} range {key}: {exc}") from exc
            results.append((key, result))
        row_count = (incremental_engine.table(read_as).read_actual().count()
                     if incremental_engine.row_count else None)
        return dg.MaterializeResult(metadata=_metadata(results, row_count))

    return _ingest


def _as_list(prefix: str | list[str] | None) -> list[str]:
    if prefix is None:
        return []
    return [prefix] if isinstance(prefix, str) else list(prefix)


def _partition_keys(context: dg.AssetExecutionContext) -> list[str]:
    # A single-run backfill passes a key range: its ranges run in order, in one run.
    return list(context.partition_keys) if context.has_partition_key_range else [
        context.partition_key]


def _how(data_range: DataRange) -> str:
    if is_open_window(data_range, datetime.now(UTC)):
        return "open window: what the source holds so far; ingested again once it has closed"
    return "refresh" if data_range.refresh else "in order"


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


def range_bound_text(kind: RangeKind | str, bound: Any) -> str | None:
    """A range bound as a person reads it: time-window bounds (stored as the seed's
    `YYYYMMDDHHMMSS`) as ISO 8601 UTC, ids and Kafka offsets as they are."""
    if bound is None:
        return None
    if str(kind) == str(RangeKind.TIME_WINDOW):
        return parse_time(str(bound)).isoformat() + "Z"
    return bound if isinstance(bound, str) else json.dumps(bound, sort_keys=True)


def _metadata(results: list[tuple[str, RangeResult]], row_count: int | None) -> dict[str, Any]:
    """Typed metadata (ints plot, timestamps show as dates) of the ranges one run ingested."""
    metadata: dict[str, Any] = {}
    if row_count is not None:
        metadata["dagster/row_count"] = dg.MetadataValue.int(row_count)
    if len(results) == 1:
        key, result = results[0]
        kind = result.data_range.kind
        fields = {
            "partition_key": dg.MetadataValue.text(key),
            "job_id": dg.MetadataValue.int(result.job_id),
            "attempt": dg.MetadataValue.int(result.attempt),
            "log_driven_type": dg.MetadataValue.text(str(kind)),
            "data_range_start": range_bound_text(kind, result.data_range.start),
            "data_range_end": range_bound_text(kind, result.data_range.end),
            "refresh": dg.MetadataValue.bool(result.data_range.refresh),
            "open_window": dg.MetadataValue.bool(result.open_window),
            "rows_read": dg.MetadataValue.int(result.rows_read),
            "rows_upserted": dg.MetadataValue.int(result.rows_upserted),
            "rows_deleted": dg.MetadataValue.int(result.rows_deleted),
            "rows_unchanged": dg.MetadataValue.int(result.rows_unchanged),
            "delta_num": (dg.MetadataValue.int(result.delta_num) if result.delta_num is not None
                          else None),
            "commit_ts": (dg.MetadataValue.timestamp(result.commit_ts) if result.commit_ts is not None
                          else None),
            "took_over_run_id": result.took_over_run_id,
        }
        return {**metadata, **{k: v for k, v in fields.items() if v is not None}}
    return {
        **metadata,
        "partition_keys": [key for key, _ in results],
        "rows_read": dg.MetadataValue.int(sum(r.rows_read for _, r in results)),
        "rows_upserted": dg.MetadataValue.int(sum(r.rows_upserted for _, r in results)),
        "rows_deleted": dg.MetadataValue.int(sum(r.rows_deleted for _, r in results)),
        "rows_unchanged": dg.MetadataValue.int(sum(r.rows_unchanged for _, r in results)),
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
    order), as the job `ingestion_job(assets_def)` so the run names its target. Reads the
    control plane (the `OffsetStore` resource under the key `offset_store`) and the
    source's max id or offsets; never Spark."""
    partitions_def = assets_def.partitions_def
    if not isinstance(partitions_def, dg.DynamicPartitionsDefinition):
        raise dg.DagsterInvalidDefinitionError(
            f"asset {assets_def.key.to_user_string()} has no dynamic range partitions "
            "(time-window ingestion is scheduled with build_ingestion_schedule)"
        )

    @dg.sensor(
        name=name or f"{job.name}_ranges_sensor",
        job=ingestion_job(assets_def),
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
    run = dg.RunRequest(run_key=f"{keys[0]}#{attempt}@{_state_stamp(job, plane)}",
                        partition_key=keys[0])
    return dg.SensorResult(run_requests=[run], dynamic_partitions_requests=requests)


def _state_stamp(job: IngestionJob, plane: ControlPlane) -> str:
    """When the job's target table was registered in this control plane.

    Dagster never launches a run key twice, while a control plane deleted and created
    again (a demo reset) plans the same ranges with the same attempts: the stamp keeps
    their run keys new. The table is registered here when needed (control plane only,
    the same spec the first write registers), so even the first range carries it."""
    target = job.target
    spec = DeltaCatalog(plane).register_table(target.name, list(target.primary_key),
                                              target.schema.json())
    return datetime.fromtimestamp(spec.created_at, UTC).strftime("%Y%m%dT%H%M%S.%fZ")


def ingestion_job(assets_def: dg.AssetsDefinition) -> UnresolvedAssetJobDefinition:
    """The job that ingests ranges of `assets_def` (`<asset>_ingestion`): what its
    schedule or sensor launches, so every run shows the job it belongs to."""
    return dg.define_asset_job(f"{assets_def.key.to_python_identifier()}_ingestion",
                               selection=[assets_def.key], partitions_def=assets_def.partitions_def)


def build_ingestion_schedule(
    assets_def: dg.AssetsDefinition,
    *,
    name: str | None = None,
    default_status: dg.DefaultScheduleStatus = dg.DefaultScheduleStatus.STOPPED,
) -> dg.ScheduleDefinition:
    """A schedule materializing each time window of a time-window ingestion asset once
    it has closed (the cadence is the planner's period).

    Not `build_schedule_from_partitioned_job`: that one runs the last partition at each
    tick, which is the window just opened when the current window is a partition too."""
    partitions_def = assets_def.partitions_def
    if not isinstance(partitions_def, dg.TimeWindowPartitionsDefinition):
        raise dg.DagsterInvalidDefinitionError(
            f"asset {assets_def.key.to_user_string()} is not time-window partitioned "
            "(dynamic ranges are launched by build_ingestion_sensor)"
        )

    @dg.schedule(
        name=name or f"{assets_def.key.to_python_identifier()}_schedule",
        job=ingestion_job(assets_def),
        cron_schedule=partitions_def.get_cron_schedule(),
        execution_timezone=partitions_def.timezone,
        default_status=default_status,
        description=f"Ingests each window of {assets_def.key.to_user_string()} once it has closed.",
    )
    def _schedule(context: dg.ScheduleEvaluationContext) -> dg.RunRequest | dg.SkipReason:
        return closed_window_request(partitions_def,
                                     context.scheduled_execution_time or datetime.now(UTC))

    return _schedule


def closed_window_request(partitions_def: dg.TimeWindowPartitionsDefinition,
                          tick: datetime) -> dg.RunRequest | dg.SkipReason:
    """A run of the window that ended at `tick` (keyed by the partition, so once only)."""
    key = partitions_def.get_partition_key_for_timestamp(tick.timestamp(), end_closed=True)
    if partitions_def.time_window_for_partition_key(key).start < partitions_def.start:
        return dg.SkipReason(f"no window has closed by {tick.isoformat()}")
    return dg.RunRequest(run_key=key, partition_key=key)
