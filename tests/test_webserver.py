"""`make dev` shows the reference project: a real `dagster-webserver` on `workspace.yaml`.

The webserver runs as its own process (with its own code server) on a free loopback
port, with the instance config of `.dagster_home/dagster.yaml` in a temporary
DAGSTER_HOME and the embedded state in a temporary folder; the test reads the
workspace through the GraphQL endpoint the UI uses, and stops the process group.
"""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
WEBSERVER = Path(sys.executable).parent / "dagster-webserver"
START_TIMEOUT_S = 240

WORKSPACE_QUERY = """
{ workspaceOrError { __typename
  ... on Workspace { locationEntries { name loadStatus locationOrLoadError { __typename
    ... on PythonError { message }
    ... on RepositoryLocation { repositories {
      assetNodes { assetKey { path } groupName partitionDefinition { type }
                   assetChecksOrError { ... on AssetChecks { checks { name } } } }
      sensors { name } schedules { name } jobs { name } } } } } } } }
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def graphql(port: int, query: str) -> dict:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/graphql", data=json.dumps({"query": query}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.load(response)


@pytest.fixture
def webserver(tmp_path):
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(ROOT / ".dagster_home" / "dagster.yaml", home / "dagster.yaml")
    env = {**os.environ, "DAGSTER_HOME": str(home), "OFFSET_ASSETS_HOME": str(tmp_path / "state")}
    for name in ("OFFSET_ASSETS_DB_URL", "OFFSET_ASSETS_WAREHOUSE", "OFFSET_ASSETS_SOURCE_URL",
                 "OFFSET_ASSETS_DEPLOYMENT", "OFFSET_ASSETS_INGEST_START"):
        env.pop(name, None)
    port = free_port()
    log = (tmp_path / "webserver.log").open("w")
    process = subprocess.Popen(
        [str(WEBSERVER), "-w", "workspace.yaml", "-p", str(port), "-h", "127.0.0.1"],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )
    try:
        yield port, process, tmp_path / "webserver.log"
    finally:
        # The process group holds the webserver and the code server it started.
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)
        log.close()


def loaded_location(port: int, process: subprocess.Popen, log: Path) -> dict:
    """Poll until the webserver answers and the code location has loaded."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"dagster-webserver exited with {process.returncode}:\n{log.read_text()[-3000:]}")
        try:
            entry = graphql(port, WORKSPACE_QUERY)["data"]["workspaceOrError"]["locationEntries"][0]
        except (urllib.error.URLError, ConnectionError, OSError, KeyError, IndexError):
            time.sleep(1)
            continue
        if entry["loadStatus"] == "LOADED":
            return entry
        time.sleep(1)
    pytest.fail(f"the code location did not load in {START_TIMEOUT_S} s:\n{log.read_text()[-3000:]}")


def test_webserver_on_the_workspace_lists_the_assets_checks_sensors_and_schedules(webserver):
    port, process, log = webserver
    entry = loaded_location(port, process, log)
    assert entry["name"] == "offset_assets_reference"
    location = entry["locationOrLoadError"]
    assert location["__typename"] == "RepositoryLocation", location
    [repository] = location["repositories"]

    assets = {"/".join(node["assetKey"]["path"]): node for node in repository["assetNodes"]}
    assert set(assets) == {"posts", "post_updates", "profiles", "enriched_posts", "user_post_stats"}
    assert {name: node["groupName"] for name, node in assets.items()} == {
        "posts": "ingestion", "post_updates": "ingestion", "profiles": "ingestion",
        "enriched_posts": "transformations", "user_post_stats": "transformations"}
    assert assets["posts"]["partitionDefinition"]["type"] == "DYNAMIC"
    assert assets["post_updates"]["partitionDefinition"]["type"] == "TIME_WINDOW"
    assert assets["profiles"]["partitionDefinition"]["type"] == "TIME_WINDOW"
    checks = {name: sorted(c["name"] for c in node["assetChecksOrError"]["checks"])
              for name, node in assets.items() if node["assetChecksOrError"]["checks"]}
    assert checks == {"enriched_posts": ["offset_age", "offset_backlog"],
                      "user_post_stats": ["offset_age", "offset_backlog"]}
    assert {s["name"] for s in repository["sensors"]} == {
        "posts_ranges_sensor", "enriched_posts_inputs_changed", "user_post_stats_inputs_changed"}
    assert {s["name"] for s in repository["schedules"]} == {
        "post_updates_schedule", "profiles_schedule", "transformations_hourly", "offset_checks"}
    assert "reprocess_transformations" in {j["name"] for j in repository["jobs"]}
