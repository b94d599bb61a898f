"""The pipeline run from Python, as the daemon would run it: the ingestion sensor's ranges
one after the other, then the transformation. `python -m kafka_events.run` runs it once
against the Dagster instance of DAGSTER_HOME."""

import dagster as dg

from offset_assets.dagster_adapter import ingest_due_ranges

from .definitions import customer_totals, defs


def update_totals(defs: dg.Definitions, instance: dg.DagsterInstance) -> dict[str, object]:
    """One run of `customer_totals`; what it reported (changed and processed keys, ...)."""
    result = dg.materialize([customer_totals], instance=instance, resources=defs.resources)
    reports = [*(e.step_materialization_data.materialization for e in result.get_asset_materialization_events()),
               *(e.asset_observation_data.asset_observation for e in result.get_asset_observation_events())]
    return {name: value.value for report in reports for name, value in report.metadata.items()}


if __name__ == "__main__":
    with dg.DagsterInstance.get() as current:
        print("ingested", ingest_due_ranges(defs, "order_events", current))
        totals = update_totals(defs, current)
        print("customer_totals", {name: totals[name] for name in ("mode", "changed_keys", "processed_keys")})
