"""Layer 2: versioned tables on Spark: hot, actual and archive records kept
as numbered, immutable deltas of Parquet files, made visible by the delta catalog."""

from offset_assets.versioned.commit import commit_deltas
from offset_assets.versioned.hot_delta import HotDelta
from offset_assets.versioned.revert import RevertPlan, RevertResult, plan_revert, revert_table
from offset_assets.versioned.table import VersionedTable
from offset_assets.versioned.writes import WriteStats

__all__ = [
    "HotDelta",
    "RevertPlan",
    "RevertResult",
    "VersionedTable",
    "WriteStats",
    "commit_deltas",
    "plan_revert",
    "revert_table",
]
