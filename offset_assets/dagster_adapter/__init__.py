"""Layer 5: the Dagster adapter (resources, IO manager, decorator, checks, sensors,
schedules, backfills). Names are resolved lazily, so importing the offset store does
not start importing Spark."""

from __future__ import annotations

from offset_assets.lazy_exports import lazy_getattr

_EXPORTS = {
    "OffsetStore": "offset_assets.dagster_adapter.offset_store",
    "SparkSessionResource": "offset_assets.dagster_adapter.spark_resource",
    "OffsetIOManager": "offset_assets.dagster_adapter.io_manager",
    "incremental_asset": "offset_assets.dagster_adapter.assets",
    "incremental_metadata": "offset_assets.dagster_adapter.metadata",
    "table_metadata": "offset_assets.dagster_adapter.metadata",
    "run_metadata": "offset_assets.dagster_adapter.metadata",
    "build_offset_checks": "offset_assets.dagster_adapter.checks",
    "build_offset_sensor": "offset_assets.dagster_adapter.sensors",
    "build_incremental_schedule": "offset_assets.dagster_adapter.schedules",
    "build_offset_checks_schedule": "offset_assets.dagster_adapter.schedules",
    "offset_checks_job": "offset_assets.dagster_adapter.schedules",
    "is_reset_run": "offset_assets.dagster_adapter.backfill",
    "BACKFILL_TAG": "offset_assets.dagster_adapter.backfill",
    "RESET_TAG": "offset_assets.dagster_adapter.backfill",
}

__all__ = sorted(_EXPORTS)

__getattr__ = lazy_getattr(__name__, _EXPORTS)
