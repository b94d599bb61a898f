"""offset-assets: incremental Dagster + PySpark pipelines.

Public names are resolved lazily so that importing the engine or the control plane does
not import Dagster (only the Dagster adapter does).
"""

from __future__ import annotations

from offset_assets.lazy_exports import lazy_getattr
from offset_assets.ranges import JOB_EXPORTS

_EXPORTS = {
    # errors a caller may catch
    "OffsetAssetsError": "offset_assets.errors",
    "InvalidOffsetError": "offset_assets.errors",
    "InvalidNameError": "offset_assets.control_plane.names",
    # layer 1
    "ControlPlane": "offset_assets.control_plane.database",
    "OffsetRepository": "offset_assets.control_plane.offsets",
    "DeltaCatalog": "offset_assets.control_plane.delta_catalog",
    # layer 2
    "VersionedTable": "offset_assets.versioned.table",
    "commit_deltas": "offset_assets.versioned.commit",
    "local_frame": "offset_assets.local_frames",
    "revert_table": "offset_assets.versioned.revert",
    "plan_revert": "offset_assets.versioned.revert",
    "RevertError": "offset_assets.versioned.revert",
    # reading (on top of layer 2): tables by name, SQL with system-time clauses, no-JVM reads
    "VersionedTables": "offset_assets.reading.tables",
    "read_arrow": "offset_assets.reading.arrow",
    "read_pandas": "offset_assets.reading.arrow",
    # layer 3
    "Transformation": "offset_assets.engine.transformation",
    "TransformInput": "offset_assets.engine.transformation",
    "IncrementalEngine": "offset_assets.engine.incremental_engine",
    "RunResult": "offset_assets.engine.result",
    "RunMode": "offset_assets.engine.vocabulary",
    "RunRequest": "offset_assets.engine.vocabulary",
    "CommitMode": "offset_assets.engine.vocabulary",
    "OnFailedKeys": "offset_assets.engine.vocabulary",
    "RunProfile": "offset_assets.run_profile",
    "ChangeDetection": "offset_assets.engine.vocabulary",
    # layer 4
    **JOB_EXPORTS,
    "RangeIngestion": "offset_assets.ranges.ingestion",
    # layer 5
    "OffsetStore": "offset_assets.dagster_adapter.offset_store",
    "OffsetIOManager": "offset_assets.dagster_adapter.incremental.io_manager",
    "SparkSessionResource": "offset_assets.dagster_adapter.spark_resource",
    "incremental_asset": "offset_assets.dagster_adapter.incremental.assets",
    "incremental_multi_asset": "offset_assets.dagster_adapter.incremental.assets",
    "IncrementalOut": "offset_assets.dagster_adapter.incremental.assets",
    "ingestion_asset": "offset_assets.dagster_adapter.ingestion.assets",
}

__all__ = sorted(_EXPORTS)

__getattr__ = lazy_getattr(__name__, _EXPORTS)
