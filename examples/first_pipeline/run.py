"""The pipeline run from Python, as the UI runs it: what a script, a notebook or a test
does without `dagster dev`'s daemon. `python -m first_pipeline.run` runs it once against
the Dagster instance of DAGSTER_HOME, so the UI shows the runs afterwards."""

from datetime import UTC, datetime
from typing import Any

import dagster as dg

from offset_assets.dagster_adapter import ingest_due_ranges

from .definitions import OFFSET_CHECKS, TRANSFORMATIONS, defs


def ingest_customers(defs: dg.Definitions, instance: dg.DagsterInstance, day: str) -> dict[str, Any]:
    """Materialize one daily window of customers (today's: what the source holds so far);
    what the run reported (rows read, upserted, unchanged, ...)."""
    customers = defs.get_assets_def("customers")
    result = dg.materialize([customers], partition_key=day, instance=instance, resources=defs.resources)
    [report] = result.asset_materializations_for_node("customers")
    return {name: value.value for name, value in report.metadata.items()}


def run_transformations(defs: dg.Definitions, instance: dg.DagsterInstance,
                        tags: dict[str, str] | None = None) -> dict[str, dict[str, Any]]:
    """One run of every transformation and its checks; per asset, what the run reported."""
    result = dg.materialize([*TRANSFORMATIONS, *OFFSET_CHECKS], instance=instance,
                            resources=defs.resources, tags=tags)
    # An output whose rows did not change is reported as an observation, not a materialization.
    reports = [*(e.step_materialization_data.materialization for e in result.get_asset_materialization_events()),
               *(e.asset_observation_data.asset_observation for e in result.get_asset_observation_events())]
    return {report.asset_key.to_user_string(): {name: value.value for name, value in report.metadata.items()}
            for report in reports}


def run_once(defs: dg.Definitions, instance: dg.DagsterInstance, day: str) -> dict[str, dict[str, Any]]:
    ingest_due_ranges(defs, "orders", instance)  # what orders_ranges_sensor does under the daemon
    ingest_customers(defs, instance, day)
    return run_transformations(defs, instance)


if __name__ == "__main__":
    today = datetime.now(UTC).strftime("%Y-%m-%d")
    with dg.DagsterInstance.get() as current:
        for asset, metadata in run_once(defs, current, today).items():
            print(asset, {name: metadata[name] for name in ("mode", "changed_keys", "processed_keys")})
