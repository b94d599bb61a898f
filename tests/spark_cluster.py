"""A real Spark standalone cluster and a Spark Connect server, started from the pyspark
wheel's own launchers and bound to 127.0.0.1, for the tests that need them.

Both are session-scoped and lazy: only the tests that ask for `spark_cluster` or
`connect_server` pay for them (a few seconds of JVM start-up each), and every JVM
started here is stopped by its PID at the end of the session, the executors that the
workers launched included.

The cluster is `bench/standalone_cluster.py`'s `SparkCluster` (the copy benchmark
starts the same one): here one master and two workers of 1 core and 1 GB each (the machine has two
cores). Two workers so that the application of the process that drives a test and the
applications of Dagster's step processes can run side by side (`CLUSTER_APP_CONF` caps
every application at one core), and so that killing one executor leaves the cluster
able to carry on.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from bench.standalone_cluster import (
    SPARK_HOME,
    START_TIMEOUT_S,
    SparkCluster,
    daemon_env,
    free_port,
    launch,
    spark_ui_in_log,
    stop_process,
)
from offset_assets.class_archive import with_class_archive
from offset_assets.spark import SHORT_JVM_OPTIONS

__all__ = ["CLUSTER_APP_CONF", "DRIVER_ENV", "ConnectServer", "ConnectServers", "SparkCluster", "free_port",
           "run_client"]

ROOT = Path(__file__).resolve().parent.parent

WORKERS = 2

# Settings of every application the tests run on the cluster.
CLUSTER_APP_CONF = {
    "spark.driver.extraJavaOptions": with_class_archive(SHORT_JVM_OPTIONS),
    "spark.executor.extraJavaOptions": with_class_archive(SHORT_JVM_OPTIONS),
    "spark.cores.max": "1",
    "spark.executor.cores": "1",
    "spark.executor.memory": "512m",
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.sql.shuffle.partitions": "2",
    "spark.default.parallelism": "2",
    "spark.sql.adaptive.enabled": "false",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
}


# Environment of driver processes the tests start: Spark binds to loopback only, and
# executors start their Python workers with the driver's PYSPARK_PYTHON (a driver
# started from Python ignores spark.pyspark.python): this interpreter, not the
# machine's python3, which lacks pyarrow for Spark 4's Arrow-based Python UDFs.
DRIVER_ENV = {"SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}


class ServerExitedError(RuntimeError):
    """The Connect server's JVM exited while starting."""


@dataclass
class ConnectServer:
    """A Spark Connect server (its own driver, `local[2]`) listening on 127.0.0.1, with
    its UI, whose REST API tells the jobs the server ran (a client cannot count them)."""

    url: str
    process: subprocess.Popen
    workdir: Path
    log: Path

    @classmethod
    def start(cls, workdir: Path, attempts: int = 3) -> ConnectServer:
        """Start a server on a free port; return once it has said it serves there. The
        port is free when chosen, not when the JVM binds it seconds later: a server that
        found it taken is started again on another."""
        workdir.mkdir(parents=True, exist_ok=True)
        attempt = 1
        while True:
            server = cls._launch(workdir, attempt)
            try:
                server.wait_until_serving()
                return server
            except ServerExitedError:
                if attempt == attempts or "BindException" not in server.log_text():
                    raise
            except BaseException:
                server.stop()
                raise
            attempt += 1

    @classmethod
    def _launch(cls, workdir: Path, attempt: int) -> ConnectServer:
        port = free_port()
        env = {**daemon_env(workdir / "logs"), "SPARK_CONNECT_MODE": "0"}
        for name in ("SPARK_DAEMON_MEMORY", "SPARK_DAEMON_JAVA_OPTS"):
            env.pop(name)  # the server is a driver doing the work, not a daemon
        # A heap or thread limit reached ends the JVM with a line in its log, rather than
        # leaving its clients to retry a server that no longer answers; a JVM crash
        # writes its report beside the log.
        java_options = with_class_archive(
            f"{SHORT_JVM_OPTIONS} -XX:+ExitOnOutOfMemoryError -XX:ErrorFile={workdir}/hs_err_%p.log")
        args = [str(SPARK_HOME / "bin" / "spark-submit"),
                "--class", "org.apache.spark.sql.connect.service.SparkConnectServer",
                "--name", "offset-assets-tests-connect", "--master", "local[2]",
                "--driver-memory", "1g",
                "--driver-java-options", java_options,
                "--conf", f"spark.connect.grpc.binding.port={port}",
                "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
                "--conf", "spark.driver.host=127.0.0.1",
                "--conf", "spark.sql.shuffle.partitions=2",
                "--conf", "spark.sql.adaptive.enabled=false",
                "--conf", f"spark.ui.port={free_port()}",
                "--conf", "spark.ui.showConsoleProgress=false",
                "--conf", "spark.sql.session.timeZone=UTC"]
        log = workdir / ("connect.log" if attempt == 1 else f"connect-{attempt}.log")
        return cls(f"sc://127.0.0.1:{port}", launch(args, log, env), workdir, log)

    def wait_until_serving(self) -> None:
        """Wait for the server's own word that it serves its port: something else may
        listen there (the port was taken between its choice and the JVM's bind)."""
        serving = f"Spark Connect server started at: {self.url.removeprefix('sc://')}"
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if not self.alive():
                raise ServerExitedError(f"the Connect server exited: {self.death_report()}")
            if serving in self.log_text():
                return
            time.sleep(0.5)
        raise TimeoutError(f"Spark Connect server not serving {self.url} in {START_TIMEOUT_S} s; its log {self.log}")

    @property
    def ui(self) -> str:
        """The server's UI, on the port it bound (the one asked for when it was free)."""
        ui = spark_ui_in_log(self.log_text())
        if ui is None:
            raise RuntimeError(f"the Connect server's log names no UI: {self.log}")
        return ui

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")

    def alive(self) -> bool:
        return self.process.poll() is None

    def death_report(self) -> str:
        """How the server ended: its exit status, the JVM's fatal error report if it wrote
        one, and the end of its log."""
        status = self.process.returncode
        how = f"killed by signal {-status}" if status < 0 else f"exit status {status}"
        crash = "".join(f"; JVM crash report {report}:\n{report.read_text()[:2000]}"
                        for report in sorted(self.workdir.glob("hs_err_*.log")))
        log = self.log_text().splitlines()
        return f"{self.url} ({how}){crash}\nits log's last lines:\n" + "\n".join(log[-30:])

    def stop(self) -> None:
        stop_process(self.process.pid)
        self.process.wait(timeout=10)


class ConnectServers:
    """The session's Connect server, started when a test first asks for it. One found dead
    before a test is reported (a warning in the session's summary, with why it ended)
    and replaced: one death fails the test it happened in, not every later test."""

    def __init__(self, workdirs: pytest.TempPathFactory):
        self.workdirs = workdirs
        self.server: ConnectServer | None = None

    def running(self) -> ConnectServer:
        if self.server is not None and not self.server.alive():
            warnings.warn(f"the Spark Connect server died before this test; a new one is started. "
                          f"{self.server.death_report()}", stacklevel=1)
            self.server = None
        if self.server is None:
            self.server = ConnectServer.start(self.workdirs.mktemp("spark-connect"))
        return self.server

    def stop(self) -> None:
        if self.server is not None and self.server.alive():
            self.server.stop()


def run_client(args: list[str], server: ConnectServer, env: dict[str, str], timeout: float,
               ) -> subprocess.CompletedProcess:
    """Run `python ARGS` (a client of `server`) from the repository to its end, as
    `subprocess.run` with captured text would; fail at once, with how the server ended,
    if the server dies while its client runs (a client would retry it for minutes)."""
    command = [sys.executable, *args]
    child = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env={**os.environ, "PYTHONPATH": str(ROOT), **env})
    deadline = time.monotonic() + timeout
    while True:
        try:
            out, err = child.communicate(timeout=2)
            return subprocess.CompletedProcess(command, child.returncode, out, err)
        except subprocess.TimeoutExpired as waiting:
            if server.alive() and time.monotonic() < deadline:
                continue
            child.kill()
            out, err = child.communicate()
            if not server.alive():
                pytest.fail(f"the Spark Connect server died while its client ({' '.join(args[:2])}) ran: "
                            f"{server.death_report()}\nthe client's last output:\n{err[-2000:]}")
            raise subprocess.TimeoutExpired(command, timeout, out, err) from waiting


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory) -> Iterator[SparkCluster]:
    cluster = SparkCluster.start(tmp_path_factory.mktemp("spark-cluster"), workers=WORKERS)
    yield cluster
    cluster.stop()


@pytest.fixture(scope="session")
def connect_servers(tmp_path_factory) -> Iterator[ConnectServers]:
    servers = ConnectServers(tmp_path_factory)
    yield servers
    servers.stop()


@pytest.fixture
def connect_server(connect_servers) -> ConnectServer:
    """The session's Spark Connect server, alive when the test starts."""
    return connect_servers.running()
