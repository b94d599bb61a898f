"""The data plane's Spark session in Dagster: dagster-pyspark's resources.

`IncrementalEngineResource(spark=...)` takes dagster-pyspark's `LazyPySparkResource`
(recommended) or `PySparkResource`, configured as for any other PySpark code of the
project (`spark_config` goes to `SparkSession.builder.config`; `spark.remote` there gives
a Spark Connect client). Whatever built the session, the engine holds it to what the
data plane relies on (`data_plane_session`): before the session exists, the Java check
and the endpoint check run on the provider's configuration, so a missing Java or a
master that does not answer is one clear line; once it exists, the UTC session time
zone is applied on it (or the conflicting setting is named). A relative warehouse is
refused with a cluster master or Connect by the tables themselves, from the session.

`LazyPySparkResource` builds the session on the first access of `.spark_session`, so
steps that only touch the control plane (offset checks, sensors) start no JVM.
`PySparkResource` builds it when each step starts, before the engine sees it: the
checks cannot run first, and every step pays a Spark start-up.

`SparkSessionResource` is a `LazyPySparkResource` whose master or Connect endpoint is
resolved when the session is built, in the process that builds it: from `master` /
`remote`, which take `dg.EnvVar`, else `OFFSET_ASSETS_SPARK_MASTER` /
`OFFSET_ASSETS_SPARK_REMOTE`. A `spark_config` is a plain dictionary fixed when the
definitions load; `spark_config_from_environment` fills one from the same variables.

Spark sessions and Dagster executors
------------------------------------
Starting a Spark driver costs about ten seconds and a JVM's worth of memory. Dagster's
default `multiprocess_executor` runs each step in a fresh process, so with a local
master every step would pay that start-up, and N parallel steps would run N drivers
competing for the same cores. Hence:

- **local master (`local[*]`, the default): use `dg.in_process_executor`** for jobs of
  Spark assets (the reference project's `Definitions` does). All steps share one
  session; Spark parallelises inside each step, so little is lost by running steps one
  after another. `materialize()` in Python is in-process already.
- **Spark Connect**: either works, and in-process is cheaper for the small runs an
  incremental pipeline mostly makes: a step process spends seconds importing Dagster,
  PySpark and the code location before it attaches, while the Connect server already
  parallelises each query (the reference project runs in-process here).
- **cluster master (standalone, YARN, Kubernetes)**: the multiprocess executor fits.
  Each step process starts a light driver while executors live on the cluster; steps of
  different transformations run in parallel, and the run leases keep two runs of one
  transformation apart whatever the executor. On a standalone cluster give each
  application a share of the cores (`spark.cores.max`), or parallel steps queue behind
  the first application.

The reference project chooses with `OFFSET_ASSETS_EXECUTOR` (`in_process` or
`multiprocess`; by default multiprocess with a cluster master only).

The engine never stops the session: it belongs to the process (and to the provider).
"""

# No `from __future__ import annotations`: Dagster builds the resource's config schema
# from its field annotations, which must be real types, not strings.

import os
from collections.abc import Mapping
from typing import Any

from dagster_pyspark import LazyPySparkResource, PySparkResource
from pydantic import Field, PrivateAttr
from pyspark.sql import SparkSession

from offset_assets.class_archive import with_driver_class_archive
from offset_assets.config import ENV_SPARK_MASTER, ENV_SPARK_REMOTE, default_spark_master, default_spark_remote
from offset_assets.spark import (
    RUN_COST_CONF,
    SparkSettingError,
    check_base_settings,
    check_before_start,
    ensure_base_settings,
    workers_use_this_python,
)

# What `IncrementalEngineResource.spark` accepts.
SparkProvider = LazyPySparkResource | PySparkResource


def spark_config_from_environment(conf: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A flat `spark_config`: `conf`, where Spark runs, and the run-cost settings.

    Where Spark runs is the caller's when `conf` names it (`spark.master` or
    `spark.remote`), even with `OFFSET_ASSETS_SPARK_MASTER` / `OFFSET_ASSETS_SPARK_REMOTE`
    set: the variables are defaults, as for `get_spark_session(master=...)` and
    `SparkSessionResource`, and a location written in code is a decision the code made.
    Leave it out of `conf` to let the operator choose: then `spark.remote` from
    `OFFSET_ASSETS_SPARK_REMOTE`, else `spark.master` from `OFFSET_ASSETS_SPARK_MASTER`,
    else `local[*]`. The run-cost settings (`offset_assets.spark.RUN_COST_CONF`) sit under
    a driver's configuration; a value `conf` has wins."""
    settings = flat_settings(conf or {})
    where = {} if _names_location(settings) else _location_from_environment()
    return with_run_cost_conf({**settings, **where})


def flat_settings(config: Mapping[str, Any]) -> dict[str, Any]:
    """`config` with nested sections joined by dots, as Spark reads a `spark_config`
    (`{"spark": {"master": "local[2]"}}` -> `{"spark.master": "local[2]"}`)."""
    flat: dict[str, Any] = {}
    for key, value in config.items():
        if isinstance(value, Mapping):
            flat.update({f"{key}.{inner}": v for inner, v in flat_settings(value).items()})
        else:
            flat[key] = value
    return flat


def _names_location(settings: Mapping[str, Any]) -> bool:
    return "spark.master" in settings or "spark.remote" in settings


def _location_from_environment() -> dict[str, str]:
    remote = default_spark_remote()
    return {"spark.remote": remote} if remote else {"spark.master": default_spark_master()}


def with_run_cost_conf(settings: dict[str, Any]) -> dict[str, Any]:
    """`settings` with `RUN_COST_CONF` under them for a driver of its own, its JVM started
    with the class archive when one is built (a Connect client's server holds its own);
    a value `settings` has wins."""
    return settings if "spark.remote" in settings else with_driver_class_archive({**RUN_COST_CONF, **settings})


class SparkSessionResource(LazyPySparkResource):
    """A `LazyPySparkResource` whose master or Connect endpoint is read when the session is
    built: `master` or `remote` (each may be a `dg.EnvVar`), else the OFFSET_ASSETS_SPARK_*
    variables; `spark_config` holds the other settings."""

    spark_config: dict[str, Any] = Field(
        default_factory=dict, description="Spark settings for a new session (SparkSession.builder.config)."
    )
    master: str | None = Field(
        default=None,
        description="spark.master; default OFFSET_ASSETS_SPARK_MASTER, else local[*].",
    )
    remote: str | None = Field(
        default=None,
        description="Spark Connect endpoint (sc://host:15002) instead of a driver in this "
        "process; default OFFSET_ASSETS_SPARK_REMOTE. Exclusive with master.",
    )

    # This class's own session. dagster-pyspark's `LazyPySparkResource` builds from
    # `spark_config` alone in a private method; its public surface is the two properties
    # below, so they are overridden whole and build from `session_config()` instead.
    _session: SparkSession | None = PrivateAttr(default=None)

    def session_config(self) -> dict[str, Any]:
        """The settings the session is built from: `spark_config` and where Spark runs
        (with the run-cost settings for a driver of its own, unless `spark_config` sets them)."""
        flat = flat_settings(self.spark_config)
        if self.master or self.remote:
            where = {"spark.master": self.master} if self.master else {}
            where.update({"spark.remote": self.remote} if self.remote else {})
        elif _names_location(flat):
            where = {}
        else:
            where = _location_from_environment()
        return with_run_cost_conf({**flat, **where})

    @property
    def spark_session(self) -> SparkSession:
        """The session, built on first access from `session_config()`."""
        if self._session is None:
            builder = SparkSession.builder
            for key, value in self.session_config().items():
                builder = builder.config(key, value)
            self._session = builder.getOrCreate()
        return self._session

    @property
    def spark_context(self) -> Any:
        return self.spark_session.sparkContext


def requested_settings(provider: SparkProvider) -> dict[str, Any]:
    """The flat settings `provider` builds its session from."""
    if isinstance(provider, SparkSessionResource):
        return provider.session_config()
    return flat_settings(provider.spark_config or {})


def check_provider_before_start(provider: SparkProvider) -> None:
    """The Java and endpoint checks on the settings `provider` will start Spark with."""
    settings = requested_settings(provider)
    master, remote = settings.get("spark.master"), settings.get("spark.remote")
    if not (master or remote):
        # Spark would ignore these variables: they are offset-assets', not Spark's.
        ignored = [name for name in (ENV_SPARK_REMOTE, ENV_SPARK_MASTER) if os.environ.get(name)]
        if ignored:
            raise SparkSettingError(
                f"{ignored[0]} is set, but the {type(provider).__name__}'s spark_config names neither "
                "spark.master nor spark.remote, so Spark would start a local driver: put it in "
                "spark_config (spark_config_from_environment()) or use SparkSessionResource"
            )
    # pyspark's own variable: a builder without spark.remote still connects to it.
    remote = remote or os.environ.get("SPARK_REMOTE")
    check_before_start(master, remote)
    if not remote:
        workers_use_this_python()


def data_plane_session(provider: SparkProvider) -> SparkSession:
    """`provider`'s session, checked before it starts and given the base settings."""
    # Before the provider builds anything: it would apply a conflicting setting to the
    # process's shared session.
    check_base_settings(requested_settings(provider))
    if isinstance(provider, PySparkResource):
        # Its `spark_session` is a plain read: what a Dagster step's set-up built, or None.
        session = provider.spark_session
        if session is None:
            raise SparkSettingError(
                "PySparkResource builds its session only when a Dagster step sets it up; "
                "outside a run use LazyPySparkResource, which builds it on first use"
            )
    else:
        # No session active in this thread: this access may start Spark, so check first.
        # (Whether the provider built one already is dagster-pyspark's private state; one
        # it built in another thread only costs the checks again.)
        if SparkSession.getActiveSession() is None:
            check_provider_before_start(provider)
        session = provider.spark_session
    ensure_base_settings(session)
    return session
