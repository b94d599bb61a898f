"""Sensors: new rows at the source, and new commits beyond the transformations' offsets.

- `posts_ranges_sensor` plans the next id range of `posts` from job_log and the source's
  max id, adds it as a dynamic partition and runs it (ranges run in order).
- `enriched_posts_inputs_changed` / `user_post_stats_inputs_changed` run a transformation
  when one of its inputs has commits beyond its offsets: a control-plane query per tick,
  never Spark.

All start stopped; turn them on in the UI (Automation) once the demo has run.
"""

import dagster as dg

from assets_defs.assets.ingestion import Ingestion
from assets_defs.assets.transformations import enriched_posts, user_post_stats
from offset_assets.dagster_adapter import build_offset_sensor
from offset_assets.dagster_adapter.ingestion_assets import build_ingestion_sensor

SOURCE_POLL_S = 60
OFFSET_POLL_S = 30


def build_sensors(ingestion: Ingestion) -> list[dg.SensorDefinition]:
    return [
        build_ingestion_sensor(ingestion.posts_job, ingestion.posts,
                               minimum_interval_seconds=SOURCE_POLL_S),
        build_offset_sensor(enriched_posts, minimum_interval_seconds=OFFSET_POLL_S),
        build_offset_sensor(user_post_stats, minimum_interval_seconds=OFFSET_POLL_S),
    ]
