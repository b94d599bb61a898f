"""The reference project (`assets_defs`) end to end on whatever the environment names:
control plane, warehouse, source database and Spark (`OFFSET_ASSETS_*`).

Seed the source, ingest every due range through Dagster (in this process), run the
project's `transformations` job, a round of traffic, ingest and transform again; return
what each run processed and the final outputs row for row. The second transformations
run uses the executor and resources of the project's Definitions for the environment:
with a cluster master the multiprocess executor, each step a process with its own
driver; in-process with a local master or a Spark Connect endpoint.

Both transformations runs select the chain whose outputs are compared, `enriched_posts`
then `user_post_stats` (its reference input, its reverse join, a transform key that is
not the posts' key), with their checks. `moderated_posts` is left out: on the cluster
its step would start a third driver and executor whose result nothing compares (its
multi-asset outputs have tests of their own, `tests/test_dagster_multi_assets.py`).

Usage (the cluster test runs it as a driver process of its own):
    python -m tests.reference_story            prints the results as JSON
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import dagster as dg

from assets_defs import source_system
from assets_defs.assets.ingestion import build_ingestion, ingest_start
from assets_defs.definitions import build_definitions
from assets_defs.demo.story import (
    NON_EMBEDDED,
    QUIET_RUN_CONFIG,
    DemoClock,
    DemoSizes,
    MaterializationPass,
    ingest_due_ranges,
)
from bench.posts_world import rows_of
from offset_assets.config import ENV_DB_URL, ENV_SPARK_MASTER, ENV_SPARK_REMOTE, ENV_WAREHOUSE
from offset_assets.control_plane import database
from offset_assets.dagster_adapter import ENGINE_RESOURCE_KEY

if TYPE_CHECKING:
    import pytest

SIZES = DemoSizes(users=6, posts=30, inserts=3, updates=2, deletes=1, renames=1)
TRANSFORMED = ("enriched_posts", "user_post_stats")


INGEST_START = "2024-01-01"


def reference_environment(workdir: Path, db_url: str) -> dict[str, str]:
    """Every location of the reference project under `workdir`, control plane at `db_url`."""
    (workdir / "warehouse").mkdir(parents=True)
    (workdir / "dagster_home").mkdir()
    (workdir / "dagster_home" / "dagster.yaml").write_text("")  # default storage, in that folder
    return {
        ENV_DB_URL: db_url,
        ENV_WAREHOUSE: str(workdir / "warehouse"),
        "OFFSET_ASSETS_SOURCE_URL": f"sqlite:///{workdir / 'source.db'}",
        "OFFSET_ASSETS_INGEST_START": INGEST_START,
        "DAGSTER_HOME": str(workdir / "dagster_home"),
    }


def run_reference_locally(workdir: Path, env: pytest.MonkeyPatch) -> dict[str, Any]:
    """The story in this process, on its Spark session, with a SQLite control plane under
    `workdir`: what a run of it on a cluster or over Spark Connect must equal."""
    for name in (*NON_EMBEDDED, ENV_SPARK_MASTER, ENV_SPARK_REMOTE):
        env.delenv(name, raising=False)
    local_env = reference_environment(workdir, f"sqlite:///{workdir / 'local.db'}")
    for name, value in local_env.items():
        env.setenv(name, value)
    with dg.instance_for_test() as instance:
        result = run_reference(instance)
    database.forget(local_env[ENV_DB_URL])
    return result


def transformations_job() -> dg.JobDefinition:
    """The project's `transformations` job, rebuilt from the environment: the target
    that the multiprocess executor's step processes reconstruct."""
    return build_definitions().resolve_job_def("transformations")


def materialize_transformations(instance: dg.DagsterInstance, in_process: bool = False) -> dict[str, int]:
    """One run of the `transformations` job's compared chain (`TRANSFORMED`, with their
    checks): in this process, or with the executor of the project's Definitions (step
    processes that reconstruct the job)."""
    selection = [dg.AssetKey(name) for name in TRANSFORMED]
    if in_process:
        result = transformations_job().execute_in_process(instance=instance, run_config=QUIET_RUN_CONFIG,
                                                          asset_selection=selection)
    else:
        result = dg.execute_job(dg.reconstructable(transformations_job), instance=instance,
                                run_config=QUIET_RUN_CONFIG, asset_selection=selection)
    if not result.success:
        failures = [str(event.event_specific_data.error) for event in result.all_events
                    if event.is_step_failure]
        raise RuntimeError(f"transformations run {result.run_id} failed: {failures}")
    processed = {}
    for name in TRANSFORMED:
        event = instance.get_latest_materialization_event(dg.AssetKey(name))
        processed[name] = event.asset_materialization.metadata["processed_keys"].value
    return processed


def run_reference(instance: dg.DagsterInstance) -> dict[str, Any]:
    started = time.monotonic()
    ingestion = build_ingestion(source_system.source_url(), ingest_start())
    # The story's own reads and in-process ingestion runs take the resources that read
    # the same environment variables directly (production ones hold unresolved EnvVars
    # until a run initialises them); the transformations job is the project's own.
    defs = build_definitions(ingestion, deployment="local")
    executor = transformations_job().executor_def.name
    clock = DemoClock(ingest_start())
    source = source_system.source_engine()
    source_system.seed_source(source, SIZES.users, SIZES.posts, seed=SIZES.seed, now=clock.seed_at)

    first = MaterializationPass()
    ingest_due_ranges(defs, ingestion, instance, clock.first_cutoff, first, "first")
    # The first pass in this process, the second with the project's executor: each
    # multiprocess step starts a driver and an executor JVM, and one run shows it works.
    first_processed = materialize_transformations(instance, in_process=True)
    source_system.generate_traffic(source, SIZES.inserts, SIZES.updates, SIZES.deletes, SIZES.renames,
                                   seed=SIZES.traffic_seed, now=clock.traffic_at)
    second = MaterializationPass()
    ingest_due_ranges(defs, ingestion, instance, clock.second_cutoff, second, "second")
    second_processed = materialize_transformations(instance)

    engine = defs.resources[ENGINE_RESOURCE_KEY]
    outputs = {name: sorted([list(row) for row in rows_of(engine.table(dg.AssetKey(name)).read_actual())],
                            key=repr) for name in TRANSFORMED}
    return {
        "executor": executor,
        "ingested": [len(first.ingested), len(second.ingested)],
        "processed": {"first": first_processed, "second": second_processed},
        "outputs": outputs,
        "seconds": round(time.monotonic() - started, 1),
    }


if __name__ == "__main__":
    with dg.DagsterInstance.get() as dagster_instance:
        print(json.dumps(run_reference(dagster_instance)))
