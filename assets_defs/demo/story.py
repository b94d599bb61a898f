"""The demo story, step by step: reset, seed, materialize, traffic, materialize again.

Every materialization is a real Dagster run of one of the project's jobs (executed in
process against the instance under DAGSTER_HOME), so `make dev` shows the runs under
their jobs, with their metadata and the check results, afterwards. The demo refuses to
run while `make dev` is up on the same instance (it would delete files the UI holds).
Ranges are found the way the deployment finds them: the `posts` id ranges by
evaluating `posts_ranges_sensor`, the daily windows by the planner.

The source clock is the only thing the demo fakes. Daily windows are ingested once
closed, so the seed is stamped at noon of the first window (two days ago) and the
traffic at noon of the second (yesterday): both windows have closed when the demo runs.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import dagster as dg
import sqlalchemy as sa

from assets_defs import source_system
from assets_defs.assets.ingestion import ENV_INGEST_START, UPDATE_WINDOW, Ingestion, build_ingestion, ingest_start
from assets_defs.assets.transformations import TRANSFORMATIONS
from assets_defs.definitions import build_definitions
from assets_defs.jobs import transformations as transformations_job
from assets_defs.resources import ENV_DEPLOYMENT
from offset_assets.config import ENV_DB_URL, ENV_WAREHOUSE, default_db_url, default_warehouse, state_dir
from offset_assets.control_plane import database
from offset_assets.control_plane.job_log import JobLog
from offset_assets.dagster_adapter import (
    evaluate_ingestion_sensor,
    evaluate_offset_sensor,
    ingestion_job,
    resolve_incremental,
)
from offset_assets.errors import OffsetAssetsError
from offset_assets.ranges.ingestion import IngestionJob, plan_ranges
from offset_assets.ranges.planners import parse_time

# Variables that point the project away from its embedded state: the demo resets that
# state, so it refuses to run when any of them is set.
NON_EMBEDDED = (ENV_DB_URL, ENV_WAREHOUSE, source_system.ENV_SOURCE_URL, ENV_INGEST_START, ENV_DEPLOYMENT)
QUIET_RUN_CONFIG = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}
DEMO_TAG = "offset_assets/demo"
# A daemon beats every few seconds; one silent this long has stopped.
DAEMON_ALIVE_S = 60.0


class DemoError(OffsetAssetsError):
    """The demo cannot run here (its message says why and what to do)."""


@dataclass(frozen=True)
class DemoSizes:
    users: int = 40
    posts: int = 2000
    inserts: int = 20
    updates: int = 15
    deletes: int = 5
    renames: int = 1
    seed: int = 7
    traffic_seed: int = 11

    @property
    def changes(self) -> int:
        return self.inserts + self.updates + self.deletes + self.renames


@dataclass(frozen=True)
class DemoClock:
    """Source timestamps: the seed in the first daily window, the traffic in the second."""

    start: datetime  # first window start (naive UTC)

    @property
    def seed_at(self) -> float:
        return _epoch(self.start + UPDATE_WINDOW / 2)

    @property
    def traffic_at(self) -> float:
        return _epoch(self.start + UPDATE_WINDOW * 1.5)

    @property
    def first_cutoff(self) -> datetime:
        return self.start + UPDATE_WINDOW

    @property
    def second_cutoff(self) -> datetime:
        return self.start + 2 * UPDATE_WINDOW


@dataclass(frozen=True)
class IngestedRange:
    asset: str
    partition_key: str
    metadata: dict[str, Any]


@dataclass
class MaterializationPass:
    """One pass: the ranges ingested, then the transformations and their checks."""

    ingested: list[IngestedRange] = field(default_factory=list)
    sensor_requests: dict[str, str] = field(default_factory=dict)
    transformations: dict[str, dict[str, Any]] = field(default_factory=dict)
    checks: list[tuple[str, str, bool, str]] = field(default_factory=list)
    run_ids: list[str] = field(default_factory=list)

    def processed(self, asset: str) -> int:
        return self.transformations[asset]["processed_keys"]


@dataclass(frozen=True)
class Expected:
    """What the second run must process, computed from the source database alone."""

    changed_posts: frozenset[int]
    renamed_users_posts: frozenset[int]
    stats_users: frozenset[int]

    @property
    def enriched_keys(self) -> int:
        return len(self.changed_posts | self.renamed_users_posts)

    @property
    def reverse_join_only(self) -> int:
        return len(self.renamed_users_posts - self.changed_posts)


@dataclass
class DemoStory:
    sizes: DemoSizes
    clock: DemoClock
    removed: list[Path]
    live_posts: int = 0
    authors: int = 0
    first: MaterializationPass = field(default_factory=MaterializationPass)
    traffic: source_system.Traffic | None = None
    renamed: dict[int, tuple[str, str]] = field(default_factory=dict)
    expected: Expected | None = None
    second: MaterializationPass = field(default_factory=MaterializationPass)
    offsets_before: list[dict[str, Any]] = field(default_factory=list)
    offsets_after: list[dict[str, Any]] = field(default_factory=list)
    history: list[tuple[int, float, str | None]] = field(default_factory=list)
    history_post: int | None = None
    deleted_post: int | None = None
    deleted_presence: list[tuple[int, bool]] = field(default_factory=list)
    seconds: float = 0.0


# -- state ---------------------------------------------------------------------------


def check_embedded(environ: dict[str, str]) -> None:
    pointed = [name for name in NON_EMBEDDED if environ.get(name)]
    if pointed:
        raise DemoError(
            f"the demo resets its embedded state and runs on the defaults; unset {', '.join(pointed)} "
            "(or run it elsewhere)"
        )


def check_no_dagster_dev(instance: dg.DagsterInstance, now: float | None = None) -> None:
    """Refuse while `make dev` runs on this instance: its code server keeps the state's
    SQLite files open, so deleting them under it would leave the UI on deleted files.

    `dagster dev` is recognised by its daemon's heartbeats in the instance."""
    now = time.time() if now is None else now
    recent = [heartbeat.daemon_type for heartbeat in instance.get_daemon_heartbeats().values()
              if now - heartbeat.timestamp < DAEMON_ALIVE_S]
    if recent:
        raise DemoError(
            f"`make dev` (dagster dev) is running on the Dagster instance {instance.root_directory} "
            f"(daemon heartbeats {int(DAEMON_ALIVE_S)} s old at most) and holds the demo state open: "
            "stop it (Ctrl-C), run `make demo`, then `make dev` again. To add changes while it runs, "
            "use `python -m assets_defs.demo traffic` instead."
        )


def reset_demo_state(instance: dg.DagsterInstance, ingestion: Ingestion) -> list[Path]:
    """Delete the control plane, source database and warehouse under the state folder,
    and the demo's dynamic partitions in the Dagster instance (its run history stays)."""
    home = state_dir()
    database.forget(default_db_url())
    removed = []
    for path in sorted(home.glob("control_plane.db*")) + sorted(home.glob("source.db*")) + [
        Path(default_warehouse())
    ]:
        if path.is_dir():
            _remove_tree(path)
            removed.append(path)
        elif path.exists():
            path.unlink()
            removed.append(path)
    partitions = ingestion.posts.partitions_def
    for key in instance.get_dynamic_partitions(partitions.name):
        instance.delete_dynamic_partition(partitions.name, key)
    return removed


def _remove_tree(path: Path) -> None:
    for child in sorted(path.rglob("*"), key=lambda p: len(p.parts), reverse=True):
        child.rmdir() if child.is_dir() else child.unlink()
    path.rmdir()


# -- materializing -------------------------------------------------------------------


def _execute(defs: dg.Definitions, instance: dg.DagsterInstance, job_name: str,
             partition_key: str | None = None, tag: str = "demo") -> dg.ExecuteInProcessResult:
    """Run one of the project's own jobs, so the UI shows each demo run under its job."""
    return defs.resolve_job_def(job_name).execute_in_process(
        instance=instance, partition_key=partition_key, run_config=QUIET_RUN_CONFIG,
        tags={DEMO_TAG: tag},
    )


def _metadata(result: dg.ExecuteInProcessResult, asset: str) -> dict[str, Any]:
    """What the run reported for `asset`: its materialization, or its observation when the
    run changed no output row (nothing to do, or every processed key left its row as it was)."""
    [event] = result.asset_materializations_for_node(asset) or result.asset_observations_for_node(asset)
    return {name: value.value for name, value in event.metadata.items()}


def _window_keys(job: IngestionJob, ingestion: Ingestion, plane: database.ControlPlane,
                 until: datetime) -> list[str]:
    partitions = ingestion.asset_of(job).partitions_def
    return [parse_time(r.start).strftime(partitions.fmt)
            for r in plan_ranges(job, JobLog(plane), now=until.replace(tzinfo=UTC))]


def ingest_due_ranges(defs: dg.Definitions, ingestion: Ingestion, instance: dg.DagsterInstance,
                      until: datetime, step: MaterializationPass, tag: str) -> None:
    """Run every range due at `until`: the id ranges the sensor requests, then the windows."""
    plane = defs.resources["offset_store"].control_plane()
    posts = ingestion.posts
    while True:
        tick = evaluate_ingestion_sensor(ingestion.posts_job, posts.partitions_def, plane, instance)
        if isinstance(tick, dg.SkipReason) or not tick.run_requests:
            break
        for request in tick.dynamic_partitions_requests:
            instance.add_dynamic_partitions(request.partitions_def_name, list(request.partition_keys))
        key = tick.run_requests[0].partition_key
        result = _execute(defs, instance, ingestion_job(posts).name, key, tag)
        step.ingested.append(IngestedRange("posts", key, _metadata(result, "posts")))
        step.run_ids.append(result.run_id)
    for job in (ingestion.post_updates_job, ingestion.profiles_job):
        for key in _window_keys(job, ingestion, plane, until):
            result = _execute(defs, instance, ingestion_job(ingestion.asset_of(job)).name, key, tag)
            step.ingested.append(IngestedRange(job.name, key, _metadata(result, job.name)))
            step.run_ids.append(result.run_id)


def offset_sensor_requests(defs: dg.Definitions) -> dict[str, str]:
    """What the new-data sensors would do now: per transformation, a run request or why not."""
    plane = defs.resources["offset_store"].control_plane()
    requests = {}
    for assets_def in TRANSFORMATIONS:
        asset = resolve_incremental(assets_def)
        tick = evaluate_offset_sensor(plane, asset, cursor=None)
        requests[asset.transformation_id] = (
            "nothing beyond its offsets yet" if isinstance(tick, dg.SkipReason)
            else f"run requested (new commits in {', '.join(sorted(json.loads(tick.cursor)))})"
        )
    return requests


def materialize_transformations(defs: dg.Definitions, instance: dg.DagsterInstance,
                                step: MaterializationPass, tag: str) -> None:
    result = _execute(defs, instance, transformations_job.name, tag=tag)
    step.run_ids.append(result.run_id)
    # An output that committed no version (a multi-asset's unchanged output) is not here.
    for event in result.get_asset_materialization_events():
        materialization = event.step_materialization_data.materialization
        step.transformations[materialization.asset_key.to_user_string()] = {
            name: value.value for name, value in materialization.metadata.items()}
    for evaluation in result.get_asset_check_evaluations():
        step.checks.append((evaluation.asset_key.to_user_string(), evaluation.check_name,
                            evaluation.passed, evaluation.severity.value))


# -- the source ----------------------------------------------------------------------


def _source_live_posts(engine: sa.Engine) -> list[tuple[int, int]]:
    posts = source_system.posts
    with engine.connect() as conn:
        return [(row.id, row.user_id) for row in conn.execute(
            sa.select(posts.c.id, posts.c.user_id).where(posts.c.is_deleted == 0))]


def _profile_names(engine: sa.Engine) -> dict[int, str]:
    profiles = source_system.profiles
    with engine.connect() as conn:
        return {row.id: row.name for row in conn.execute(sa.select(profiles.c.id, profiles.c.name))}


def expected_second_run(engine: sa.Engine, traffic: source_system.Traffic) -> Expected:
    """The keys the second run must process, from the source and the traffic alone."""
    changed = traffic.changed_posts
    posts = source_system.posts
    with engine.connect() as conn:
        users_of_changed = {row.user_id for row in conn.execute(
            sa.select(posts.c.user_id).where(posts.c.id.in_(sorted(changed))))}
    renamed = set(traffic.renamed_profiles)
    renamed_posts = {pid for pid, uid in _source_live_posts(engine) if uid in renamed}
    renamed_authors = {uid for _, uid in _source_live_posts(engine) if uid in renamed}
    return Expected(frozenset(changed), frozenset(renamed_posts),
                    frozenset(users_of_changed | renamed_authors))


# -- the history of one post ---------------------------------------------------------


def post_history(defs: dg.Definitions, post_id: int) -> list[tuple[int, float, str | None]]:
    """(delta, commit_ts, text as of that delta or None when absent) for every delta of posts."""
    table = defs.resources["incremental_engine"].table(dg.AssetKey("posts"))
    rows = []
    for delta in table.catalog.committed(table.name):
        found = table.read_actual(as_of_delta=delta.delta_num, where_in={"post_id": [post_id]}).collect()
        rows.append((delta.delta_num, delta.commit_ts, found[0]["text"] if found else None))
    return rows


# -- the whole story -----------------------------------------------------------------


def run_story(sizes: DemoSizes, instance: dg.DagsterInstance, progress: Any = print) -> DemoStory:
    """Reset, seed, materialize, traffic, materialize; returns every number the report shows."""
    check_embedded(dict(os.environ))
    check_no_dagster_dev(instance)
    started = time.monotonic()
    ingestion = build_ingestion(source_system.source_url(), ingest_start())
    defs = build_definitions(ingestion)
    clock = DemoClock(ingest_start())
    story = DemoStory(sizes, clock, reset_demo_state(instance, ingestion))
    progress(f"reset: removed {len(story.removed)} state path(s) under {state_dir()}")

    engine = source_system.source_engine()
    source_system.seed_source(engine, sizes.users, sizes.posts, seed=sizes.seed, now=clock.seed_at)
    live = _source_live_posts(engine)
    story.live_posts, story.authors = len(live), len({uid for _, uid in live})
    progress(f"seeded the source: {sizes.users} profiles, {sizes.posts} posts")

    progress("first materialization: ingestion ...")
    ingest_due_ranges(defs, ingestion, instance, clock.first_cutoff, story.first, "first")
    progress("first materialization: transformations ...")
    materialize_transformations(defs, instance, story.first, "first")

    old_names = _profile_names(engine)
    story.traffic = source_system.generate_traffic(
        engine, sizes.inserts, sizes.updates, sizes.deletes, sizes.renames,
        seed=sizes.traffic_seed, now=clock.traffic_at)
    new_names = _profile_names(engine)
    story.renamed = {uid: (old_names[uid], new_names[uid]) for uid in story.traffic.renamed_profiles}
    story.expected = expected_second_run(engine, story.traffic)
    progress(f"traffic: {story.traffic.describe()}")

    progress("second materialization: ingestion ...")
    ingest_due_ranges(defs, ingestion, instance, clock.second_cutoff, story.second, "second")
    story.second.sensor_requests = offset_sensor_requests(defs)
    story.offsets_before = defs.resources["offset_store"].get_statistics()
    progress("second materialization: transformations ...")
    materialize_transformations(defs, instance, story.second, "second")
    story.offsets_after = defs.resources["offset_store"].get_statistics()

    if story.traffic.updated_posts:
        story.history_post = story.traffic.updated_posts[0]
        story.history = post_history(defs, story.history_post)
    if story.traffic.deleted_posts:
        story.deleted_post = story.traffic.deleted_posts[0]
        story.deleted_presence = [(d, text is not None)
                                  for d, _, text in post_history(defs, story.deleted_post)]
    story.seconds = time.monotonic() - started
    return story


def _epoch(moment: datetime) -> float:
    return moment.replace(tzinfo=UTC).timestamp()
