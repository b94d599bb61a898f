"""The resources every component's assets and checks use: the control plane, Spark and the
IO manager, under ./state by default (OFFSET_ASSETS_HOME, OFFSET_ASSETS_DB_URL, ...)."""

import dagster as dg

from offset_assets.dagster_adapter import IncrementalEngineResource, OffsetIOManager, OffsetStore, SparkSessionResource


@dg.definitions
def resources() -> dg.Definitions:
    offset_store = OffsetStore()
    engine = IncrementalEngineResource(offset_store=offset_store, spark=SparkSessionResource())
    return dg.Definitions(
        resources={
            "offset_store": offset_store,
            "incremental_engine": engine,
            "io_manager": OffsetIOManager(engine=engine),
        },
        # One Spark driver in the run's process, shared by its steps.
        executor=dg.in_process_executor,
    )
