"""The resources a Dagster project wires, for the Dagster tests: control plane, engine, IO manager."""

from __future__ import annotations

from typing import Any

from dagster_pyspark import LazyPySparkResource

from offset_assets.dagster_adapter import IncrementalEngineResource, OffsetIOManager, OffsetStore


def engine_resources(store: OffsetStore, warehouse: str | None = None, **settings: Any) -> dict[str, Any]:
    """`offset_store` for checks and sensors, `incremental_engine` for asset bodies, and
    the `io_manager` serving tables downstream, all on one control plane and warehouse.
    Spark is dagster-pyspark's lazy resource: it returns the test session already active."""
    engine = IncrementalEngineResource(offset_store=store, spark=LazyPySparkResource(spark_config={}),
                                       warehouse=warehouse, **settings)
    return {"offset_store": store, "incremental_engine": engine,
            "io_manager": OffsetIOManager(engine=engine)}
