"""Offset checks, the offset sensor, automation, schedules and backfill tags: control plane only.

No Spark here: input deltas are committed straight into the delta catalog (as an
ingestion would), offsets are set through the `OffsetStore`, and their age is set in
`transform_input_offset.updated_at` with SQL. Dagster runs that must be under way are
created in a test instance and moved through their states with run events.
"""

import json
import time
import uuid
from types import SimpleNamespace

import dagster as dg
import pytest
import sqlalchemy as sa
from dagster._core.events import DagsterEvent, DagsterEventType

from bench.posts_world import ENRICHED, POSTS, PROFILES, enrich
from offset_assets.control_plane import connect
from offset_assets.control_plane.delta_catalog import DeltaCatalog
from offset_assets.control_plane.schema import transform_input_offset
from offset_assets.dagster_adapter import (
    OffsetStore,
    build_incremental_schedule,
    build_offset_checks,
    build_offset_checks_schedule,
    build_offset_sensor,
    incremental_asset,
    is_reset_run,
    on_input_commits,
)
from offset_assets.dagster_adapter.asset_spec import resolve_incremental
from offset_assets.dagster_adapter.incremental import sensors
from offset_assets.dagster_adapter.incremental.checks import (
    DEFAULT_ERROR_AFTER_S,
    DEFAULT_WARN_AFTER_S,
    backlog_result,
    offset_age_result,
)
from tests.dagster_resources import engine_resources

TID = "enriched_posts"


@pytest.fixture
def store(sqlite_url):
    return OffsetStore(db_url=sqlite_url)


@pytest.fixture
def catalog(sqlite_url):
    catalog = DeltaCatalog(connect(sqlite_url))
    catalog.register_table("posts", ["post_id"], POSTS.json())
    catalog.register_table("profiles", ["id"], PROFILES.json())
    return catalog


@pytest.fixture
def enriched():
    return incremental_asset(
        name=TID, transform_keys=["post_id"], primary_key=["post_id"], schema=ENRICHED,
        join_keys={"profiles": {"user_id": "id"}},
    )(enrich)


@pytest.fixture
def instance():
    with dg.instance_for_test() as instance:
        yield instance


def commit(catalog: DeltaCatalog, table: str, upserted: int = 1, deleted: int = 0,
           run_id: str | None = None) -> float:
    """Commit one delta of `table` holding that many versions (written by `run_id`);
    returns its commit_ts."""
    hot = catalog.open_hot(table, "ingestion", run_id, f"/warehouse/{table}/{uuid.uuid4().hex}")
    return catalog.commit([(table, hot.delta_num, upserted, deleted)])


def age_offset(store: OffsetStore, table: str, seconds: float) -> None:
    with store.control_plane().begin() as conn:
        conn.execute(
            sa.update(transform_input_offset)
            .where(transform_input_offset.c.transformation_id == TID,
                   transform_input_offset.c.input_table_name == table)
            .values(updated_at=time.time() - seconds)
        )


def run_checks(enriched, store, **thresholds) -> dict[str, dg.AssetCheckEvaluation]:
    """Evaluate the offset checks alone, through the job of their schedule."""
    checks = build_offset_checks(enriched, **thresholds)
    defs = dg.Definitions(
        assets=[enriched],
        asset_checks=checks,
        schedules=[build_offset_checks_schedule(checks, "*/15 * * * *")],
        resources=engine_resources(store),
    )
    result = defs.resolve_job_def("offset_checks_job").execute_in_process()
    assert result.get_asset_materialization_events() == []  # checks only, nothing materialized
    return {e.check_name: e for e in result.get_asset_check_evaluations()}


@pytest.mark.parametrize(
    ("posts_age_s", "passed", "severity"),
    [
        (10, True, None),
        (3700, False, dg.AssetCheckSeverity.WARN),
        (90000, False, dg.AssetCheckSeverity.ERROR),
    ],
)
def test_offset_age_check_passes_under_an_hour_warns_after_and_errors_after_a_day(
        enriched, store, catalog, posts_age_s, passed, severity):
    ts = {name: commit(catalog, name) for name in ("posts", "profiles")}
    store.update_offsets_bulk({(TID, name): value for name, value in ts.items()})
    age_offset(store, "profiles", 5)
    age_offset(store, "posts", posts_age_s)

    age = run_checks(enriched, store)["offset_age"]
    assert age.passed is passed
    assert (None if passed else age.severity) == severity
    # the age is measured when the check runs: allow for a slow machine
    assert age.metadata["offset_age_s.posts"].value == pytest.approx(posts_age_s, abs=60)
    assert age.metadata["offset_age_s.profiles"].value == pytest.approx(5, abs=60)


@pytest.mark.parametrize(
    ("age_s", "severity"),
    [(3599.9, None), (3600, dg.AssetCheckSeverity.WARN), (86399.9, dg.AssetCheckSeverity.WARN),
     (86400, dg.AssetCheckSeverity.ERROR)],
)
def test_offset_age_boundaries_are_inclusive(enriched, store, catalog, age_s, severity):
    store.update_offsets_bulk({(TID, "posts"): commit(catalog, "posts")})
    [row] = store.get_statistics(transformation_id=TID)
    result = offset_age_result(store.control_plane(), resolve_incremental(enriched),
                               DEFAULT_WARN_AFTER_S, DEFAULT_ERROR_AFTER_S,
                               now=row["updated_at"] + age_s)
    assert (None if result.passed else result.severity) == severity


def test_offset_age_thresholds_are_configurable(enriched, store, catalog):
    store.update_offsets_bulk({(TID, "posts"): commit(catalog, "posts")})
    age_offset(store, "posts", 120)
    age = run_checks(enriched, store, warn_after_s=60, error_after_s=100)["offset_age"]
    assert not age.passed and age.severity == dg.AssetCheckSeverity.ERROR


def test_an_old_offset_of_a_quiet_input_is_reported_as_quiet_not_as_a_lagging_transformation(
        enriched, store, catalog):
    store.update_offsets_bulk({(TID, "posts"): commit(catalog, "posts")})
    [row] = store.get_statistics(transformation_id=TID)
    asset = resolve_incremental(enriched)

    quiet = offset_age_result(store.control_plane(), asset, DEFAULT_WARN_AFTER_S, DEFAULT_ERROR_AFTER_S,
                              now=row["updated_at"] + 90000)
    assert (quiet.passed, quiet.severity) == (False, dg.AssetCheckSeverity.ERROR)
    assert quiet.description == ("posts: offset 90000 s old (error from 86400 s), a quiet input: nothing "
                                 "committed beyond the offset, the transformation is not lagging")
    assert quiet.metadata["quiet_input.posts"].value is True

    commit(catalog, "posts")  # work now waits beyond the offset
    lagging = offset_age_result(store.control_plane(), asset, DEFAULT_WARN_AFTER_S, DEFAULT_ERROR_AFTER_S,
                                now=row["updated_at"] + 90000)
    assert (lagging.passed, lagging.severity) == (False, dg.AssetCheckSeverity.ERROR)
    assert lagging.description == ("posts: offset 90000 s old (error from 86400 s), committed data waits "
                                   "beyond the offset: the transformation is lagging")
    assert lagging.metadata["quiet_input.posts"].value is False


def test_the_offset_age_check_description_explains_quiet_inputs(enriched):
    [spec] = [spec for check in build_offset_checks(enriched) for spec in check.check_specs
              if spec.name == "offset_age"]
    assert "such a quiet input (nothing committed beyond the offset, no backlog) is named in the result " \
           "as quiet, not lagging" in spec.description


def test_input_without_offset_passes_while_empty_and_warns_once_it_has_data(
        enriched, store, catalog):
    assert run_checks(enriched, store)["offset_age"].passed
    commit(catalog, "posts")
    age = run_checks(enriched, store)["offset_age"]
    assert not age.passed and age.severity == dg.AssetCheckSeverity.WARN
    assert "posts: has committed data but no offset yet" in age.description


def test_backlog_check_counts_committed_versions_beyond_the_offset(enriched, store, catalog):
    offset = commit(catalog, "posts", upserted=3)
    commit(catalog, "profiles", upserted=2)
    store.update_offsets_bulk({(TID, "posts"): offset, (TID, "profiles"): commit(catalog, "profiles")})
    assert run_checks(enriched, store)["offset_backlog"].passed  # the boundary delta is done

    commit(catalog, "posts", upserted=4, deleted=1)
    commit(catalog, "posts", upserted=0)  # a write that changed nothing is no backlog
    backlog = run_checks(enriched, store)["offset_backlog"]
    assert not backlog.passed and backlog.severity == dg.AssetCheckSeverity.WARN
    assert backlog.metadata["backlog_versions.posts"].value == 5
    assert backlog.metadata["backlog_deltas.posts"].value == 1
    assert backlog.metadata["backlog_versions.profiles"].value == 0

    tolerant = run_checks(enriched, store, max_backlog_versions=5)["offset_backlog"]
    assert tolerant.passed
    strict = run_checks(enriched, store, error_backlog_versions=4)["offset_backlog"]
    assert strict.severity == dg.AssetCheckSeverity.ERROR


def test_a_backlog_that_waited_too_long_is_an_error(enriched, store, catalog):
    """A backlog nothing picks up turns the asset red: ERROR once its oldest commit is
    `error_backlog_age_s` old, whatever the number of versions."""
    store.update_offsets_bulk({(TID, "posts"): commit(catalog, "posts")})
    waiting = commit(catalog, "posts", upserted=2)
    commit(catalog, "posts", upserted=1)
    asset = resolve_incremental(enriched)

    fresh = backlog_result(store.control_plane(), asset, 0, None, error_age_s=1800, now=waiting + 60)
    assert (fresh.severity, fresh.metadata["backlog_age_s"].value) == (dg.AssetCheckSeverity.WARN, 60.0)
    stuck = backlog_result(store.control_plane(), asset, 0, None, error_age_s=1800, now=waiting + 1800)
    assert stuck.severity == dg.AssetCheckSeverity.ERROR
    assert stuck.description == (
        "3 committed input version(s) beyond the offsets; the oldest waiting 1800 s (error from 1800 s)")
    tolerated = backlog_result(store.control_plane(), asset, 5, None, error_age_s=1800,
                               now=waiting + 3600)
    assert tolerated.severity == dg.AssetCheckSeverity.ERROR  # few, but stuck
    store.update_offsets_bulk({(TID, "posts"): catalog.last_committed("posts").commit_ts})
    done = backlog_result(store.control_plane(), asset, 0, None, error_age_s=1800, now=waiting + 3600)
    assert done.passed and done.metadata["backlog_age_s"].value == 0.0


def test_sensor_requests_a_run_only_for_new_commits_beyond_the_offsets_and_advances_its_cursor(
        enriched, store, catalog, instance):
    sensor = build_offset_sensor(enriched)

    def tick(cursor):
        return sensor(dg.build_sensor_context(cursor=cursor, instance=instance,
                                              resources={"offset_store": store}))

    assert isinstance(tick(None), dg.SkipReason)  # no input data yet

    posts_ts = commit(catalog, "posts")
    requested = tick(None)
    [request] = requested.run_requests
    assert sensor.job_name == f"{TID}_job"  # the run shows its job, not an empty target
    assert request.run_key == f"{TID}:posts@{posts_ts!r}"
    assert json.loads(requested.cursor) == {"posts": posts_ts}

    assert isinstance(tick(requested.cursor), dg.SkipReason)  # same commits: not twice

    store.update_offsets_bulk({(TID, "posts"): posts_ts})  # the requested run committed
    assert isinstance(tick(None), dg.SkipReason)  # nothing beyond the offset

    commit(catalog, "posts", upserted=0)
    assert isinstance(tick(requested.cursor), dg.SkipReason)  # empty delta: no new work

    profiles_ts = commit(catalog, "profiles")
    again = tick(requested.cursor)
    assert len(again.run_requests) == 1
    assert json.loads(again.cursor) == {"posts": posts_ts, "profiles": profiles_ts}


def report(instance: dg.DagsterInstance, run: dg.DagsterRun, event: DagsterEventType) -> None:
    instance.report_dagster_event(DagsterEvent(event.value, job_name=run.job_name), run_id=run.run_id)


@pytest.fixture
def automated(store):
    """`enriched_posts` with its upstream assets and `on_input_commits()`, as the
    reference project wires it."""
    asset = incremental_asset(
        name=TID, transform_keys=["post_id"], primary_key=["post_id"], schema=ENRICHED,
        join_keys={"profiles": {"user_id": "id"}}, automation_condition=on_input_commits(),
    )(enrich)

    @dg.asset(name="posts")
    def posts() -> None: ...

    @dg.asset(name="profiles")
    def profiles() -> None: ...

    return dg.Definitions(assets=[posts, profiles, asset],
                          jobs=[dg.define_asset_job("ingest_posts", selection=["posts"]),
                                dg.define_asset_job("enrich", selection=[TID])],
                          resources=engine_resources(store))


def test_sensor_waits_for_runs_under_way_and_leaves_dagster_commits_to_automation_for_a_grace(
        automated, store, catalog, instance, monkeypatch):
    """Beside declarative automation the sensor requests only what automation does not:
    while an upstream run is under way it waits; a commit is left to automation for the
    grace after things settled (the run that committed it, the last run of the asset);
    then the sensor requests it, whoever committed it: no backlog is left behind."""
    sensor = build_offset_sensor(automated.get_assets_def(TID))
    assert "left to automation for 120 s" in sensor.description
    clock = [0.0]
    monkeypatch.setattr(sensors, "time", SimpleNamespace(time=lambda: clock[0]))

    def tick(now, cursor=None):
        clock[0] = now
        with dg.build_sensor_context(cursor=cursor, instance=instance,
                                     resources={"offset_store": store}) as context:
            return sensor(context)

    ingest = instance.create_run_for_job(job_def=automated.resolve_job_def("ingest_posts"))
    report(instance, ingest, DagsterEventType.RUN_START)
    posts_ts = commit(catalog, "posts", run_id=ingest.run_id)
    assert tick(posts_ts + 600).skip_message == (
        f"posts have new commits, but run {ingest.run_id} is materializing posts: waiting for it to end")

    report(instance, ingest, DagsterEventType.RUN_SUCCESS)
    ended = instance.get_run_record_by_id(ingest.run_id).end_time
    assert tick(ended + 30).skip_message == (
        "new commits in posts are left to declarative automation for 90 s more")
    [request] = tick(ended + 120).run_requests  # automation did not take it: the sensor does
    assert request.run_key == f"{TID}:posts@{posts_ts!r}"

    # A run of the transformation under way (automation's): the sensor waits for it, and
    # when it failed, requests its work once more.
    run = instance.create_run_for_job(job_def=automated.resolve_job_def("enrich"))
    report(instance, run, DagsterEventType.RUN_START)
    assert tick(ended + 600).skip_message.endswith(
        f"run {run.run_id} is materializing {TID}: waiting for it to end")
    report(instance, run, DagsterEventType.RUN_FAILURE)
    failed_at = instance.get_run_record_by_id(run.run_id).end_time
    assert tick(failed_at + 60).skip_message.endswith("for 60 s more")
    assert len(tick(failed_at + 120).run_requests) == 1

    # A commit made outside Dagster (the CLI, the engine API) is requested after the grace.
    store.update_offsets_bulk({(TID, "posts"): posts_ts})
    outside = commit(catalog, "profiles", run_id="cli-run")
    assert tick(outside + 60).skip_message.endswith("for 60 s more")
    assert [r.run_key for r in tick(outside + 120).run_requests] == [f"{TID}:profiles@{outside!r}"]


def test_automation_requests_a_run_for_an_input_that_committed_while_the_asset_was_running(
        automated, instance):
    """The run under way took its snapshot before the input committed: its materialization
    must not clear the update (eager()'s since_last_handled would), so the asset is
    requested once that run has ended."""
    def evaluate(cursor):
        return dg.evaluate_automation_conditions(defs=automated, instance=instance, cursor=cursor)

    result = evaluate(None)
    assert result.total_requested == 0
    run = instance.create_run_for_job(job_def=automated.resolve_job_def("enrich"))
    report(instance, run, DagsterEventType.RUN_START)
    dg.materialize([automated.get_assets_def("posts")], instance=instance)
    result = evaluate(result.cursor)
    assert result.total_requested == 0  # enriched_posts is in progress: wait

    instance.report_runless_asset_event(dg.AssetMaterialization(TID))  # the run's own output
    report(instance, run, DagsterEventType.RUN_SUCCESS)
    result = evaluate(result.cursor)
    assert (result.total_requested, result.get_num_requested(dg.AssetKey(TID))) == (1, 1)
    assert evaluate(result.cursor).total_requested == 0  # requested once


def test_definitions_with_checks_sensor_and_schedules_load(enriched, store):
    checks = build_offset_checks(enriched)
    defs = dg.Definitions(
        assets=[enriched],
        asset_checks=checks,
        sensors=[build_offset_sensor(enriched)],
        schedules=[
            build_incremental_schedule([enriched], "0 * * * *", name="hourly_enrichment"),
            build_offset_checks_schedule(checks, "*/15 * * * *"),
        ],
        resources=engine_resources(store),
        executor=dg.in_process_executor,
    )
    dg.Definitions.validate_loadable(defs)
    assert {key.name for key in defs.resolve_asset_graph().asset_check_keys} == {
        "offset_age", "offset_backlog"}


@pytest.mark.parametrize(
    ("tags", "resets"),
    [
        ({}, False),
        ({"dagster/backfill": "abc"}, True),
        ({"offset_assets/reset": "true"}, True),
        ({"offset_assets/reset": "false"}, False),
        ({"offset_assets/reset": "0"}, False),
    ],
)
def test_backfill_and_reset_tags_ask_for_a_reset(tags, resets):
    assert is_reset_run(tags) is resets
