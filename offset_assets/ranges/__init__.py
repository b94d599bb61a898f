"""Layer 4: log-driven ingestion. Data ranges are planned from job_log
(`planners/`, pure), claimed atomically (`claims.py`), read from a source
(`sources/`: SQL, Kafka, folders) and committed into a versioned table together with their
job_log SUCCESS (`ingestion/`). Names are resolved lazily: planning needs no Spark."""

from __future__ import annotations

from offset_assets.lazy_exports import lazy_getattr

_EXPORTS = {
    "DataRange": "offset_assets.ranges.planners",
    "RangeKind": "offset_assets.ranges.planners",
    "PlanInputs": "offset_assets.ranges.planners",
    "TimeWindowPlanner": "offset_assets.ranges.planners",
    "AutoIncrementIdPlanner": "offset_assets.ranges.planners",
    "KafkaOffsetPlanner": "offset_assets.ranges.planners",
    "UpstreamPlanner": "offset_assets.ranges.planners",
    "ClaimPolicy": "offset_assets.ranges.claims",
    "SqlTableSource": "offset_assets.ranges.sources.sql",
    "FolderSource": "offset_assets.ranges.sources.folder",
    "KafkaSource": "offset_assets.ranges.sources.kafka",
    "IngestionJob": "offset_assets.ranges.ingestion",
    "TargetTable": "offset_assets.ranges.ingestion",
    "RangeIngestion": "offset_assets.ranges.ingestion",
    "RangeResult": "offset_assets.ranges.ingestion",
}

# What a project declares an ingestion job with; the top level and the Dagster adapter
# export these too, so a project imports them from the package it already uses.
JOB_NAMES = ("IngestionJob", "TargetTable", "SqlTableSource", "FolderSource", "KafkaSource",
             "TimeWindowPlanner", "AutoIncrementIdPlanner", "KafkaOffsetPlanner", "UpstreamPlanner",
             "DataRange", "ClaimPolicy")
JOB_EXPORTS = {name: _EXPORTS[name] for name in JOB_NAMES}

__all__ = sorted(_EXPORTS)

__getattr__ = lazy_getattr(__name__, _EXPORTS)
