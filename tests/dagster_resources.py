"""The resources a Dagster project wires, for the Dagster tests: control plane, engine, IO manager."""

from __future__ import annotations

from typing import Any

from offset_assets.dagster_adapter import (
    IncrementalEngineResource,
    OffsetIOManager,
    OffsetStore,
    SparkSessionResource,
)


def engine_resources(store: OffsetStore, warehouse: str | None = None, **settings: Any) -> dict[str, Any]:
    """`offset_store` for checks and sensors, `incremental_engine` for asset bodies, and
    the `io_manager` serving tables downstream, all on one control plane and warehouse."""
    engine = IncrementalEngineResource(offset_store=store, spark=SparkSessionResource(),
                                       warehouse=warehouse, **settings)
    return {"offset_store": store, "incremental_engine": engine,
            "io_manager": OffsetIOManager(engine=engine)}
