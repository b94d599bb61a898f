"""Jobs: the transformations as one named job, their reprocess (backfill) path, and the
revert of a bad load.

- `transformations`: an incremental run of `enriched_posts` then `user_post_stats`, and
  of `moderated_posts` (`accepted_posts`, `rejected_posts`), with their checks: only what
  changed since the offsets;
- `reprocess_transformations` carries the tag `offset_assets/reset`: each asset resets
  its offsets and reprocesses every key (the reset is in the materialization metadata,
  `offsets_reset` / `reset_reason`, and in the run's tags). A Dagster backfill of these
  assets (tag `dagster/backfill`) does the same.
- `revert_table` sets a versioned table (`posts`, `profiles`) back to its state as of an
  earlier delta, as one new delta (launchpad config: `table`, `to_delta`, `dry_run`); the
  ingestion partitions whose ranges it undid show as missing, to be launched again once
  the source is fixed, and the transformations follow the revert like any commit.
"""

import dagster as dg

from assets_defs.assets.ingestion import Ingestion
from assets_defs.assets.transformations import TRANSFORMATIONS
from offset_assets.dagster_adapter import RESET_TAG, revert_job

reprocess_transformations = dg.define_asset_job(
    "reprocess_transformations",
    selection=dg.AssetSelection.assets(*TRANSFORMATIONS),
    tags={RESET_TAG: "true"},
    description="Reset the offsets of every transformation and recompute every key.",
)

transformations = dg.define_asset_job(
    "transformations",
    selection=dg.AssetSelection.assets(*TRANSFORMATIONS),
    description="Incremental runs of every transformation: only what changed.",
)

JOBS = [transformations, reprocess_transformations]


def build_revert_job(ingestion: Ingestion) -> dg.JobDefinition:
    """`revert_table`, showing the ranges it undoes in the partitions of `ingestion`'s assets."""
    return revert_job(ingestion.assets)
