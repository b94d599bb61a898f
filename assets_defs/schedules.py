"""Schedules: daily windows of the source, an hourly incremental cadence, and the checks.

- `post_updates_schedule`, `profiles_schedule`: each daily window once it has closed;
- `transformations_hourly`: `enriched_posts` and `user_post_stats` every hour, beside
  the offset sensors (a run with nothing new is cheap: its changed index is empty);
- `offset_checks`: the offset-age and backlog checks every 30 minutes, without
  materializing, so a transformation that stopped running still shows its lag.
"""

import dagster as dg

from assets_defs.assets.ingestion import Ingestion
from assets_defs.assets.transformations import TRANSFORMATIONS
from assets_defs.checks import OFFSET_CHECKS
from offset_assets.dagster_adapter import build_incremental_schedule, build_offset_checks_schedule
from offset_assets.dagster_adapter.ingestion_assets import build_ingestion_schedule


def build_schedules(ingestion: Ingestion) -> list[dg.ScheduleDefinition]:
    return [
        build_ingestion_schedule(ingestion.post_updates),
        build_ingestion_schedule(ingestion.profiles),
        build_incremental_schedule(TRANSFORMATIONS, "15 * * * *", name="transformations_hourly"),
        build_offset_checks_schedule(OFFSET_CHECKS, "*/30 * * * *", name="offset_checks"),
    ]
