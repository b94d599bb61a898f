"""The schedule of a time-window ingestion asset: each window runs once it has closed."""

# No `from __future__ import annotations`: Dagster inspects the decorated functions'
# annotations (the context type) at definition time, so they must not be strings.

from datetime import UTC, datetime

import dagster as dg

from offset_assets.dagster_adapter.ingestion.assets import ingestion_job


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
