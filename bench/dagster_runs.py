"""What a Dagster run costs from launch to success, launched as the UI launches it.

    .venv/bin/python -m bench.dagster_runs [--spark connect|local] [--port 3333] [--screenshots DIR]

In a fresh folder (its own state and Dagster instance): the demo, then `make dev`
(`python -m assets_defs.dev`: with `--spark connect` one local Spark Connect server that
every run attaches to, with `--spark local` a Spark driver in each run's process), then
runs launched through the webserver's GraphQL API (`launchRun`, what the UI's
Materialize and Launch Run buttons call):

1. `enriched_posts` with nothing to do;
2. the demo's traffic ingested through today's partition of `post_updates`, then
   `enriched_posts` (a small change: the edited and deleted posts), launched as soon as
   the ingestion ended (declarative automation would launch it too, on its next tick);
3. a backfill (`launchPartitionBackfill`, the UI's backfill dialog) of the three daily
   partitions of `post_updates` (the demo's: two days ago to today) and the
   transformations `enriched_posts` and `user_post_stats` downstream of them, which a
   backfill reprocesses from the start (their offsets reset).

Each run's figure is its record's create time to its end time (the instance's own
timestamps), so it includes queueing, the run process starting and the step; the
backfill's is its creation to the end of its last run, the daemon's ticks included.
Prints one JSON object. With `--screenshots DIR` (needs `chromium` on PATH) it also
saves the README's pictures of the UI into DIR: each page after the run it shows, taken
once that run's figure is recorded.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path

import dagster as dg
from dagster._core.execution.backfill import BULK_ACTION_TERMINAL_STATUSES

ROOT = Path(__file__).resolve().parents[1]
LOCATION = "offset_assets_reference"

LAUNCH = """
mutation Launch($params: ExecutionParams!) {
  launchRun(executionParams: $params) {
    __typename
    ... on LaunchRunSuccess { run { runId } }
    ... on PythonError { message }
    ... on RunConfigValidationInvalid { errors { message } }
  }
}
"""


def graphql(port: int, query: str, variables: dict | None = None) -> dict:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/graphql",
        data=json.dumps({"query": query, "variables": variables or {}}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.loads(response.read())


def wait_for_webserver(port: int, timeout_s: float = 300) -> None:
    deadline = time.monotonic() + timeout_s
    query = '{ workspaceOrError { ... on Workspace { locationEntries { name loadStatus } } } }'
    while time.monotonic() < deadline:
        try:
            entries = graphql(port, query)["data"]["workspaceOrError"]["locationEntries"]
            if entries and entries[0]["loadStatus"] == "LOADED":
                return
        except (urllib.error.URLError, ConnectionError, OSError, KeyError, TypeError):
            pass
        time.sleep(1)
    raise TimeoutError(f"the webserver on port {port} did not load the code location")


def launch(port: int, job: str, tags: dict[str, str] | None = None) -> str:
    params = {
        "selector": {"repositoryLocationName": LOCATION, "repositoryName": "__repository__",
                     "jobName": job},
        "executionMetadata": {"tags": [{"key": k, "value": v} for k, v in (tags or {}).items()]},
    }
    result = graphql(port, LAUNCH, {"params": params})["data"]["launchRun"]
    if result["__typename"] != "LaunchRunSuccess":
        raise RuntimeError(f"launching {job}: {result}")
    return result["run"]["runId"]


BACKFILL = """
mutation Backfill($params: LaunchBackfillParams!) {
  launchPartitionBackfill(backfillParams: $params) {
    __typename
    ... on LaunchBackfillSuccess { backfillId }
    ... on PythonError { message }
  }
}
"""


def launch_backfill(port: int, assets: list[str], partitions: list[str]) -> str:
    params = {"assetSelection": [{"path": [name]} for name in assets], "partitionNames": partitions}
    result = graphql(port, BACKFILL, {"params": params})["data"]["launchPartitionBackfill"]
    if result["__typename"] != "LaunchBackfillSuccess":
        raise RuntimeError(f"launching a backfill of {assets} {partitions}: {result}")
    return result["backfillId"]


def wait_for_backfill(instance: dg.DagsterInstance, backfill_id: str, timeout_s: float = 900) -> dict:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        backfill = instance.get_backfill(backfill_id)
        if backfill.status in BULK_ACTION_TERMINAL_STATUSES:
            records = instance.get_run_records(dg.RunsFilter(tags={"dagster/backfill": backfill_id}))
            if all(record.dagster_run.is_finished for record in records):
                ended = max((record.end_time or 0.0 for record in records), default=time.time())
                assets = sorted({key.to_user_string() for record in records
                                 for key in record.dagster_run.asset_selection or ()})
                return {"status": backfill.status.value, "runs": len(records), "assets": assets,
                        "launch_to_end_s": round(ended - backfill.backfill_timestamp, 1)}
        time.sleep(1)
    raise TimeoutError(f"backfill {backfill_id} did not finish in {timeout_s} s")


def wait_for_run(instance: dg.DagsterInstance, run_id: str, timeout_s: float = 600) -> dict:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        record = instance.get_run_record_by_id(run_id)
        if record is not None and record.dagster_run.is_finished:
            run = record.dagster_run
            return {"status": run.status.value,
                    "launch_to_end_s": round(record.end_time - record.create_timestamp.timestamp(), 1),
                    **phases(instance, record)}
        time.sleep(0.5)
    raise TimeoutError(f"run {run_id} did not finish in {timeout_s} s")


def phases(instance: dg.DagsterInstance, record: dg.RunRecord) -> dict:
    """Where a run's time went: launch to the run process starting, its steps (first step
    start to last step end), the engine's own `duration_s` of each materialization and
    its profile (the driver's seconds and Spark jobs by phase, from its `profile` table)."""
    created = record.create_timestamp.timestamp()
    steps = [entry.timestamp for entry in instance.all_logs(
        record.dagster_run.run_id, of_type={dg.DagsterEventType.STEP_START, dg.DagsterEventType.STEP_SUCCESS})]
    engine, profiles = {}, {}
    for entry in instance.all_logs(record.dagster_run.run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION):
        materialization = entry.asset_materialization
        if "duration_s" in materialization.metadata:
            engine[materialization.asset_key.to_user_string()] = materialization.metadata["duration_s"].value
        if "profile" in materialization.metadata:
            profiles[materialization.asset_key.to_user_string()] = profile_table(
                materialization.metadata["profile"].value)
    return {"launch_to_start_s": round((record.start_time or created) - created, 1),
            "steps_s": round(max(steps) - min(steps), 1) if steps else None,
            "engine_s": engine, "engine_profile": profiles, "timeline": timeline(instance, record)}


def timeline(instance: dg.DagsterInstance, record: dg.RunRecord) -> list[list]:
    """Every entry of the run's event log: seconds since the launch, and its event type
    (or the start of a log message): where the time outside the engine goes."""
    created = record.create_timestamp.timestamp()
    return [[round(entry.timestamp - created, 2),
             entry.dagster_event.event_type_value if entry.dagster_event else entry.user_message[:80]]
            for entry in instance.all_logs(record.dagster_run.run_id)]


def profile_table(markdown: str) -> dict[str, dict[str, float | None]]:
    """A run's `profile` metadata table (`RunProfile.markdown`) as phase -> the driver's
    seconds, the Spark jobs and their seconds (None: not counted, over Spark Connect)."""
    rows = [[cell.strip() for cell in line.strip("|").split("|")]
            for line in markdown.splitlines() if line.startswith("| ") and not line.startswith("| phase ")]

    def number(cell: str) -> float | None:
        return None if cell == "not counted" else float(cell)

    return {phase.strip("*"): {"driver_s": float(driver), "spark_jobs": number(jobs), "jobs_s": number(jobs_s)}
            for phase, driver, jobs, jobs_s in rows}


def instance_yaml(home: Path) -> None:
    """The repository's dagster.yaml with its storage under `home`."""
    text = (ROOT / "dagster.yaml").read_text().replace(".dagster_home", str(home / ".dagster_home"))
    (home / "dagster.yaml").write_text(text)


def screenshot(port: int, page: str, target: Path, height: int = 1000) -> None:
    """The UI page `page` as a headless Chromium renders it, once its scripts have run."""
    # No background networking: on a machine without internet access Chromium's own
    # connections are refused many at a time, which slows every page down.
    with tempfile.TemporaryDirectory(prefix="chromium-") as profile:
        subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                        "--disable-quic", "--no-first-run", "--disable-background-networking",
                        "--disable-component-update", "--disable-sync", f"--user-data-dir={profile}",
                        f"--window-size=1600,{height}", "--virtual-time-budget=30000", f"--screenshot={target}",
                        f"http://127.0.0.1:{port}/{page}"], check=True, capture_output=True, timeout=180)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--spark", choices=("connect", "local"), default="connect")
    parser.add_argument("--port", type=int, default=3333)
    parser.add_argument("--screenshots", type=Path, help="save the README's screenshots into this folder")
    args = parser.parse_args()
    if args.screenshots and shutil.which("chromium") is None:
        parser.error("--screenshots needs chromium on PATH (apt-get install chromium)")

    def shoot(name: str, page: str, height: int = 1000) -> None:
        if args.screenshots:
            screenshot(args.port, page, args.screenshots.resolve() / f"{name}.png", height)

    workdir = Path(tempfile.mkdtemp(prefix="offset-assets-runs-"))
    home = workdir / "dagster_home"
    home.mkdir()
    instance_yaml(home)
    env = {**os.environ, "OFFSET_ASSETS_HOME": str(workdir / "state"), "DAGSTER_HOME": str(home),
           "DEV_SPARK": args.spark, "DEV_PORT": str(args.port), "PYTHONPATH": str(ROOT)}
    for name in ("OFFSET_ASSETS_SPARK_REMOTE", "OFFSET_ASSETS_SPARK_MASTER", "OFFSET_ASSETS_DB_URL",
                 "OFFSET_ASSETS_WAREHOUSE"):
        env.pop(name, None)
    python = sys.executable
    subprocess.run([python, "-m", "assets_defs.demo"], cwd=ROOT, env=env, check=True,
                   stdout=subprocess.DEVNULL)
    dev = subprocess.Popen([python, "-m", "assets_defs.dev"], cwd=ROOT, env=env,
                           stdout=(workdir / "dev.log").open("w"), stderr=subprocess.STDOUT)
    figures: dict[str, object] = {"spark": args.spark}
    try:
        wait_for_webserver(args.port)
        os.environ["DAGSTER_HOME"] = str(home)
        with dg.DagsterInstance.get() as instance:
            figures["nothing_to_do"] = wait_for_run(instance, launch(args.port, "enriched_posts_job"))
            subprocess.run([python, "-m", "assets_defs.demo", "traffic"], cwd=ROOT, env=env, check=True,
                           stdout=subprocess.DEVNULL)
            today = datetime.now(UTC).strftime("%Y-%m-%d")
            figures["ingest_today"] = wait_for_run(
                instance, launch(args.port, "post_updates_ingestion", {"dagster/partition": today}))
            shoot("post_updates_partitions", "assets/post_updates?view=partitions")
            figures["small_change"] = wait_for_run(instance, launch(args.port, "enriched_posts_job"))
            shoot("enriched_posts", "assets/enriched_posts", height=2200)
            shoot("enriched_posts_events", "assets/enriched_posts?view=events")
            shoot("lineage", "assets/enriched_posts?view=lineage")
            shoot("posts_partitions", "assets/posts?view=partitions")
            days = [(datetime.now(UTC) - timedelta(days=back)).strftime("%Y-%m-%d") for back in (2, 1, 0)]
            backfill_id = launch_backfill(args.port, ["post_updates", "enriched_posts", "user_post_stats"], days)
            figures["backfill_3_partitions"] = wait_for_backfill(instance, backfill_id)
            shoot("backfill_runs", f"runs/b/{backfill_id}?tab=runs")
            shoot("reprocess_run", "assets/enriched_posts?view=events", height=1800)
    finally:
        dev.send_signal(2)
        try:
            dev.wait(timeout=60)
        except subprocess.TimeoutExpired:
            dev.kill()
    print(json.dumps(figures))
    shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
