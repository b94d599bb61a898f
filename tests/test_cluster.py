"""The production topology on this machine: a Spark standalone cluster (master and two
workers started from the pyspark wheel), a PostgreSQL control plane, executors in JVMs
and Python workers of their own.

The cluster runs are driver processes of their own (`tests.reference_story`,
`tests.remote_story`): PySpark allows one driver per process, and this one already
drives the local session. The reference project's local run, in this process, is what
the cluster's outputs must equal row for row; the engine story checks its outputs
against a from-scratch computation over the same inputs.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from assets_defs.resources import ENV_DEPLOYMENT
from offset_assets.config import ENV_SPARK_MASTER
from offset_assets.spark import SparkUnavailableError, check_endpoint, endpoints
from tests.reference_story import reference_environment
from tests.small_driver_story import ROWS, make_documents
from tests.spark_cluster import CLUSTER_APP_CONF, DRIVER_ENV, ConnectServer, free_port, run_client

ROOT = Path(__file__).resolve().parent.parent
def spark_conf_dir(tmp_path: Path) -> str:
    """A SPARK_CONF_DIR whose spark-defaults.conf holds the cluster settings: how the
    drivers Dagster's step processes start get them, as on a real deployment."""
    conf = tmp_path / "spark_conf"
    conf.mkdir()
    (conf / "spark-defaults.conf").write_text("".join(f"{k} {v}\n" for k, v in CLUSTER_APP_CONF.items()))
    return str(conf)


def run_driver(args: list[str], env: dict[str, str], timeout: float = 1800,
               connect_server: ConnectServer | None = None) -> dict:
    """Run the driver module `args` and return the JSON of its last line of output; over
    `connect_server` (a client of it), fail as soon as the server dies."""
    if connect_server is not None:
        child = run_client(["-m", *args], connect_server, {**DRIVER_ENV, **env}, timeout)
    else:
        child = subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True,
                               timeout=timeout, env={**os.environ, "PYTHONPATH": str(ROOT), **DRIVER_ENV, **env})
    assert child.returncode == 0, child.stderr[-4000:]
    return json.loads(child.stdout.strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.postgres
def test_reference_pipeline_on_the_cluster_with_postgres_and_the_multiprocess_executor_equals_the_local_run(
        spark_cluster, postgres_url, local_reference_run, tmp_path):
    cluster_env = {
        **reference_environment(tmp_path / "cluster", postgres_url),
        ENV_DEPLOYMENT: "production",
        ENV_SPARK_MASTER: spark_cluster.master_url,
        "SPARK_CONF_DIR": spark_conf_dir(tmp_path),
    }
    on_cluster = run_driver(["tests.reference_story"], cluster_env)
    local = dict(local_reference_run)

    print(f"reference story: local[2] {local['seconds']} s, cluster {on_cluster['seconds']} s")
    assert (on_cluster.pop("executor"), local.pop("executor")) == ("multiprocess", "in_process")
    on_cluster.pop("seconds"), local.pop("seconds")
    assert on_cluster == local
    # Every post and author first; then the traffic's 5 changed posts plus the renamed
    # profile's posts (reverse join), and their authors.
    assert on_cluster["processed"]["first"] == {"enriched_posts": 30, "user_post_stats": 6}
    assert 0 < on_cluster["processed"]["second"]["enriched_posts"] < 30
    assert len(on_cluster["outputs"]["enriched_posts"]) == 30 + 3 - 1


def kill_an_executor_when(marker: Path, cluster, deadline_s: float = 600) -> int:
    """Wait for `marker` (the run is under way), then SIGKILL one executor JVM."""
    deadline = time.monotonic() + deadline_s
    while not marker.exists():
        assert time.monotonic() < deadline, "the slow run never started"
        time.sleep(0.5)
    time.sleep(3)  # the slow tasks are running on the executor now
    [pid, *_] = cluster.executor_pids()
    os.kill(pid, signal.SIGKILL)
    return pid


@pytest.mark.slow
@pytest.mark.sigkill
@pytest.mark.postgres
def test_engine_story_on_the_cluster_with_an_executor_killed_mid_run_commits_once_exactly(
        spark_cluster, postgres_url, tmp_path):
    marker = tmp_path / "first-run-started"
    (tmp_path / "cluster").mkdir()
    log = tmp_path / "driver.log"  # a file, not a pipe: Spark's log must never block the driver
    with open(log, "w") as stderr:
        driver = subprocess.Popen(
            [sys.executable, "-m", "tests.remote_story", "story", "--master", spark_cluster.master_url,
             postgres_url, str(tmp_path / "cluster"), str(marker)],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=stderr, text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT), **DRIVER_ENV})
        try:
            killed = kill_an_executor_when(marker, spark_cluster)
            out, _ = driver.communicate(timeout=900)
        finally:
            if driver.poll() is None:
                driver.kill()
    assert driver.returncode == 0, log.read_text()[-4000:]
    on_cluster = json.loads(out.strip().splitlines()[-1])
    print(f"first run with an executor killed: processed {on_cluster['processed']['first']}, "
          f"errors {on_cluster['first_errors']}")
    assert killed not in spark_cluster.executor_pids()

    refused = on_cluster["relative_warehouse"]
    assert "'relative/warehouse' is a relative path" in refused["error"]
    assert refused["tables"] == [] and refused["written"] is False  # refused before any write
    if on_cluster["first_errors"]:
        # The lost executor failed the batch: recorded as failed, nothing of it committed,
        # and the next run retried its 6 keys along with the 5 changed ones (7 in all).
        assert on_cluster["processed"] == {"first": [0, 3], "second": [7, 2], "third": 0}
    else:
        # Spark re-ran the lost tasks on a new executor: the run committed once, exactly.
        assert on_cluster["processed"] == {"first": [6, 3], "second": [5, 2], "third": 0}
    assert on_cluster["enriched"] == on_cluster["expected_enriched"]
    assert on_cluster["stats"] == on_cluster["expected_stats"]
    assert on_cluster["hot"] == [False, False]
    # The small change is indexed, read, classified and written by the driver on the
    # cluster too: Spark only for the function's own join (the broadcast of the
    # profiles, the collect of its output).
    assert on_cluster["second_jobs_by_phase"] == {"output_write": 2}


@pytest.mark.slow
def test_a_sql_range_larger_than_its_drivers_memory_is_ingested_exactly_on_the_cluster(spark_cluster, tmp_path):
    source_url = f"sqlite:///{tmp_path / 'source.db'}"
    make_documents(source_url)
    story = run_driver(["tests.small_driver_story", spark_cluster.master_url, source_url, str(tmp_path)], {})

    # One range, every row read once and versioned once; each document whole and its own.
    assert story["ranges"] == [["0", str(ROWS), ROWS, ROWS]]
    assert story["found"] == {"rows": ROWS, "ids": ROWS, "min_id": 1, "max_id": ROWS,
                              "chars": ROWS * 10_000, "wrong_bodies": 0}
    # The range's text alone is twice what the driver's JVM could hold, and the driver's
    # Python grew by less than half of it while the range ran (its peak before the range,
    # about 300 MB of imports and session, is not the range's).
    assert story["found"]["chars"] >= 2 * story["driver_heap_bytes"], story
    assert story["found"]["chars"] >= 2 * story["driver_python_peak_growth_bytes"], story


def test_master_and_connect_urls_name_the_endpoints_to_check():
    assert endpoints("spark://10.0.0.1:7077,10.0.0.2:7078") == [("10.0.0.1", 7077), ("10.0.0.2", 7078)]
    assert endpoints("spark://master") == [("master", 7077)]
    assert endpoints("sc://gateway;token=abc") == [("gateway", 15002)]
    assert endpoints("sc://127.0.0.1:15003/") == [("127.0.0.1", 15003)]
    assert endpoints("local[2]") == endpoints("yarn") == []


def test_a_master_that_does_not_answer_is_one_clear_error_before_spark_starts():
    url = f"spark://127.0.0.1:{free_port()}"
    with pytest.raises(SparkUnavailableError, match=rf"Spark endpoint {url} does not answer \(127.0.0.1:\d+: "):
        check_endpoint(url)
    child = subprocess.run(
        [sys.executable, "-c", f"from offset_assets.spark import get_spark_session; get_spark_session(master={url!r})"],
        cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert child.returncode == 1
    assert f"SparkUnavailableError: Spark endpoint {url} does not answer" in child.stderr
