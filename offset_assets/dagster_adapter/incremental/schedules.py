"""Schedules: incremental assets on a regular cadence, and their offset checks on their own.

An incremental run with nothing new is cheap (the changed index is empty), so a plain
cron cadence is a sound default beside, or instead of, the offset sensor. The checks
schedule evaluates `offset_age` / `offset_backlog` without materializing anything, so
a transformation that stopped running still gets its age and backlog checked: the
checks otherwise run only with a materialization, and a backlog that no run picks up
would never be looked at.
"""

from __future__ import annotations

from collections.abc import Sequence

import dagster as dg

from offset_assets.dagster_adapter.asset_job import AssetJob


def build_incremental_schedule(
    assets: Sequence[dg.AssetsDefinition | dg.AssetKey],
    cron_schedule: str,
    *,
    name: str,
    execution_timezone: str | None = None,
    default_status: dg.DefaultScheduleStatus = dg.DefaultScheduleStatus.STOPPED,
) -> dg.ScheduleDefinition:
    """Materialize `assets` (and run their checks) every `cron_schedule`."""
    return dg.ScheduleDefinition(
        name=name,
        cron_schedule=cron_schedule,
        target=dg.AssetSelection.assets(*assets),
        execution_timezone=execution_timezone,
        default_status=default_status,
        description=f"Incremental runs of {len(assets)} asset(s) on cron {cron_schedule!r}.",
    )


def build_offset_checks_schedule(
    checks: Sequence[dg.AssetChecksDefinition],
    cron_schedule: str,
    *,
    name: str = "offset_checks",
    execution_timezone: str | None = None,
    default_status: dg.DefaultScheduleStatus = dg.DefaultScheduleStatus.STOPPED,
) -> dg.ScheduleDefinition:
    """Run the given offset checks alone (no materialization) every `cron_schedule`."""
    return dg.ScheduleDefinition(
        name=name,
        cron_schedule=cron_schedule,
        target=offset_checks_job(checks, name=f"{name}_job"),
        execution_timezone=execution_timezone,
        default_status=default_status,
        description=f"Offset age and backlog checks on cron {cron_schedule!r}.",
    )


def offset_checks_job(checks: Sequence[dg.AssetChecksDefinition], *,
                      name: str = "offset_checks_job") -> AssetJob:
    """A job that evaluates the given checks and materializes nothing."""
    return dg.define_asset_job(name=name, selection=dg.AssetSelection.checks(*checks))
