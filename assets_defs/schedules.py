"""Schedules: daily windows of the source, and the checks.

- `post_updates_schedule`, `profiles_schedule`: each daily window once it has closed
  (off: turn them on in the UI; today's window can be materialized by hand meanwhile);
- `offset_checks`: the offset-age and backlog checks every 15 minutes, without
  materializing, running from the start: the checks otherwise run only with a
  transformation, so a backlog no run picks up would stay unseen behind a green graph.
  `offset_backlog` errors once a commit has waited 30 minutes (`checks.py`).

The transformations need no schedule: declarative automation and the offset sensors run
them when their inputs commit (`sensors.py`).
"""

import dagster as dg

from assets_defs.assets.ingestion import Ingestion
from assets_defs.checks import OFFSET_CHECKS
from offset_assets.dagster_adapter import build_ingestion_schedule, build_offset_checks_schedule

OFFSET_CHECKS_CRON = "*/15 * * * *"


def build_schedules(ingestion: Ingestion) -> list[dg.ScheduleDefinition]:
    return [
        build_ingestion_schedule(ingestion.post_updates),
        build_ingestion_schedule(ingestion.profiles),
        build_offset_checks_schedule(OFFSET_CHECKS, OFFSET_CHECKS_CRON, name="offset_checks",
                                     default_status=dg.DefaultScheduleStatus.RUNNING),
    ]
