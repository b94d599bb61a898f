"""The pipeline run from Python, as the daemon would run it: the ingestion sensor's ranges
one after the other, then the transformation. `python -m examples.kafka_events.run` runs
it once against the Dagster instance of DAGSTER_HOME."""

import dagster as dg

from .definitions import customer_totals, defs


def ingest_due_ranges(defs: dg.Definitions, instance: dg.DagsterInstance) -> list[str]:
    """Evaluate `order_events_ranges_sensor`, add the range partition it requests and
    materialize it; until no range is due. The partition keys ingested, in order."""
    sensor = defs.resolve_sensor_def("order_events_ranges_sensor")
    order_events = defs.get_assets_def("order_events")
    ingested = []
    while True:
        with dg.build_sensor_context(instance=instance,
                                     resources={"offset_store": defs.resources["offset_store"]}) as context:
            tick = sensor(context)
        if isinstance(tick, dg.SkipReason) or not tick.run_requests:
            return ingested
        for request in tick.dynamic_partitions_requests:
            instance.add_dynamic_partitions(request.partitions_def_name, list(request.partition_keys))
        key = tick.run_requests[0].partition_key
        dg.materialize([order_events], partition_key=key, instance=instance, resources=defs.resources)
        ingested.append(key)


def update_totals(defs: dg.Definitions, instance: dg.DagsterInstance) -> dict[str, object]:
    """One run of `customer_totals`; what it reported (changed and processed keys, ...)."""
    result = dg.materialize([customer_totals], instance=instance, resources=defs.resources)
    reports = [*(e.step_materialization_data.materialization for e in result.get_asset_materialization_events()),
               *(e.asset_observation_data.asset_observation for e in result.get_asset_observation_events())]
    return {name: value.value for report in reports for name, value in report.metadata.items()}


if __name__ == "__main__":
    with dg.DagsterInstance.get() as current:
        print("ingested", ingest_due_ranges(defs, current))
        print("customer_totals", update_totals(defs, current))
