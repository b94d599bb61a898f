"""The resources a Dagster project wires, for the Dagster tests: control plane, engine, IO manager."""

from __future__ import annotations

from typing import Any

from dagster_pyspark import LazyPySparkResource

from bench.posts_world import World, make_world
from offset_assets.control_plane import connect
from offset_assets.dagster_adapter import IncrementalEngineResource, OffsetIOManager, OffsetStore


def engine_resources(store: OffsetStore, warehouse: str | None = None, **settings: Any) -> dict[str, Any]:
    """`offset_store` for checks and sensors, `incremental_engine` for asset bodies, and
    the `io_manager` serving tables downstream, all on one control plane and warehouse.
    Spark is dagster-pyspark's lazy resource: it returns the test session already active."""
    engine = IncrementalEngineResource(offset_store=store, spark=LazyPySparkResource(spark_config={}),
                                       warehouse=warehouse, **settings)
    return {"offset_store": store, "incremental_engine": engine,
            "io_manager": OffsetIOManager(engine=engine)}


def three_posts(spark: Any, db_url: str, warehouse: str) -> World:
    """The posts world of the Dagster tests: two profiles, three posts (two by user 1)."""
    world = make_world(spark, connect(db_url), warehouse)
    world.write_profiles([(1, "ann"), (2, "bob")])
    world.write_posts([(10, 1, "a"), (11, 1, "b"), (12, 2, "c")])
    return world
