"""`SparkSessionResource`: the data plane's Spark session as a Dagster resource.

The resource returns the session already active in the process, else builds one
(`offset_assets.spark.get_spark_session`: Java checked first, UTC, the given master and
conf), or connects to a Spark Connect server when `remote` (or
`OFFSET_ASSETS_SPARK_REMOTE`) names one. It never stops the session: the session
belongs to the process and is shared by every step, check and test running there. The
session is built on first use, so steps that only touch the control plane (offset
checks, sensors) never start a JVM.

Why not `dagster_pyspark.PySparkResource`: it builds the session eagerly in every step
(the offset checks would pay a Spark start-up for nothing), applies none of the settings
the data plane relies on (UTC session time zone, the Java and endpoint checks), and
exposes `spark_context`, which a Spark Connect session does not have.

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
- **cluster master (standalone, YARN, Kubernetes) or Spark Connect**: the multiprocess
  executor is fine. Each step process starts a light driver (or, with Connect, only a
  gRPC client) while executors live on the cluster; steps of different transformations
  run in parallel, and the run leases keep two runs of one transformation apart
  whatever the executor. On a standalone cluster give each application a share of the
  cores (`spark.cores.max`), or parallel steps queue behind the first application.

The control-plane parts of the adapter (offset checks, sensors) never ask for a session.
"""

# No `from __future__ import annotations`: Dagster builds the resource's config schema
# from its field annotations, which must be real types, not strings.

import dagster as dg
from pydantic import Field
from pyspark.sql import SparkSession

from offset_assets.spark import get_spark_session


class SparkSessionResource(dg.ConfigurableResource):
    """The process's Spark session: the active one, else one built from `master` or
    `remote`, `app_name` and `conf` (settings ignored when a session is already active)."""

    master: str | None = Field(
        default=None,
        description="spark.master; default OFFSET_ASSETS_SPARK_MASTER, else local[*].",
    )
    remote: str | None = Field(
        default=None,
        description="Spark Connect endpoint (sc://host:15002) instead of a driver in this "
        "process; default OFFSET_ASSETS_SPARK_REMOTE. Exclusive with master.",
    )
    app_name: str = Field(default="offset-assets", description="Spark application name.")
    conf: dict[str, str] = Field(
        default_factory=dict, description="Extra Spark settings for a new session."
    )

    @property
    def spark_session(self) -> SparkSession:
        return get_spark_session(master=self.master, app_name=self.app_name, conf=self.conf, remote=self.remote)
