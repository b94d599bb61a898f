"""`make demo` then `make dev`: a real `dagster-webserver` on `workspace.yaml` shows the
demo's runs as a Dagster user reads them.

The demo story runs first (`demo_story`, `tests/demo_state.py`: small sizes, in this
process) into a temporary Dagster instance configured by the repository's `dagster.yaml`
(its storage folders moved to the temporary DAGSTER_HOME) and a temporary state folder,
once for this test and the reference project's story test. The webserver then runs as
its own process (with its own code server) on a free loopback port over the same
instance and state; the test reads what the UI shows through the GraphQL endpoint the
UI uses (assets, lineage, metadata types, row counts, job names), and stops the
process group.
"""

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from datetime import UTC, datetime
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
                   partitionKeysByDimension { partitionKeys }
                   dependencyKeys { path } automationCondition { label }
                   assetChecksOrError { ... on AssetChecks { checks { name } } } }
      sensors { name sensorState { status } } schedules { name scheduleState { status } }
      jobs { name } } } } } } } }
"""
LATEST_MATERIALIZATION_QUERY = """
{ assetOrError(assetKey: {path: ["%s"]}) { ... on Asset { assetMaterializations(limit: 1) {
  runId metadataEntries { label __typename
    ... on IntMetadataEntry { intValue } ... on FloatMetadataEntry { floatValue }
    ... on TimestampMetadataEntry { timestamp } ... on TextMetadataEntry { text }
    ... on MarkdownMetadataEntry { mdStr } } } } } }
"""
RUNS_QUERY = """{ runsOrError { ... on Runs { results { runId jobName } } } }"""


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
def webserver(tmp_path, demo_story):
    env = {**os.environ, "DAGSTER_HOME": str(demo_story.home), "OFFSET_ASSETS_HOME": str(demo_story.state)}
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
        # The process group holds the webserver and the code server it started. The
        # assertions are done: a webserver that takes more than a few seconds to shut down
        # gracefully (it has taken over 30 s on a busy machine) is killed.
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=5)
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


def metadata(port: int, asset: str) -> dict[str, tuple[str, object]]:
    """The latest materialization's metadata as the UI gets it: label -> (type, value)."""
    [event] = graphql(port, LATEST_MATERIALIZATION_QUERY % asset)["data"]["assetOrError"][
        "assetMaterializations"]
    values = {}
    for entry in event["metadataEntries"]:
        value = next((v for k, v in entry.items() if k not in ("label", "__typename")), None)
        values[entry["label"]] = (entry["__typename"], value)
    return values


def test_webserver_shows_the_demo_with_lineage_typed_metadata_row_counts_and_job_names(
        webserver, demo_story):
    port, process, log = webserver
    story = demo_story.story
    entry = loaded_location(port, process, log)
    assert entry["name"] == "offset_assets_reference"
    location = entry["locationOrLoadError"]
    assert location["__typename"] == "RepositoryLocation", location
    [repository] = location["repositories"]

    assets = {"/".join(node["assetKey"]["path"]): node for node in repository["assetNodes"]}
    assert set(assets) == {"posts", "post_updates", "profiles", "enriched_posts", "user_post_stats",
                           "accepted_posts", "rejected_posts"}
    assert {name: node["groupName"] for name, node in assets.items()} == {
        "posts": "ingestion", "post_updates": "ingestion", "profiles": "ingestion",
        "enriched_posts": "transformations", "user_post_stats": "transformations",
        "accepted_posts": "transformations", "rejected_posts": "transformations"}
    assert assets["posts"]["partitionDefinition"]["type"] == "DYNAMIC"
    assert assets["post_updates"]["partitionDefinition"]["type"] == "TIME_WINDOW"
    assert assets["profiles"]["partitionDefinition"]["type"] == "TIME_WINDOW"
    checks = {name: sorted(c["name"] for c in node["assetChecksOrError"]["checks"])
              for name, node in assets.items() if node["assetChecksOrError"]["checks"]}
    assert checks == {name: ["offset_age", "offset_backlog"]
                      for name in ("enriched_posts", "user_post_stats", "accepted_posts", "rejected_posts")}
    assert {s["name"]: s["sensorState"]["status"] for s in repository["sensors"]} == {
        "posts_ranges_sensor": "STOPPED", "enriched_posts_inputs_changed": "RUNNING",
        "user_post_stats_inputs_changed": "RUNNING", "moderated_posts_inputs_changed": "RUNNING",
        "transformations_automation": "RUNNING"}
    assert {s["name"]: s["scheduleState"]["status"] for s in repository["schedules"]} == {
        "post_updates_schedule": "STOPPED", "profiles_schedule": "STOPPED", "offset_checks": "RUNNING",
        "table_maintenance_hourly": "STOPPED"}
    # The partitions of the daily windows end with today's: it can be launched from the UI.
    today = datetime.now(UTC).strftime("%Y-%m-%d")
    for name in ("post_updates", "profiles"):
        [dimension] = assets[name]["partitionKeysByDimension"]
        assert dimension["partitionKeys"][-1] == today
    assert {"transformations", "reprocess_transformations", "posts_ingestion", "post_updates_ingestion",
            "profiles_ingestion"} <= {j["name"] for j in repository["jobs"]}

    # Lineage: post_updates writes the posts table, so it is upstream of enriched_posts.
    assert sorted("/".join(k["path"]) for k in assets["enriched_posts"]["dependencyKeys"]) == [
        "post_updates", "posts", "profiles"]
    assert assets["enriched_posts"]["automationCondition"]["label"] == "on input commits"

    # The asset page: row count, numeric (plotted) metadata, offsets as timestamps.
    enriched = metadata(port, "enriched_posts")
    assert enriched["dagster/row_count"] == ("IntMetadataEntry", 32)
    assert enriched["mode"] == ("TextMetadataEntry", "incremental")
    assert enriched["processed_keys"] == ("IntMetadataEntry", 10)
    assert enriched["delta.enriched_posts"] == ("IntMetadataEntry", 2)
    assert enriched["offset_lag_s.posts"] == ("FloatMetadataEntry", 0.0)
    assert enriched["offset_after.posts"][0] == "TimestampMetadataEntry"
    # The run's wall clock and the commit time of the inputs it read, named apart.
    assert enriched["run_started_at"][0] == enriched["run_finished_at"][0] == "TimestampMetadataEntry"
    assert enriched["inputs_committed_up_to"][0] == "TimestampMetadataEntry"
    assert "process_ts" not in enriched
    assert [label for label, (kind, _) in enriched.items() if kind == "NullMetadataEntry"] == []
    assert enriched["summary"][0] == "MarkdownMetadataEntry"
    assert metadata(port, "user_post_stats")["dagster/row_count"][0] == "IntMetadataEntry"
    ingested = metadata(port, "profiles")
    assert ingested["commit_ts"][0] == "TimestampMetadataEntry"
    assert ingested["data_range_start"][1].endswith("T00:00:00Z")

    # Every demo run shows the job it ran, none the ephemeral job.
    jobs = {run["runId"]: run["jobName"] for run in graphql(port, RUNS_QUERY)["data"]["runsOrError"]["results"]}
    assert [jobs[run_id] for run_id in story.second.run_ids] == [
        "posts_ingestion", "post_updates_ingestion", "profiles_ingestion", "transformations"]
