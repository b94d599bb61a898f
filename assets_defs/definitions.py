"""The reference project: one `Definitions` wiring assets, checks, sensors, schedules, jobs.

Loaded by `dagster dev -w workspace.yaml` (attribute `defs`). Local and production
differ only in the resources (`resources.py`); `build_definitions` re-reads the
environment, which the demo and the tests use to point it at their own state.

Runs execute their steps in one process (one Spark driver, or one Spark Connect client,
shared by the steps) except with a cluster master, where each step is a process with a
light driver of its own and independent steps run in parallel; `OFFSET_ASSETS_EXECUTOR`
chooses either (see `offset_assets.dagster_adapter.spark_resource`).
"""

import dagster as dg

from assets_defs.assets.ingestion import Ingestion, build_ingestion
from assets_defs.assets.transformations import TRANSFORMATIONS
from assets_defs.checks import OFFSET_CHECKS
from assets_defs.jobs import JOBS, build_revert_job
from assets_defs.maintenance import table_maintenance, table_maintenance_hourly
from assets_defs.resources import resources_for, source_url
from assets_defs.schedules import build_schedules
from assets_defs.sensors import build_sensors
from offset_assets.config import default_executor
from offset_assets.dagster_adapter import validate_definitions

EXECUTORS = {"in_process": dg.in_process_executor, "multiprocess": dg.multiprocess_executor}


def build_definitions(ingestion: Ingestion | None = None, deployment: str | None = None) -> dg.Definitions:
    """Everything, for `ingestion` (default: built from the environment now)."""
    ingestion = ingestion or build_ingestion(source_url())
    return validate_definitions(dg.Definitions(
        assets=[*ingestion.assets, *TRANSFORMATIONS],
        asset_checks=OFFSET_CHECKS,
        sensors=build_sensors(ingestion),
        schedules=[*build_schedules(ingestion), table_maintenance_hourly],
        jobs=[*JOBS, build_revert_job(ingestion), table_maintenance],
        resources=resources_for(deployment),
        executor=EXECUTORS[default_executor()],
    ))


defs = build_definitions()
