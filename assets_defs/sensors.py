"""Sensors: new rows at the source, and new commits beyond the transformations' offsets.

- `posts_ranges_sensor` plans the next id range of `posts` from job_log and the source's
  max id, adds it as a dynamic partition and runs it (ranges run in order).
- `enriched_posts_inputs_changed` / `user_post_stats_inputs_changed` /
  `moderated_posts_inputs_changed` run a transformation
  when one of its inputs has commits beyond its offsets: a control-plane query per tick,
  never Spark. Declarative automation already runs the transformations after ingestion
  in Dagster; these sensors are for inputs written outside Dagster (engine API, CLI).

These four start stopped; turn them on in the UI (Automation) once the demo has run.

- `transformations_automation` evaluates the transformations' automation conditions
  (`on_input_commits`: run once an upstream asset materialized). It starts running, so
  ingestion launched from the UI (or by `posts_ranges_sensor`) is followed by the
  incremental runs without anything else to switch on.
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
        build_offset_sensor(enriched_posts, minimum_interval_seconds=OFFSET_POLL_S),
        build_offset_sensor(user_post_stats, minimum_interval_seconds=OFFSET_POLL_S),
        build_offset_sensor(moderated_posts, minimum_interval_seconds=OFFSET_POLL_S),
    ]
