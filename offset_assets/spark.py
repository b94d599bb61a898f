"""The Spark session of the data plane.

`local[*]` by default; any `spark.master` (standalone, YARN, Kubernetes) through
`OFFSET_ASSETS_SPARK_MASTER` or the `master` argument; or a Spark Connect server
(`sc://host:15002`) through `OFFSET_ASSETS_SPARK_REMOTE` or the `remote` argument, in
which case this process runs no JVM at all. Java is checked first for a driver of our
own, and a master or Connect endpoint is knocked on before Spark is asked to use it, so
a missing JVM or an endpoint that does not answer is one clear line instead of a
launcher traceback or a minute of silent retries.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlsplit

from pyspark.sql import SparkSession

from offset_assets.class_archive import with_driver_class_archive
from offset_assets.config import default_spark_master, default_spark_remote
from offset_assets.errors import JavaNotFoundError, OffsetAssetsError
from offset_assets.spark_internals import is_connect_session

MIN_JAVA = 17
CONNECT_DEFAULT_PORT = 15002
STANDALONE_DEFAULT_PORT = 7077
ENDPOINT_TIMEOUT_SECONDS = 5.0

# Settings every offset-assets session needs: UTC so epoch doubles and timestamps agree,
# and Parquet files we write are the only ones read (no partition discovery surprises).
BASE_CONF = {
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.sources.partitionColumnTypeInference.enabled": "false",
}

# Settings that cut the fixed cost of every run on a driver in this process; a caller's
# own value wins. Not sent to a Connect server: there the server's configuration holds
# them (the first is static, the second is about this process's Python calls).
RUN_COST_CONF = {
    # Spark keeps 100 compiled classes of generated code. A run and the maintenance after
    # it need more distinct ones than that, so each run evicted the last one's and compiled
    # its code afresh (copy workload, 20,000 changed keys: 53 classes compiled per run; with
    # 1,000 entries 4, and the run 8.3 s -> 5.8-6.8 s on a busy 2-core machine).
    "spark.sql.codegen.cache.maxEntries": "1000",
    # No Python call site captured per Column call: with it on, each F.col/when/alias makes
    # four more JVM round trips (active session, conf read, origin set and clear), which were
    # more than half of a tiny run's time (the same run: 4,500 -> 2,300 JVM calls). It only
    # enriches the context of error messages.
    "spark.python.sql.dataFrameDebugging.enabled": "false",
}


def java_major_version() -> int:
    """Major version of the Java that Spark will launch; raises `JavaNotFoundError`."""
    java_home = os.environ.get("JAVA_HOME")
    java = os.path.join(java_home, "bin", "java") if java_home else shutil.which("java")
    if not java or not os.path.exists(java):
        raise JavaNotFoundError(
            f"Java not found: Spark 4 needs Java {MIN_JAVA}+ (install openjdk-17 or set JAVA_HOME)"
        )
    out = subprocess.run([java, "-version"], capture_output=True, text=True).stderr
    match = re.search(r'version "(\d+)', out)
    if not match:
        raise JavaNotFoundError(f"cannot read the Java version of {java}: {out.strip()[:200]}")
    return int(match.group(1))


def check_java() -> None:
    version = java_major_version()
    if version < MIN_JAVA:
        raise JavaNotFoundError(f"Java {version} found; Spark 4 needs Java {MIN_JAVA}+")


class SparkUnavailableError(OffsetAssetsError):
    """The Spark master or Connect endpoint does not answer, or both were given."""


def endpoints(url: str) -> list[tuple[str, int]]:
    """(host, port) pairs a `spark://` master list or an `sc://` Connect URL points at;
    none for masters this process does not dial itself (local, yarn, k8s)."""
    scheme, _, rest = url.partition("://")
    if scheme == "sc":
        parsed = urlsplit(f"sc://{rest.split(';', 1)[0]}")
        return [(parsed.hostname or "localhost", parsed.port or CONNECT_DEFAULT_PORT)]
    if scheme == "spark":
        hosts = []
        for address in rest.rstrip("/").split(","):
            host, _, port = address.rpartition(":")
            hosts.append((host, int(port)) if host else (address, STANDALONE_DEFAULT_PORT))
        return hosts
    return []


def check_endpoint(url: str) -> None:
    """Raise `SparkUnavailableError` naming `url` when none of its endpoints accepts a
    connection. Spark itself would retry for a minute (standalone registration) or far
    longer (Connect's gRPC retry policy) before saying anything."""
    errors = []
    for host, port in endpoints(url):
        try:
            with socket.create_connection((host, port), timeout=ENDPOINT_TIMEOUT_SECONDS):
                return
        except OSError as exc:
            errors.append(f"{host}:{port}: {exc.strerror or exc}")
    if errors:
        raise SparkUnavailableError(f"Spark endpoint {url} does not answer ({'; '.join(errors)})")


def is_local_driver(spark: SparkSession) -> bool:
    """True when this process is the driver and its executors are threads of its own JVM:
    its files, working folder and Python are theirs too."""
    return not is_connect_session(spark) and spark.conf.get("spark.master", "").startswith("local")


class SparkSettingError(OffsetAssetsError):
    """A setting the data plane relies on conflicts with the session's or cannot be applied."""


def check_before_start(master: str | None, remote: str | None) -> None:
    """What starting a session needs, checked before Spark is asked: for a Connect client
    the endpoint answers; for a driver of this process Java 17+ is there and a cluster
    master answers. Both a master and an endpoint is refused (a Connect server has its own)."""
    if master and remote:
        raise SparkUnavailableError(
            f"both a master ({master}) and a Spark Connect endpoint ({remote}) were given: "
            "a Connect server has its own master, choose one"
        )
    if remote:
        check_endpoint(remote)
        return
    check_java()
    if master:
        check_endpoint(master)


def workers_use_this_python() -> None:
    """Before a driver of this process starts: Python workers (the executors' side of a
    range read, a UDF) run this interpreter unless `PYSPARK_PYTHON` names another. Spark's
    default is `python3` on the PATH, which outside a virtualenv's shell lacks the
    project's packages (offset_assets, SQLAlchemy, pyarrow), so a source's read failed in
    its workers with ModuleNotFoundError. The driver JVM inherits the variable when it
    starts; a cluster whose executors run elsewhere sets it for them (docs/cluster.md)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)


def check_base_settings(requested: Mapping[str, Any]) -> None:
    """Refuse a configuration that asks for another value of a `BASE_CONF` setting,
    rather than override it behind its owner's back."""
    for key, value in BASE_CONF.items():
        asked = requested.get(key)
        if asked is not None and str(asked) != value:
            raise SparkSettingError(
                f"{key}={asked!r} in the Spark configuration: offset-assets needs {key}={value} "
                "(remove the setting, or set it to that value)"
            )


def ensure_base_settings(spark: SparkSession) -> None:
    """Give `spark` the settings of `BASE_CONF`, whoever built it. They are runtime SQL
    settings, so `spark.conf.set` applies them on a classic and on a Connect session alike;
    a session that refuses one is an error naming it."""
    for key, value in BASE_CONF.items():
        if spark.conf.get(key, None) == value:
            continue
        try:
            spark.conf.set(key, value)
        except Exception as exc:  # the server refused it: say which setting, not a gRPC trace
            first_line = (str(exc).strip() or type(exc).__name__).splitlines()[0]
            raise SparkSettingError(
                f"cannot set {key}={value} on the Spark session ({first_line[:200]}): "
                "set it in the session's configuration (spark_config, or the Connect server's)"
            ) from exc


@contextmanager
def temporary_setting(spark: SparkSession, key: str, value: str) -> Iterator[None]:
    """`key=value` on `spark` (a runtime SQL setting) while the block runs, and the
    session's own value (or none) again afterwards, whatever the block raised. Nothing is
    set when the session has that value already."""
    before = spark.conf.get(key, None)
    if before == value:
        yield
        return
    spark.conf.set(key, value)
    try:
        yield
    finally:
        if before is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, before)


def get_spark_session(
    master: str | None = None,
    app_name: str = "offset-assets",
    conf: dict[str, str] | None = None,
    remote: str | None = None,
) -> SparkSession:
    """The active session, or a new one with the offset-assets base settings: a Connect
    client when `remote` (else `OFFSET_ASSETS_SPARK_REMOTE`) is set, otherwise a driver
    of this process on `master` (else `OFFSET_ASSETS_SPARK_MASTER`, else `local[*]`),
    its JVM started with the class archive when one is built (`class_archive.py`)."""
    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    remote = remote if master else remote or default_spark_remote()
    if not remote:
        master = master or default_spark_master()
    check_before_start(master, remote)
    if not remote:
        workers_use_this_python()
    builder = SparkSession.builder.remote(remote) if remote else SparkSession.builder.master(master)
    builder = builder.appName(app_name)
    defaults = BASE_CONF if remote else {**BASE_CONF, **RUN_COST_CONF}
    settings = {**defaults, **(conf or {})}
    for key, value in (settings if remote else with_driver_class_archive(settings)).items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


# A JVM of small data on a small machine (the tests, `make dev`'s Connect server): the
# serial collector. G1's concurrent threads cost more than they save on a heap that stays
# mostly empty (measured with `bench.tiny_run`, quiet 2-core machine: the driver JVM's CPU
# 137 s -> 104 s, a run of 6 keys in 3 batches 4.6 s -> 3.8 s).
SMALL_JVM_OPTIONS = "-XX:+UseSerialGC"

# A JVM that lives for a few runs of tiny data (a child the tests kill, a test cluster's
# drivers and executors, a test Connect server), or that must be quick from its first
# runs (`make dev`'s Connect server): the client compiler only, too. The
# optimizing compiler's threads take more CPU than such a JVM's own work, for code that
# runs a handful of times (measured: 4 generated histories in a fresh session, the JVM's
# CPU 75-82 s -> 53-56 s). A session that lives for the whole suite keeps it: there the
# compiled code pays back (the generated histories took 5 % longer with the client
# compiler only, the cluster tests 25-30 % less).
SHORT_JVM_OPTIONS = f"{SMALL_JVM_OPTIONS} -XX:TieredStopAtLevel=1"

LOCAL_TEST_CONF = {
    "spark.driver.extraJavaOptions": SMALL_JVM_OPTIONS,
    "spark.sql.shuffle.partitions": "2",
    "spark.default.parallelism": "2",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    # Tiny test data: adaptive execution only adds jobs (measured: 54 -> 36 Spark jobs per run).
    "spark.sql.adaptive.enabled": "false",
    # Tiny test data: expressions are evaluated, not compiled. Every query of the engine
    # holds new delta numbers as literals, which Spark inlines into the Java code it
    # generates, and the suite's many tables each need code of their own, so nearly every
    # query compiled (and JIT-compiled) fresh code
    # (measured: a run of 6 keys in 3 batches 7.0 s -> 4.9-5.7 s). Spark documents it as
    # internal; its interpreted path is the one Spark falls back to itself. The cluster
    # and Spark Connect tests run their own JVMs with code generation on.
    "spark.sql.codegen.factoryMode": "NO_CODEGEN",
    "spark.driver.memory": "2g",
}
