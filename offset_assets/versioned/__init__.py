"""Layer 2: versioned tables on Spark: hot, actual and archive records kept
as numbered, immutable deltas of Parquet files, made visible by the delta catalog."""

from offset_assets.lazy_exports import lazy_getattr

# Resolved on first use: the reads without a JVM use this package's layout and errors,
# and must not import PySpark with it.
_EXPORTS = {
    "HotDelta": "offset_assets.versioned.hot_delta",
    "RevertPlan": "offset_assets.versioned.revert",
    "RevertResult": "offset_assets.versioned.revert",
    "VersionedTable": "offset_assets.versioned.table",
    "WriteStats": "offset_assets.versioned.writes",
    "commit_deltas": "offset_assets.versioned.commit",
    "plan_revert": "offset_assets.versioned.revert",
    "revert_table": "offset_assets.versioned.revert",
}

__all__ = ["HotDelta", "RevertPlan", "RevertResult", "VersionedTable", "WriteStats", "commit_deltas",
           "plan_revert", "revert_table"]

__getattr__ = lazy_getattr(__name__, _EXPORTS)
