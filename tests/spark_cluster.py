"""A real Spark standalone cluster and a Spark Connect server, started from the pyspark
wheel's own launchers and bound to 127.0.0.1, for the tests that need them.

Both are session-scoped and lazy: only the tests that ask for `spark_cluster` or
`connect_server` pay for them (a few seconds of JVM start-up each), and every JVM
started here is stopped by its PID at the end of the session, the executors that the
workers launched included.

The cluster: one master and two workers of 1 core and 1 GB each (the machine has two
cores). Two workers so that the application of the process that drives a test and the
applications of Dagster's step processes can run side by side (`CLUSTER_APP_CONF` caps
every application at one core), and so that killing one executor leaves the cluster
able to carry on.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pyspark
import pytest

SPARK_HOME = Path(pyspark.__file__).parent
START_TIMEOUT_S = 120.0
WORKERS = 2

# Settings of every application the tests run on the cluster.
CLUSTER_APP_CONF = {
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


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _daemon_env(log_dir: Path) -> dict[str, str]:
    return {
        **os.environ,
        "SPARK_HOME": str(SPARK_HOME),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_DAEMON_MEMORY": "256m",
        # Master and worker only route messages: the client compiler and one GC thread
        # start them faster on a shared 2-core machine.
        "SPARK_DAEMON_JAVA_OPTS": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
        "SPARK_LOG_DIR": str(log_dir),
        "PYSPARK_PYTHON": sys.executable,
    }


def _launch(args: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen:
    with open(log, "wb") as out:
        # spark-class execs java: the PID we get is the JVM's.
        return subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, env=env,
                                stdin=subprocess.DEVNULL)


def _state_and_parent(pid: int) -> tuple[str, int] | None:
    """The state letter and parent PID of a process from /proc (None once it is gone).
    An exited child that its parent has not reaped yet stays there as a zombie ("Z")."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    state, parent = stat.rsplit(")", 1)[1].split()[:2]
    return state, int(parent)


def _alive(pid: int) -> bool:
    """Running, not a zombie: `os.kill(pid, 0)` still succeeds on a zombie."""
    found = _state_and_parent(pid)
    return found is not None and found[0] != "Z"


def children_of(pid: int) -> list[int]:
    """Live PIDs whose parent is `pid` (a worker's executor JVMs)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            process = _state_and_parent(int(entry.name))
            if process is not None and process[0] != "Z" and process[1] == pid:
                found.append(int(entry.name))
    return found


def _stop(pid: int, timeout: float = 15.0) -> None:
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _alive(pid):
            return
        time.sleep(0.2)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


@dataclass
class SparkCluster:
    """A standalone master and its workers, each a JVM this fixture started."""

    master_url: str
    web_url: str
    workdir: Path
    master: subprocess.Popen
    workers: list[subprocess.Popen] = field(default_factory=list)

    @classmethod
    def start(cls, workdir: Path, workers: int = WORKERS, cores: int = 1, memory: str = "1g") -> SparkCluster:
        """Start a master and `workers` workers of `cores` cores and `memory` each; return
        once every worker has registered."""
        workdir.mkdir(parents=True, exist_ok=True)
        env = _daemon_env(workdir / "logs")
        port, web_port = free_port(), free_port()
        spark_class = str(SPARK_HOME / "bin" / "spark-class")
        master = _launch([spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                          "--port", str(port), "--webui-port", str(web_port)], workdir / "master.log", env)
        cluster = cls(f"spark://127.0.0.1:{port}", f"http://127.0.0.1:{web_port}", workdir, master)
        try:
            for n in range(workers):
                cluster.workers.append(_launch(
                    [spark_class, "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                     "--cores", str(cores), "--memory", memory, "--webui-port", str(free_port()),
                     "--work-dir", str(workdir / f"worker{n}"), cluster.master_url],
                    workdir / f"worker{n}.log", env))
            cluster.wait_for_workers(workers)
        except BaseException:
            cluster.stop()
            raise
        return cluster

    def state(self) -> dict:
        """The master's JSON status page (workers, applications)."""
        with urllib.request.urlopen(f"{self.web_url}/json/", timeout=5) as response:
            return json.load(response)

    def wait_for_workers(self, count: int) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            for process in (self.master, *self.workers):
                if process.poll() is not None:
                    raise RuntimeError(f"a cluster JVM exited ({process.args[1]}); logs in {self.workdir}")
            try:
                if self.state().get("aliveworkers", 0) >= count:
                    return
            except OSError:
                pass
            time.sleep(0.5)
        raise TimeoutError(f"{count} workers not registered with {self.master_url} in {START_TIMEOUT_S} s")

    def executor_pids(self) -> list[int]:
        """Executor JVMs running now, each a child of a worker."""
        return [pid for worker in self.workers for pid in children_of(worker.pid)]

    def stop(self) -> None:
        for worker in self.workers:
            executors = children_of(worker.pid)
            _stop(worker.pid)
            worker.wait(timeout=10)
            for pid in executors:
                _stop(pid, timeout=5)
        _stop(self.master.pid)
        self.master.wait(timeout=10)


@dataclass
class ConnectServer:
    """A Spark Connect server (its own driver, `local[2]`) listening on 127.0.0.1."""

    url: str
    process: subprocess.Popen
    workdir: Path

    @classmethod
    def start(cls, workdir: Path) -> ConnectServer:
        workdir.mkdir(parents=True, exist_ok=True)
        port = free_port()
        env = {**_daemon_env(workdir / "logs"), "SPARK_CONNECT_MODE": "0"}
        for name in ("SPARK_DAEMON_MEMORY", "SPARK_DAEMON_JAVA_OPTS"):
            env.pop(name)  # the server is a driver doing the work, not a daemon
        args = [str(SPARK_HOME / "bin" / "spark-submit"),
                "--class", "org.apache.spark.sql.connect.service.SparkConnectServer",
                "--name", "offset-assets-tests-connect", "--master", "local[2]",
                "--driver-memory", "1g",
                "--conf", f"spark.connect.grpc.binding.port={port}",
                "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
                "--conf", "spark.driver.host=127.0.0.1",
                "--conf", "spark.sql.shuffle.partitions=2",
                "--conf", "spark.sql.adaptive.enabled=false",
                "--conf", "spark.ui.enabled=false",
                "--conf", "spark.sql.session.timeZone=UTC"]
        server = cls(f"sc://127.0.0.1:{port}", _launch(args, workdir / "connect.log", env), workdir)
        try:
            server.wait_until_listening(port)
        except BaseException:
            server.stop()
            raise
        return server

    def wait_until_listening(self, port: int) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the Connect server exited; log: {self.workdir / 'connect.log'}")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.5)
        raise TimeoutError(f"Spark Connect server not listening on {port} in {START_TIMEOUT_S} s")

    def stop(self) -> None:
        _stop(self.process.pid)
        self.process.wait(timeout=10)


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory) -> Iterator[SparkCluster]:
    cluster = SparkCluster.start(tmp_path_factory.mktemp("spark-cluster"))
    yield cluster
    cluster.stop()


@pytest.fixture(scope="session")
def connect_server(tmp_path_factory) -> Iterator[ConnectServer]:
    server = ConnectServer.start(tmp_path_factory.mktemp("spark-connect"))
    yield server
    server.stop()
