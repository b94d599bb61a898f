"""Sensors: new rows at the source, and new commits beyond the transformations' offsets.

- `transformations_automation` evaluates the transformations' automation conditions
  (`on_input_commits`: run once an upstream asset materialized, nothing upstream still
  running). It starts running: any ingestion run in Dagster (a partition launched from
  the UI, today's included, a schedule, `posts_ranges_sensor`, a backfill, a refresh) is
  followed by the incremental runs.
- `enriched_posts_inputs_changed` / `user_post_stats_inputs_changed` /
  `moderated_posts_inputs_changed` run a transformation
  when one of its inputs has commits beyond its offsets that automation left: commits
  made outside Dagster (engine API, CLI), a failed run's work, anything while automation
  is off. A control-plane query per tick, never Spark; they wait while an upstream run
  is under way and leave commits made in Dagster to automation for two minutes, so the
  two never run one transformation twice at once. They start running too.
- `posts_ranges_sensor` plans the next id range of `posts` from job_log and the source's
  max id, adds it as a dynamic partition and runs it (ranges run in order). It starts
  stopped: turn it on in the UI (Automation) once the demo has run.
"""

import dagster as dg

from assets_defs.assets.ingestion import Ingestion
from assets_defs.assets.transformations import (
    TRANSFORMATIONS,
    enriched_posts,
    moderated_posts,
    user_post_stats,
)
from offset_assets.dagster_adapter import build_ingestion_sensor, build_offset_sensor

SOURCE_POLL_S = 60
OFFSET_POLL_S = 30
AUTOMATION_POLL_S = 30


def build_sensors(ingestion: Ingestion) -> list[dg.SensorDefinition]:
    return [
        dg.AutomationConditionSensorDefinition(
            "transformations_automation",
            target=dg.AssetSelection.assets(*TRANSFORMATIONS),
            default_status=dg.DefaultSensorStatus.RUNNING,
            minimum_interval_seconds=AUTOMATION_POLL_S,
            description="Runs the transformations once their inputs committed.",
        ),
        build_ingestion_sensor(ingestion.posts_job, ingestion.posts,
                               minimum_interval_seconds=SOURCE_POLL_S),
        build_offset_sensor(enriched_posts, minimum_interval_seconds=OFFSET_POLL_S,
                            default_status=dg.DefaultSensorStatus.RUNNING),
        build_offset_sensor(user_post_stats, minimum_interval_seconds=OFFSET_POLL_S,
                            default_status=dg.DefaultSensorStatus.RUNNING),
        build_offset_sensor(moderated_posts, minimum_interval_seconds=OFFSET_POLL_S,
                            default_status=dg.DefaultSensorStatus.RUNNING),
    ]
