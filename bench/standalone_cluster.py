"""A throwaway Spark standalone cluster started from the pyspark wheel's own launchers
(`SparkCluster`: a master and its workers bound to 127.0.0.1, every JVM stopped by its
PID, the executors the workers launched included), and the process helpers it uses.

The copy benchmark runs on it (`BENCH_MASTER=standalone`, `make bench-cluster`); the
cluster and Connect tests start theirs with it too (`tests/spark_cluster.py`).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pyspark

from offset_assets.class_archive import with_class_archive
from offset_assets.spark import SHORT_JVM_OPTIONS

SPARK_HOME = Path(pyspark.__file__).parent
START_TIMEOUT_S = 120.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def spark_ui_in_log(text: str) -> str | None:
    """The UI a Spark driver's log says it started (on loopback), or None yet. Spark 4.3
    says "Successfully started service 'SparkUI' on port N"; earlier versions "Bound
    SparkUI to HOST, and started at http://HOST:N"."""
    found = re.search(r"service 'SparkUI' on port (\d+)|Bound SparkUI to .*started at https?://[^:/]+:(\d+)", text)
    return None if found is None else f"http://127.0.0.1:{found.group(1) or found.group(2)}"


def daemon_env(log_dir: Path) -> dict[str, str]:
    return {
        **os.environ,
        "SPARK_HOME": str(SPARK_HOME),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_DAEMON_MEMORY": "256m",
        # Master and worker only route messages: the client compiler and one GC thread
        # start them faster on a shared 2-core machine.
        "SPARK_DAEMON_JAVA_OPTS": with_class_archive(SHORT_JVM_OPTIONS),
        "SPARK_LOG_DIR": str(log_dir),
        "PYSPARK_PYTHON": sys.executable,
    }


def launch(args: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen:
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


def stop_process(pid: int, timeout: float = 15.0) -> None:
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
    """A standalone master and its workers, each a JVM started here (stopped by `stop`)."""

    master_url: str
    web_url: str
    workdir: Path
    master: subprocess.Popen
    workers: list[subprocess.Popen] = field(default_factory=list)

    @classmethod
    def start(cls, workdir: Path, workers: int = 1, cores: int = 1, memory: str = "1g") -> SparkCluster:
        """Start a master and `workers` workers of `cores` cores and `memory` each; return
        once every worker has registered."""
        workdir.mkdir(parents=True, exist_ok=True)
        env = daemon_env(workdir / "logs")
        port, web_port = free_port(), free_port()
        spark_class = str(SPARK_HOME / "bin" / "spark-class")
        master = launch([spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                          "--port", str(port), "--webui-port", str(web_port)], workdir / "master.log", env)
        cluster = cls(f"spark://127.0.0.1:{port}", f"http://127.0.0.1:{web_port}", workdir, master)
        try:
            for n in range(workers):
                cluster.workers.append(launch(
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
            stop_process(worker.pid)
            worker.wait(timeout=10)
            for pid in executors:
                stop_process(pid, timeout=5)
        stop_process(self.master.pid)
        self.master.wait(timeout=10)


@contextlib.contextmanager
def spark_master(master: str, executor_memory: str = "6g", worker_memory: str = "8g",
                 ) -> Iterator[tuple[str, dict[str, str]]]:
    """The master a benchmark runs on and the settings it needs: `local[...]`, a running
    cluster (`spark://host:port`), or `standalone`: a throwaway cluster of one worker with
    every core of this machine, started here and stopped at the end."""
    if master.startswith("local"):
        yield master, {}
        return
    # Executors start Python workers with the driver's PYSPARK_PYTHON; a cluster on this
    # machine binds to loopback.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    conf = {"spark.executor.memory": executor_memory}
    if master != "standalone":
        yield master, conf
        return
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    with tempfile.TemporaryDirectory(prefix="bench-cluster-") as workdir:
        cluster = SparkCluster.start(Path(workdir), workers=1, cores=os.cpu_count() or 1, memory=worker_memory)
        try:
            yield cluster.master_url, {**conf, "spark.driver.host": "127.0.0.1",
                                       "spark.driver.bindAddress": "127.0.0.1"}
        finally:
            cluster.stop()
