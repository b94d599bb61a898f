"""The library over Spark Connect: a client process with no JVM of its own, talking to a
Connect server the fixture starts from the pyspark wheel.

Each story runs in a child process (`tests.remote_story`): this test process already
holds a classic local session, and a Connect client would switch its functions to
Connect. Outputs are compared with a from-scratch computation over the same inputs and
with the literal rows the story must produce.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from offset_assets.config import ENV_SPARK_REMOTE
from tests.reference_story import reference_environment
from tests.remote_story import REPEATED_HOUR
from tests.spark_cluster import ConnectServer, free_port, run_client
from tests.test_cluster import run_driver

ROOT = Path(__file__).resolve().parent.parent
# One worker holds the Connect server and the cluster (tests/conftest.py groups them too).
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("jvm_servers")]


def run_story(server: ConnectServer, command: str, *args: str, env: dict[str, str] | None = None,
              ) -> subprocess.CompletedProcess:
    """`tests.remote_story COMMAND` as a client of `server` (with `env` added to its environment)."""
    return run_client(["-m", "tests.remote_story", command, "--remote", server.url, *args], server, env or {},
                      timeout=600)


def story_json(server: ConnectServer, command: str, *args: str, env: dict[str, str] | None = None) -> dict:
    child = run_story(server, command, *args, env=env)
    assert child.returncode == 0, child.stderr[-3000:]
    return json.loads(child.stdout.strip().splitlines()[-1])


def test_engine_story_over_spark_connect_processes_exactly_the_changes(connect_server, tmp_path):
    (tmp_path / "warehouse").mkdir()
    story = story_json(connect_server, "story", f"sqlite:///{tmp_path / 'cp.db'}", str(tmp_path / "warehouse"))

    refused = story["relative_warehouse"]
    assert "'relative/warehouse' is a relative path" in refused["error"]
    assert refused["tables"] == [] and refused["written"] is False  # refused before any write
    # First run: every post and user; second: 2 upserted + 1 deleted post and the 2 posts
    # of the renamed profile (reverse join), 2 users' counts; third: nothing left.
    assert story["processed"] == {"first": [6, 3], "second": [5, 2], "third": 0}
    assert story["first_errors"] == []
    assert story["enriched"] == story["expected_enriched"] == [
        [10, 1, "a", "ann"], [11, 1, "b2", "ann"], [12, 2, "c", "bob"],
        [14, 3, "e", "cyrus"], [15, 3, "f", "cyrus"], [16, 1, "new", "ann"]]
    assert story["stats"] == story["expected_stats"] == [[1, 3], [2, 1], [3, 2]]
    assert story["hot"] == [False, False]


def test_timestamp_keys_that_the_clients_clock_shows_as_one_time_stay_two_keys_over_connect(connect_server, tmp_path):
    # A Connect client collects a timestamp as its naive local time and drops which of
    # the repeated hour it was: before the fix, the run processed one key of the two.
    (tmp_path / "warehouse").mkdir()
    told = story_json(connect_server, "timestamps", f"sqlite:///{tmp_path / 'cp.db'}", str(tmp_path / "warehouse"),
                      env={"TZ": "America/New_York"})
    first, second = (int(at.timestamp()) * 10**6 for at in REPEATED_HOUR)
    assert told == {name: {"processed": [2, 1], "errors": [], "stored": [[first, 1.0], [second, 2.5]]}
                    for name in ("sensor_at", "at")}


@pytest.mark.sigkill
def test_a_connect_client_killed_inside_its_commit_is_completed_by_the_next_run(connect_server, tmp_path):
    db_url, warehouse = f"sqlite:///{tmp_path / 'cp.db'}", str(tmp_path / "warehouse")
    (tmp_path / "warehouse").mkdir()
    crashed = run_story(connect_server, "crash", db_url, warehouse)
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr[-3000:]

    recovered = story_json(connect_server, "recover", db_url, warehouse)
    assert recovered["committed_before"] == []  # the dead run's output files were never visible
    assert recovered["processed"] == 6 and recovered["processed_again"] == 0
    assert recovered["enriched"] == recovered["expected_enriched"]
    assert recovered["hot"] is False


def test_a_connect_endpoint_that_is_down_is_one_clear_error():
    url = f"sc://127.0.0.1:{free_port()}"
    child = subprocess.run(
        [sys.executable, "-c", f"from offset_assets.spark import get_spark_session; get_spark_session(remote={url!r})"],
        cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert child.returncode == 1
    assert f"SparkUnavailableError: Spark endpoint {url} does not answer (127.0.0.1:" in child.stderr


def test_reference_project_over_spark_connect_on_the_lazy_pyspark_resource_equals_the_local_run(
        connect_server, local_reference_run, tmp_path):
    """The reference project's LazyPySparkResource with `spark.remote` in its spark_config
    (from OFFSET_ASSETS_SPARK_REMOTE): the same outputs as the local run, row for row."""
    connect_env = {**reference_environment(tmp_path / "connect", f"sqlite:///{tmp_path / 'connect.db'}"),
                   ENV_SPARK_REMOTE: connect_server.url}
    over_connect = run_driver(["tests.reference_story"], connect_env, connect_server=connect_server)
    local = dict(local_reference_run)

    print(f"reference story: local[2] {local['seconds']} s, Spark Connect {over_connect['seconds']} s")
    # A Connect client attaches in about a second: the run's steps share one process and
    # one client, as with a local master (the cluster test covers a process per step).
    assert (over_connect.pop("executor"), local.pop("executor")) == ("in_process", "in_process")
    over_connect.pop("seconds"), local.pop("seconds")
    assert over_connect == local
    assert over_connect["processed"]["first"] == {"enriched_posts": 30, "user_post_stats": 6}
    assert len(over_connect["outputs"]["enriched_posts"]) == 30 + 3 - 1


def test_make_devs_warm_up_runs_the_engine_over_connect_and_leaves_nothing_behind(connect_server, tmp_path):
    """`make dev` sends its fresh server a throwaway run (`assets_defs/warmup.py`) before
    the UI starts: it must finish over Connect and delete its folder and control plane
    (with one incremental run: `make dev`'s further runs repeat it)."""
    warm_up = "from assets_defs.warmup import warm_up; import sys; print(warm_up(sys.argv[1], 1))"
    child = run_client(["-c", warm_up, connect_server.url], connect_server, {"TMPDIR": str(tmp_path)}, timeout=600)

    assert child.returncode == 0, child.stderr[-3000:]
    assert float(child.stdout.strip().splitlines()[-1]) > 0
    assert list(tmp_path.iterdir()) == []
