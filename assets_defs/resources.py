"""Resources of the reference project: where the control plane, the warehouse, Spark and
the source system live. Asset code is the same everywhere; only this file's choice differs.

- `local` (default): embedded defaults, zero set-up. SQLite control plane and source
  database and a Parquet warehouse under `./state` (`OFFSET_ASSETS_HOME`), Spark
  `local[*]`. Any of the variables below, when set, still wins.

Spark is dagster-pyspark's `LazyPySparkResource` in both: its `spark_config` names the
master (`spark.master`) or the Spark Connect endpoint (`spark.remote`) from the
environment when the definitions load, which every process running a step does.
- `production` (`OFFSET_ASSETS_DEPLOYMENT=production`): every location must be given,
  so a forgotten variable fails the code location load instead of writing to ./state:
  `OFFSET_ASSETS_DB_URL` (PostgreSQL), `OFFSET_ASSETS_WAREHOUSE` (s3a://..., hdfs://...),
  `OFFSET_ASSETS_SPARK_MASTER` (spark://..., yarn, k8s://...) or, for Spark Connect,
  `OFFSET_ASSETS_SPARK_REMOTE` (sc://...), `OFFSET_ASSETS_SOURCE_URL`.
"""

from __future__ import annotations

import os
from typing import Any

import dagster as dg
from dagster_pyspark import LazyPySparkResource

from assets_defs import source_system
from offset_assets.config import ENV_DB_URL, ENV_SPARK_MASTER, ENV_SPARK_REMOTE, ENV_WAREHOUSE
from offset_assets.dagster_adapter import (
    ENGINE_RESOURCE_KEY,
    IncrementalEngineResource,
    OffsetIOManager,
    OffsetStore,
    spark_config_from_environment,
)
from offset_assets.spark import SHORT_JVM_OPTIONS

ENV_DEPLOYMENT = "OFFSET_ASSETS_DEPLOYMENT"
DEPLOYMENTS = ("local", "production")
PRODUCTION_VARIABLES = (ENV_DB_URL, ENV_WAREHOUSE, ENV_SPARK_MASTER, source_system.ENV_SOURCE_URL)

# A laptop-sized session: a handful of shuffle partitions suits demo-sized data (Spark's
# default of 200 would spend most of each step scheduling empty tasks). Its driver lives
# for the demo or for one run of `make dev DEV_SPARK=local`, so it runs the serial
# collector and the client compiler only (`SHORT_JVM_OPTIONS`; the demo's small change of
# enriched_posts, three demos each: 1.54-1.88 s -> 1.37-1.71 s).
LOCAL_SPARK_CONF = {
    "spark.sql.shuffle.partitions": "4",
    "spark.default.parallelism": "4",
    "spark.sql.adaptive.enabled": "true",
    "spark.ui.showConsoleProgress": "false",
    "spark.driver.memory": "2g",
    "spark.driver.extraJavaOptions": SHORT_JVM_OPTIONS,
}


def deployment() -> str:
    name = os.environ.get(ENV_DEPLOYMENT, "local")
    if name not in DEPLOYMENTS:
        raise dg.DagsterInvalidDefinitionError(
            f"{ENV_DEPLOYMENT}={name!r}: expected one of {', '.join(DEPLOYMENTS)}"
        )
    return name


def _spark_variable() -> str:
    """Where production Spark is named: the Connect endpoint when one is set, else the master."""
    return ENV_SPARK_REMOTE if os.environ.get(ENV_SPARK_REMOTE) else ENV_SPARK_MASTER


def _require_production_variables() -> None:
    required = [_spark_variable() if name == ENV_SPARK_MASTER else name for name in PRODUCTION_VARIABLES]
    missing = [name for name in required if not os.environ.get(name)]
    if missing:
        raise dg.DagsterInvalidDefinitionError(
            f"{ENV_DEPLOYMENT}=production needs {', '.join(missing)} (nothing defaults to ./state there)"
        )


def source_url() -> str:
    """The source system's SQLAlchemy URL (the ingestion jobs read it)."""
    if deployment() == "production":
        _require_production_variables()
    return source_system.source_url()


def _resources(engine: IncrementalEngineResource) -> dict[str, Any]:
    # Checks and sensors need only the control plane (`offset_store`); asset bodies take
    # the engine; the IO manager serves tables to downstream assets through the same engine.
    return {
        "offset_store": engine.offset_store,
        ENGINE_RESOURCE_KEY: engine,
        "io_manager": OffsetIOManager(engine=engine),
    }


def local_resources() -> dict[str, Any]:
    spark = LazyPySparkResource(spark_config=spark_config_from_environment(
        {"spark.app.name": "offset-assets", **LOCAL_SPARK_CONF}))
    return _resources(IncrementalEngineResource(offset_store=OffsetStore(), spark=spark))


def production_resources() -> dict[str, Any]:
    _require_production_variables()
    # Cluster-wide settings belong in spark-defaults.conf (SPARK_CONF_DIR) or the Connect server.
    spark = LazyPySparkResource(spark_config=spark_config_from_environment(
        {"spark.app.name": "offset-assets-reference"}))
    return _resources(IncrementalEngineResource(
        offset_store=OffsetStore(db_url=dg.EnvVar(ENV_DB_URL)),
        spark=spark,
        warehouse=dg.EnvVar(ENV_WAREHOUSE),
    ))


def resources_for(name: str | None = None) -> dict[str, Any]:
    """The resources of a deployment (default: `OFFSET_ASSETS_DEPLOYMENT`, else local)."""
    name = name or deployment()
    return production_resources() if name == "production" else local_resources()
