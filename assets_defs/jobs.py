"""Jobs launched by hand: the backfill-reset path of the transformations.

`reprocess_transformations` carries the tag `offset_assets/reset`: each asset resets its
offsets first and reprocesses every key (the reset is in the materialization metadata,
`offsets_reset` / `reset_reason`). A Dagster backfill of these assets (tag
`dagster/backfill`) does the same.
"""

import dagster as dg

from assets_defs.assets.transformations import TRANSFORMATIONS
from offset_assets.dagster_adapter import RESET_TAG

reprocess_transformations = dg.define_asset_job(
    "reprocess_transformations",
    selection=dg.AssetSelection.assets(*TRANSFORMATIONS),
    tags={RESET_TAG: "true"},
    description="Reset the offsets of enriched_posts and user_post_stats and recompute every key.",
)

JOBS = [reprocess_transformations]
