"""`make dev`: the Dagster UI, every run attached to one long-lived Spark.

A Dagster run executes each step in a process of its own, and a step with work to do
would start a Spark driver there: a JVM, about 10-20 s, for a run that may take one.
`make dev` starts one local Spark Connect server first (Spark's own
`sbin/start-connect-server.sh` from the pyspark wheel, in the foreground), runs
`dagster dev` with `OFFSET_ASSETS_SPARK_REMOTE` naming it, and stops the server when
`dagster dev` ends. A step then attaches to the running server as a Connect client (no
JVM in the step's process). Steps with nothing to do start no Spark at all either way.

Before the UI starts, the fresh server gets a throwaway run of the engine on a few rows
(`warmup.py`, about 20 s: a first run and four incremental runs): the first run
launched from the UI then finds Spark's classes loaded and its code compiled
(`DEV_WARMUP=0` skips it).

While the UI runs, every versioned table of the project is a global temp view on the
server (`global_temp.posts`, ...), registered again after each commit or compaction
(`offset_assets/reading/views.py`), so any Spark Connect client can query the outputs:
`pyspark --remote sc://127.0.0.1:15002`, then `spark.sql("SELECT * FROM
global_temp.enriched_posts")` (docs/reading.md).

`make dev DEV_SPARK=local` keeps Spark in each run's process (what `make demo` and the
tests use). `OFFSET_ASSETS_SPARK_REMOTE` or `OFFSET_ASSETS_SPARK_MASTER` already set
(a cluster) are used as they are: no local server is started.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pyspark
from pyspark.sql import SparkSession

from assets_defs.warmup import warm_up
from offset_assets.class_archive import with_class_archive
from offset_assets.config import ENV_SPARK_MASTER, ENV_SPARK_REMOTE, default_db_url, state_dir
from offset_assets.control_plane.database import ControlPlaneNotFoundError, connect
from offset_assets.reading.tables import VersionedTables
from offset_assets.reading.views import GlobalViews
from offset_assets.spark import RUN_COST_CONF, SHORT_JVM_OPTIONS

CONNECT_PORT = int(os.environ.get("OFFSET_ASSETS_DEV_CONNECT_PORT", "15002"))
START_TIMEOUT_S = 180.0
# How often the global views ask the control plane whether a commit or compaction changed it.
VIEWS_INTERVAL_S = 2.0
# The serial collector and the client compiler only (`SHORT_JVM_OPTIONS`): on demo-sized
# data the optimizing compiler's threads cost more than its code saves, and the client
# compiler's code is ready after a few runs (`bench.dagster_runs --spark connect`, the UI's
# first small change after a one-run warm-up: the engine 1.52 s -> 1.32 s). It maps the
# class archive that `make dev` builds first (`offset_assets/class_archive.py`).
SERVER_JVM_OPTIONS = with_class_archive(SHORT_JVM_OPTIONS)
# What the local Connect server's driver runs with: demo-sized data, UTC sessions, and
# three settings for small data on one machine (a production cluster keeps Spark's
# defaults). Adaptive execution off: on small data it only runs each shuffle as a job of
# its own (a run's jobs 16 -> 6, `tests/test_engine_job_budget.py`). Expressions
# evaluated, not compiled: every query of a run holds new delta numbers and key values as
# literals, which Spark inlines into the Java code it generates, so nearly every query
# compiled fresh code (an internal setting; its interpreted path is the one Spark falls
# back to itself). With the serial collector (`SERVER_JVM_OPTIONS`), measured with
# `bench.dagster_runs` on the 2-core machine: the engine's part of a small change
# 7.2 s -> 4.7 s, the whole run 11.6-12.4 s -> 8.3 s.
SERVER_CONF = {
    "spark.sql.adaptive.enabled": "false",
    "spark.sql.codegen.factoryMode": "NO_CODEGEN",
    "spark.connect.grpc.binding.address": "127.0.0.1",
    "spark.connect.grpc.binding.port": str(CONNECT_PORT),
    "spark.driver.host": "127.0.0.1",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.shuffle.partitions": "4",
    "spark.default.parallelism": "4",
    "spark.ui.showConsoleProgress": "false",
    # Every run's and its maintenance's generated code stays compiled (`RUN_COST_CONF`).
    "spark.sql.codegen.cache.maxEntries": RUN_COST_CONF["spark.sql.codegen.cache.maxEntries"],
}


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


def start_connect_server(log: Path) -> subprocess.Popen:
    """A local Spark Connect server on `CONNECT_PORT`, in the foreground of a new process
    group; returns once it listens."""
    if _listening(CONNECT_PORT):
        raise SystemExit(f"port {CONNECT_PORT} is taken: stop what listens there or set "
                         "OFFSET_ASSETS_DEV_CONNECT_PORT")
    spark_home = Path(pyspark.__file__).parent
    args = [str(spark_home / "sbin" / "start-connect-server.sh"), "--wait",
            "--master", "local[*]", "--driver-memory", "2g", "--driver-java-options", SERVER_JVM_OPTIONS]
    for key, value in SERVER_CONF.items():
        args += ["--conf", f"{key}={value}"]
    env = {**os.environ, "SPARK_HOME": str(spark_home), "SPARK_LOG_DIR": str(log.parent),
           "PYSPARK_PYTHON": sys.executable}
    with log.open("ab") as out:
        server = subprocess.Popen(args, env=env, stdout=out, stderr=subprocess.STDOUT,
                                  start_new_session=True)
    deadline = time.monotonic() + START_TIMEOUT_S
    while not _listening(CONNECT_PORT):
        if server.poll() is not None or time.monotonic() > deadline:
            stop(server)
            raise SystemExit(f"the Spark Connect server did not start; its log: {log}")
        time.sleep(0.5)
    return server


def stop(process: subprocess.Popen) -> None:
    """Stop a process started in its own group, and everything it started. The group is
    signalled even when its leader has exited: `dagster dev` can end before the webserver
    and daemon it started, which would keep the port."""
    if not _signal_group(process, signal.SIGTERM):
        return
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        _signal_group(process, signal.SIGKILL)
        process.wait()
    deadline = time.monotonic() + 20
    while _signal_group(process, 0) and time.monotonic() < deadline:  # members still ending
        time.sleep(0.2)
    _signal_group(process, signal.SIGKILL)


def _signal_group(process: subprocess.Popen, signum: int) -> bool:
    """Send `signum` to `process`'s group; False when no member of it is left."""
    try:
        os.killpg(process.pid, signum)
    except ProcessLookupError:
        return False
    return True


def _warm(server: subprocess.Popen, remote: str) -> None:
    """The throwaway run (`warmup.py`); a failure of it is reported and the UI starts anyway
    (the server then is as `make dev` had it before), an interrupt stops the server."""
    print("warming it up with a throwaway run of the engine ...", flush=True)
    try:
        print(f"warm in {warm_up(remote):.1f} s", flush=True)
    except Exception as exc:  # noqa: BLE001 - only the first run's speed depends on it
        print(f"warning: the warm-up run failed ({type(exc).__name__}: {str(exc).splitlines()[0][:200]}); "
              "starting the UI anyway", flush=True)
    except BaseException:
        stop(server)
        raise


def serve_global_views(remote: str, stop: threading.Event, interval_s: float = VIEWS_INTERVAL_S) -> None:
    """Every versioned table of the project's control plane as a global temp view on the
    server at `remote`, kept current until `stop` is set; before the first run has created
    the control plane, it waits for one."""
    spark = SparkSession.builder.remote(remote).create()
    try:
        while not stop.is_set():
            try:
                plane = connect(default_db_url(), create=False)
            except ControlPlaneNotFoundError:
                stop.wait(interval_s)
                continue
            GlobalViews(VersionedTables(spark, plane)).serve(stop, interval_s)
    finally:
        spark.stop()


def main() -> int:
    dagster = [str(Path(sys.executable).parent / "dagster"), "dev", "-w", "workspace.yaml",
               "-h", "127.0.0.1", "-p", os.environ.get("DEV_PORT", "3000")]
    env = dict(os.environ)
    server = None
    local = os.environ.get("DEV_SPARK", "connect") == "local"
    if not local and not (env.get(ENV_SPARK_REMOTE) or env.get(ENV_SPARK_MASTER)):
        log = state_dir() / "spark-connect" / "connect-server.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        print(f"starting a local Spark Connect server on 127.0.0.1:{CONNECT_PORT} (log: {log}) ...",
              flush=True)
        server = start_connect_server(log)
        env[ENV_SPARK_REMOTE] = f"sc://127.0.0.1:{CONNECT_PORT}"
        print(f"Spark Connect server up: runs attach to {env[ENV_SPARK_REMOTE]}", flush=True)
        if os.environ.get("DEV_WARMUP", "1") != "0":
            _warm(server, env[ENV_SPARK_REMOTE])
    views_stop = threading.Event()
    if server is not None:
        threading.Thread(target=serve_global_views, args=(env[ENV_SPARK_REMOTE], views_stop), daemon=True,
                         name="global-views").start()
        print("every versioned table is a global temp view there (global_temp.<table>)", flush=True)
    ui = subprocess.Popen(dagster, env=env, start_new_session=True)
    try:
        return ui.wait()
    except KeyboardInterrupt:
        ui.send_signal(signal.SIGINT)
        try:
            return ui.wait(timeout=30)
        except subprocess.TimeoutExpired:
            stop(ui)
            return 1
    finally:
        views_stop.set()
        stop(ui)
        if server is not None:
            stop(server)
            print("Spark Connect server stopped", flush=True)


if __name__ == "__main__":
    sys.exit(main())
