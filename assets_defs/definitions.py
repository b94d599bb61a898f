"""The reference project: one `Definitions` wiring assets, checks, sensors, schedules, jobs.

Loaded by `dagster dev -w workspace.yaml` (attribute `defs`). Local and production
differ only in the resources (`resources.py`); `build_definitions` re-reads the
environment, which the demo and the tests use to point it at their own state.

With a local Spark master, Spark assets run with the in-process executor: one Spark
driver per run, shared by its steps, instead of one driver per step. With a cluster
master or a Spark Connect endpoint, with the multiprocess executor: a step's session is
then a light driver or a gRPC client (see `offset_assets.dagster_adapter.spark_resource`).
"""

import dagster as dg

from assets_defs.assets.ingestion import Ingestion, build_ingestion
from assets_defs.assets.transformations import TRANSFORMATIONS
from assets_defs.checks import OFFSET_CHECKS
from assets_defs.jobs import JOBS
from assets_defs.maintenance import table_maintenance, table_maintenance_hourly
from assets_defs.resources import resources_for, source_url
from assets_defs.schedules import build_schedules
from assets_defs.sensors import build_sensors
from offset_assets.config import spark_runs_outside_process


def build_definitions(ingestion: Ingestion | None = None, deployment: str | None = None) -> dg.Definitions:
    """Everything, for `ingestion` (default: built from the environment now)."""
    ingestion = ingestion or build_ingestion(source_url())
    return dg.Definitions(
        assets=[*ingestion.assets, *TRANSFORMATIONS],
        asset_checks=OFFSET_CHECKS,
        sensors=build_sensors(ingestion),
        schedules=[*build_schedules(ingestion), table_maintenance_hourly],
        jobs=[*JOBS, table_maintenance],
        resources=resources_for(deployment),
        executor=dg.multiprocess_executor if spark_runs_outside_process() else dg.in_process_executor,
    )


defs = build_definitions()
