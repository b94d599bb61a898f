"""Layer 5: the Dagster adapter (resources, IO manager, decorator, automation, checks,
sensors, schedules, backfills, ingestion assets): everything a Dagster project imports.
Names are resolved lazily, so importing the offset store does not start importing Spark."""

from __future__ import annotations

from offset_assets.lazy_exports import lazy_getattr
from offset_assets.ranges import JOB_EXPORTS

_EXPORTS = {
    # resources
    "OffsetStore": "offset_assets.dagster_adapter.offset_store",
    "SparkSessionResource": "offset_assets.dagster_adapter.spark_resource",
    "spark_config_from_environment": "offset_assets.dagster_adapter.spark_resource",
    "IncrementalEngineResource": "offset_assets.dagster_adapter.engine_resource",
    "ENGINE_RESOURCE_KEY": "offset_assets.dagster_adapter.engine_resource",
    "OffsetIOManager": "offset_assets.dagster_adapter.incremental.io_manager",
    # incremental assets
    "incremental_asset": "offset_assets.dagster_adapter.incremental.assets",
    "incremental_multi_asset": "offset_assets.dagster_adapter.incremental.assets",
    "IncrementalOut": "offset_assets.dagster_adapter.incremental.assets",
    "IncrementalRunConfig": "offset_assets.dagster_adapter.incremental.assets",
    "ChangeDetection": "offset_assets.engine.vocabulary",
    "CommitMode": "offset_assets.engine.vocabulary",
    "OnFailedKeys": "offset_assets.engine.vocabulary",
    "incremental_metadata": "offset_assets.dagster_adapter.asset_spec",
    "table_metadata": "offset_assets.dagster_adapter.asset_spec",
    "resolve_incremental": "offset_assets.dagster_adapter.asset_spec",
    "validate_definitions": "offset_assets.dagster_adapter.incremental.definition_checks",
    "run_metadata": "offset_assets.dagster_adapter.incremental.run_report",
    "on_input_commits": "offset_assets.dagster_adapter.incremental.automation",
    # Dagster components (`defs.yaml`)
    "IngestionJobComponent": "offset_assets.dagster_adapter.components",
    "IncrementalAssetComponent": "offset_assets.dagster_adapter.components",
    "IncrementalMultiAssetComponent": "offset_assets.dagster_adapter.components",
    "load_defs_folder": "offset_assets.dagster_adapter.component_loading",
    # checks, sensors, schedules
    "build_offset_checks": "offset_assets.dagster_adapter.incremental.checks",
    "build_offset_sensor": "offset_assets.dagster_adapter.incremental.sensors",
    "evaluate_offset_sensor": "offset_assets.dagster_adapter.incremental.sensors",
    "build_incremental_schedule": "offset_assets.dagster_adapter.incremental.schedules",
    "build_offset_checks_schedule": "offset_assets.dagster_adapter.incremental.schedules",
    "offset_checks_job": "offset_assets.dagster_adapter.incremental.schedules",
    # backfills
    "is_reset_run": "offset_assets.dagster_adapter.incremental.backfill",
    "BACKFILL_TAG": "offset_assets.dagster_adapter.incremental.backfill",
    "RESET_TAG": "offset_assets.dagster_adapter.incremental.backfill",
    # log-driven ingestion
    "ingestion_asset": "offset_assets.dagster_adapter.ingestion.assets",
    "ingestion_job": "offset_assets.dagster_adapter.ingestion.assets",
    "build_ingestion_sensor": "offset_assets.dagster_adapter.ingestion.sensor",
    "build_ingestion_schedule": "offset_assets.dagster_adapter.ingestion.schedule",
    "evaluate_ingestion_sensor": "offset_assets.dagster_adapter.ingestion.sensor",
    "ingest_due_ranges": "offset_assets.dagster_adapter.ingestion.sensor",
    "IngestedRange": "offset_assets.dagster_adapter.ingestion.sensor",
    "REFRESH_TAG": "offset_assets.dagster_adapter.ingestion.invocation",
    # reverts (undo a bad load from the UI)
    "revert_job": "offset_assets.dagster_adapter.revert",
    "RevertConfig": "offset_assets.dagster_adapter.revert",
    # what an ingestion asset is built from (layer 4, re-exported: a project imports one package)
    **JOB_EXPORTS,
}

__all__ = sorted(_EXPORTS)

__getattr__ = lazy_getattr(__name__, _EXPORTS)
