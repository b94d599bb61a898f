"""Schedules: daily windows of the source, and the checks.

- `post_updates_schedule`, `profiles_schedule`: each daily window once it has closed;
- `offset_checks`: the offset-age and backlog checks every 30 minutes, without
  materializing, so a transformation that stopped running still shows its lag.

The transformations need no schedule: declarative automation runs them when their
inputs commit (`assets/transformations.py`).
"""

import dagster as dg

from assets_defs.assets.ingestion import Ingestion
from assets_defs.checks import OFFSET_CHECKS
from offset_assets.dagster_adapter import build_ingestion_schedule, build_offset_checks_schedule


def build_schedules(ingestion: Ingestion) -> list[dg.ScheduleDefinition]:
    return [
        build_ingestion_schedule(ingestion.post_updates),
        build_ingestion_schedule(ingestion.profiles),
        build_offset_checks_schedule(OFFSET_CHECKS, "*/30 * * * *", name="offset_checks"),
    ]
