"""The reference project (`assets_defs`): its Definitions, and the demo story end to end.

The story test reads `make demo` at a small size, run once in this process (the
`demo_story` fixture, `tests/demo_state.py`, shared with the webserver test): real Dagster
runs, real Spark (the session fixture), the state in a temporary folder
(`OFFSET_ASSETS_HOME`). Every count is asserted exactly.
"""

import re
import time
from datetime import UTC, datetime

import dagster as dg
import pytest
import sqlalchemy as sa
from click.testing import CliRunner
from dagster._daemon.types import DaemonHeartbeat
from dagster_pyspark import LazyPySparkResource

from assets_defs import source_system
from assets_defs.assets.ingestion import ENV_INGEST_START, build_ingestion, ingest_start
from assets_defs.assets.transformations import BANNED_WORD
from assets_defs.definitions import build_definitions
from assets_defs.demo.__main__ import demo
from assets_defs.demo.report import render
from assets_defs.demo.story import (
    NON_EMBEDDED,
    QUIET_RUN_CONFIG,
    DemoClock,
    DemoError,
    MaterializationPass,
    check_embedded,
    check_no_dagster_dev,
    ingest_due_ranges,
)
from assets_defs.resources import ENV_DEPLOYMENT
from offset_assets.class_archive import with_driver_class_archive
from offset_assets.config import ENV_HOME, default_db_url
from offset_assets.control_plane import connect, database
from offset_assets.control_plane.job_log import JobLog
from offset_assets.errors import SettingError
from offset_assets.spark import RUN_COST_CONF
from tests.demo_state import SMALL

# The reference project's transformed assets (moderated_posts writes the last two together).
TRANSFORMED_ASSETS = ("enriched_posts", "user_post_stats", "accepted_posts", "rejected_posts")


@pytest.fixture
def embedded_state(tmp_path, monkeypatch):
    """The embedded defaults, rooted in a temporary folder."""
    for name in NON_EMBEDDED:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv(ENV_HOME, str(tmp_path / "state"))
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    yield tmp_path / "state"
    database.forget(default_db_url())


def test_definitions_load_with_every_asset_check_sensor_schedule_and_job(embedded_state):
    defs = build_definitions()
    dg.Definitions.validate_loadable(defs)
    repository = defs.get_repository_def()
    assert {key.to_user_string() for key in repository.asset_graph.get_all_asset_keys()} == {
        "posts", "post_updates", "profiles", "enriched_posts", "user_post_stats",
        "accepted_posts", "rejected_posts"}
    assert {(key.asset_key.to_user_string(), key.name) for key in repository.asset_checks_defs_by_key} == {
        (asset, check) for asset in ("enriched_posts", "user_post_stats", "accepted_posts", "rejected_posts")
        for check in ("offset_age", "offset_backlog")}
    assert {s.name for s in repository.sensor_defs} == {
        "posts_ranges_sensor", "enriched_posts_inputs_changed", "user_post_stats_inputs_changed",
        "moderated_posts_inputs_changed", "transformations_automation"}
    assert {s.name for s in repository.schedule_defs} == {
        "post_updates_schedule", "profiles_schedule", "offset_checks", "table_maintenance_hourly"}
    # Running from the start: whatever commits input versions is followed by the
    # transformations (automation, the offset sensors), and a backlog is checked on its own.
    assert {s.name for s in repository.sensor_defs
            if s.default_status == dg.DefaultSensorStatus.RUNNING} == {
        "transformations_automation", "enriched_posts_inputs_changed", "user_post_stats_inputs_changed",
        "moderated_posts_inputs_changed"}
    assert {s.name for s in repository.schedule_defs
            if s.default_status == dg.DefaultScheduleStatus.RUNNING} == {"offset_checks"}
    reprocess = repository.get_job("reprocess_transformations")
    assert reprocess.tags["offset_assets/reset"] == "true"
    # Every run names its job: the sensors', the schedules' and the demo's.
    assert {"transformations", "posts_ingestion", "post_updates_ingestion", "profiles_ingestion",
            "enriched_posts_job", "user_post_stats_job", "moderated_posts_job", "revert_table"} <= {
        job.name for job in repository.get_all_jobs()}
    assert {s.name: s.job_name for s in repository.sensor_defs if s.name.endswith("_inputs_changed")} == {
        "enriched_posts_inputs_changed": "enriched_posts_job",
        "user_post_stats_inputs_changed": "user_post_stats_job",
        "moderated_posts_inputs_changed": "moderated_posts_job"}
    # post_updates writes the posts table: lineage shows it upstream of enriched_posts.
    graph = repository.asset_graph
    assert graph.get(dg.AssetKey("enriched_posts")).parent_keys == {
        dg.AssetKey("posts"), dg.AssetKey("profiles"), dg.AssetKey("post_updates")}
    for name in ("enriched_posts", "user_post_stats", "accepted_posts", "rejected_posts"):
        assert graph.get(dg.AssetKey(name)).automation_condition.get_label() == "on input commits"
    # One transformation, two output assets; downstream assets depend on either one.
    for name in ("accepted_posts", "rejected_posts"):
        assert graph.get(dg.AssetKey(name)).parent_keys == {dg.AssetKey("posts"), dg.AssetKey("post_updates")}
    assert defs.get_assets_def("accepted_posts") is defs.get_assets_def("rejected_posts")
    posts = defs.get_assets_def("posts")
    assert isinstance(posts.partitions_def, dg.DynamicPartitionsDefinition)
    updates = defs.get_assets_def("post_updates")
    assert updates.partitions_def.get_first_partition_key() == ingest_start().strftime("%Y-%m-%d")
    # Today's window is a partition: the UI lists it and can launch it.
    today = datetime.now(UTC).strftime("%Y-%m-%d")
    assert updates.partitions_def.get_last_partition_key() == today
    assert defs.get_assets_def("profiles").partitions_def.get_last_partition_key() == today
    assert updates.metadata_by_key[updates.key]["offset_assets/table"] == "posts"


def test_the_backlog_check_runs_on_a_schedule_of_its_own_from_the_start(embedded_state):
    """`offset_checks` runs every 15 minutes without a hand on it and evaluates both checks
    of both transformations, materializing nothing: a backlog that no run picks up is seen
    (and turns the asset red once it has waited 30 minutes) even while nothing else runs."""
    defs = build_definitions()
    repository = defs.get_repository_def()
    schedule = repository.get_schedule_def("offset_checks")
    assert (schedule.cron_schedule, schedule.default_status) == (
        "*/15 * * * *", dg.DefaultScheduleStatus.RUNNING)
    with dg.instance_for_test() as instance:
        with dg.build_schedule_context(instance=instance, repository_def=repository,
                                       scheduled_execution_time=datetime(2026, 1, 1, 0, 15, tzinfo=UTC)) as context:
            [request] = schedule.evaluate_tick(context).run_requests
        job = defs.resolve_job_def(schedule.job_name)
        result = job.execute_in_process(instance=instance, tags=request.tags, run_config=QUIET_RUN_CONFIG)
    assert result.get_asset_materialization_events() == []
    assert {(e.asset_key.to_user_string(), e.check_name) for e in result.get_asset_check_evaluations()} == {
        (asset, check) for asset in TRANSFORMED_ASSETS for check in ("offset_age", "offset_backlog")}
    specs = [spec for checks in repository.asset_checks_defs_by_key.values() for spec in checks.check_specs]
    assert {spec.description for spec in specs if spec.name == "offset_backlog"} == {
        "Committed input versions beyond the offsets: WARN above 0, ERROR once a version has "
        "waited 1800 s (control plane only)."}


def test_production_definitions_need_every_location_and_take_them_from_the_environment(
        embedded_state, monkeypatch):
    monkeypatch.setenv(ENV_DEPLOYMENT, "production")
    with pytest.raises(dg.DagsterInvalidDefinitionError, match="OFFSET_ASSETS_DB_URL.*OFFSET_ASSETS_SOURCE_URL"):
        build_definitions()
    monkeypatch.setenv("OFFSET_ASSETS_DB_URL", "postgresql://u:p@db/control")
    monkeypatch.setenv("OFFSET_ASSETS_WAREHOUSE", "s3a://lake/warehouse")
    monkeypatch.setenv("OFFSET_ASSETS_SPARK_MASTER", "spark://master:7077")
    monkeypatch.setenv("OFFSET_ASSETS_SOURCE_URL", "postgresql://u:p@app/source")
    defs = build_definitions()
    dg.Definitions.validate_loadable(defs)
    assert defs.get_assets_def("posts").metadata_by_key[dg.AssetKey("posts")]["offset_assets/table"] == "posts"
    engine = defs.resources["incremental_engine"]
    assert (engine.warehouse.env_var_name, engine.offset_store.db_url.env_var_name) == (
        "OFFSET_ASSETS_WAREHOUSE", "OFFSET_ASSETS_DB_URL")
    # dagster-pyspark's lazy resource, its spark_config from the environment (a driver of
    # its own gets the run-cost settings and the class archive when one is built, a
    # Connect client neither).
    assert isinstance(engine.spark, LazyPySparkResource)
    assert engine.spark.spark_config == with_driver_class_archive({
        **RUN_COST_CONF, "spark.app.name": "offset-assets-reference", "spark.master": "spark://master:7077"})
    monkeypatch.setenv("OFFSET_ASSETS_SPARK_REMOTE", "sc://connect:15002")
    monkeypatch.delenv("OFFSET_ASSETS_SPARK_MASTER")
    connect_spark = build_definitions().resources["incremental_engine"].spark
    assert connect_spark.spark_config == {"spark.app.name": "offset-assets-reference",
                                          "spark.remote": "sc://connect:15002"}
    assert defs.resources["io_manager"].engine is engine
    monkeypatch.setenv(ENV_INGEST_START, "2024-01-01")
    assert build_ingestion("sqlite://").post_updates.partitions_def.get_first_partition_key() == "2024-01-01"


@pytest.mark.parametrize(("environment", "executor"), [
    ({}, "in_process"),
    ({"OFFSET_ASSETS_SPARK_REMOTE": "sc://connect:15002"}, "in_process"),
    ({"OFFSET_ASSETS_SPARK_MASTER": "spark://master:7077"}, "multiprocess"),
    ({"OFFSET_ASSETS_SPARK_MASTER": "spark://master:7077", "OFFSET_ASSETS_EXECUTOR": "in_process"}, "in_process"),
    ({"OFFSET_ASSETS_EXECUTOR": "multiprocess"}, "multiprocess"),
])
def test_runs_share_one_process_unless_a_cluster_master_or_the_setting_says_otherwise(
        embedded_state, monkeypatch, environment, executor):
    """A step process costs seconds of imports (and with a local master a driver JVM); a
    Connect client attaches in about a second, so only a cluster master gets a process
    per step by default."""
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    job = build_definitions().resolve_job_def("transformations")
    assert job.executor_def.name == executor


def test_an_executor_setting_that_is_not_one_is_refused_by_name(embedded_state, monkeypatch):
    monkeypatch.setenv("OFFSET_ASSETS_EXECUTOR", "threads")
    with pytest.raises(SettingError, match="OFFSET_ASSETS_EXECUTOR='threads' is not one of in_process, multiprocess"):
        build_definitions()


def test_the_demo_refuses_to_reset_a_state_it_does_not_own():
    check_embedded({"OFFSET_ASSETS_HOME": "/somewhere"})
    with pytest.raises(DemoError, match="unset OFFSET_ASSETS_DB_URL"):
        check_embedded({"OFFSET_ASSETS_DB_URL": "postgresql://db/prod"})


def test_the_demo_refuses_while_dagster_dev_runs_on_its_instance():
    """`make dev` holds the state files open; the demo says so instead of deleting them."""
    with dg.instance_for_test() as instance:
        check_no_dagster_dev(instance)  # no daemon: fine
        now = time.time()
        instance.add_daemon_heartbeat(DaemonHeartbeat(now - 5, "SENSOR", None, None))
        with pytest.raises(DemoError, match=r"`make dev` \(dagster dev\) is running.*stop it"):
            check_no_dagster_dev(instance, now=now)
        check_no_dagster_dev(instance, now=now + 120)  # a daemon silent for 2 minutes has stopped


def source_truth(url: str) -> tuple[set[tuple], set[tuple], set[tuple]]:
    """enriched_posts, user_post_stats and the live posts computed from the source database alone."""
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        names = dict(conn.execute(sa.text("SELECT id, name FROM profiles")).all())
        live = conn.execute(sa.text(
            "SELECT id, user_id, text, updated_at FROM posts WHERE is_deleted = 0")).all()
    engine.dispose()
    enriched = {(pid, uid, names[uid], text, ts) for pid, uid, text, ts in live}
    stats = {}
    for _, uid, _, ts in live:
        count, last = stats.get(uid, (0, 0.0))
        stats[uid] = (count + 1, max(last, ts))
    return enriched, {(uid, names[uid], count, last) for uid, (count, last) in stats.items()}, set(live)


def actual_rows(defs: dg.Definitions, asset: str) -> set[tuple]:
    table = defs.resources["incremental_engine"].table(dg.AssetKey(asset))
    return {tuple(row) for row in table.read_actual().select(*table.data_columns).collect()}


@pytest.mark.slow
def test_demo_story_second_run_processes_only_the_changed_posts_and_the_renamed_authors_posts(
        spark, demo):
    story = demo.story
    with demo.instance() as instance:
        jobs = [instance.get_run_by_id(run_id).job_name for run_id in story.first.run_ids]
    assert jobs == ["posts_ingestion", "post_updates_ingestion", "profiles_ingestion", "transformations"]

    first, second, traffic, expected = story.first, story.second, story.traffic, story.expected
    assert [(r.asset, r.partition_key) for r in first.ingested] == [
        ("posts", "id:0-30"),
        ("post_updates", ingest_start().strftime("%Y-%m-%d")),
        ("profiles", ingest_start().strftime("%Y-%m-%d")),
    ]
    first_rows = {r.asset: (r.metadata["rows_read"], r.metadata["rows_upserted"]) for r in first.ingested}
    assert first_rows == {"posts": (30, 30), "post_updates": (30, 0), "profiles": (6, 6)}
    assert first.processed("enriched_posts") == 30
    assert first.processed("user_post_stats") == story.authors == 6

    # Traffic: 3 inserts, 2 edits, 1 soft delete, 1 rename (user 4: 6 live posts, 2 of them edited).
    assert (traffic.inserted_posts, traffic.updated_posts, traffic.deleted_posts,
            traffic.renamed_profiles) == ([31, 32, 33], [15, 28], [18], [4])
    assert story.renamed == {4: ("eve-4", "lou-4-renamed")}
    second_rows = {r.asset: (r.partition_key, r.metadata["rows_read"], r.metadata["rows_upserted"],
                             r.metadata["rows_deleted"]) for r in second.ingested}
    yesterday = story.clock.first_cutoff.strftime("%Y-%m-%d")
    assert second_rows == {
        "posts": ("id:30-33", 3, 3, 0),
        "post_updates": (yesterday, 6, 2, 1),  # the 3 inserts again: unchanged, no version
        "profiles": (yesterday, 1, 1, 0),
    }
    assert second.sensor_requests["enriched_posts"] == "run requested (new commits in posts, profiles)"
    assert second.sensor_requests["user_post_stats"] == "nothing beyond its offsets yet"

    # 6 changed posts, plus the renamed author's posts that did not change (reverse join).
    assert (len(expected.changed_posts), expected.reverse_join_only) == (6, 4)
    assert second.processed("enriched_posts") == expected.enriched_keys == 10
    enriched = second.transformations["enriched_posts"]
    assert (enriched["rows_read.posts"], enriched["rows_written.enriched_posts"],
            enriched["rows_deleted.enriched_posts"]) == (9, 9, 1)
    assert enriched["rows_read.profiles"] < SMALL.users  # filtered join: only the authors present
    assert second.processed("user_post_stats") == len(expected.stats_users) == 4
    assert all(passed for *_, passed, _ in second.checks) and len(second.checks) == 8

    before = {(r["transformation_id"], r["input_table_name"]): r["update_ts_offset"] for r in story.offsets_before}
    after = {(r["transformation_id"], r["input_table_name"]): r["update_ts_offset"] for r in story.offsets_after}
    assert set(after) == {("enriched_posts", "posts"), ("enriched_posts", "profiles"),
                          ("user_post_stats", "enriched_posts"), ("moderated_posts", "posts")}
    assert all(after[key] > before[key] for key in after)

    defs = build_definitions()
    truth_enriched, truth_stats, live = source_truth(source_system.source_url())
    assert actual_rows(defs, "enriched_posts") == truth_enriched
    assert actual_rows(defs, "user_post_stats") == truth_stats
    assert len(truth_enriched) == 32
    rejected = {post for post in live if BANNED_WORD in post[2].split(" ")}
    assert actual_rows(defs, "rejected_posts") == rejected and 0 < len(rejected) < len(live)
    assert actual_rows(defs, "accepted_posts") == live - rejected

    # posts deltas: 1 = first id range, 2 = second id range, 3 = yesterday's window.
    assert [(delta, text is not None) for delta, _, text in story.history] == [(1, True), (2, True), (3, True)]
    assert story.history[0][2] == story.history[1][2] != story.history[2][2]
    assert story.deleted_presence == [(1, True), (2, True), (3, False)]

    log = JobLog(connect(default_db_url()))
    assert [(r.data_range_start, r.data_range_end, r.status) for r in log.history("posts")] == [
        ("0", "30", "SUCCESS"), ("30", "33", "SUCCESS")]
    report = render(story)
    assert "EXPECTED" not in report and report.count("as expected") == 6
    moderated = second.transformations["rejected_posts"]
    assert second.processed("accepted_posts") == moderated["processed_keys"] == len(expected.changed_posts)
    assert (f"moderated_posts  processed 6 keys (as expected: the changed posts; no reference input) -> "
            f"accepted_posts {second.transformations['accepted_posts']['rows_written.accepted_posts']} written"
            ) in report
    assert "10 keys = 6 changed posts + 4 more posts of the renamed profile (reverse join)" in report.replace(
        "processed 10 of 32 keys", "10 keys")
    # Each transformation's own time in the second pass, with the Spark jobs its profile counted.
    times = {name: (float(seconds), int(jobs)) for name, seconds, jobs in re.findall(
        r"(\w+) (\d+\.\d\d) s \((\d+) Spark jobs\)", report.split("engine time: ")[1].splitlines()[0])}
    assert list(times) == ["enriched_posts", "user_post_stats", "moderated_posts"]
    assert times["enriched_posts"] == (round(second.transformations["enriched_posts"]["duration_s"], 2),
                                       second.transformations["enriched_posts"]["profile.spark_jobs"])


def run_checks(defs: dg.Definitions, instance: dg.DagsterInstance) -> dict[tuple[str, str], bool]:
    result = defs.resolve_job_def("offset_checks_job").execute_in_process(
        instance=instance, run_config=QUIET_RUN_CONFIG)
    return {(e.asset_key.to_user_string(), e.check_name): e.passed
            for e in result.get_asset_check_evaluations()}


@pytest.mark.slow
def test_edits_ingested_through_todays_window_are_processed_without_a_hand_action(
        spark, embedded_state):
    """`make demo`, then `make dev`: traffic at the source now, today's partition of
    `post_updates` and `profiles` launched as any partition (no tag). Declarative
    automation requests the transformations; running what it requests leaves no backlog,
    and the outputs equal what the source says."""
    ingestion = build_ingestion(source_system.source_url(), ingest_start())
    defs = build_definitions(ingestion)
    transformations = dg.AssetSelection.assets(*TRANSFORMED_ASSETS)
    source = source_system.source_engine()
    source_system.seed_source(source, SMALL.users, SMALL.posts, seed=SMALL.seed,
                              now=DemoClock(ingest_start()).seed_at)
    today = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0, tzinfo=None)
    with dg.instance_for_test() as instance:
        ingest_due_ranges(defs, ingestion, instance, today, MaterializationPass(), "story")
        defs.resolve_job_def("transformations").execute_in_process(
            instance=instance, run_config=QUIET_RUN_CONFIG)
        automation = dg.evaluate_automation_conditions(
            defs=defs, instance=instance, asset_selection=transformations)
        assert automation.total_requested == 0

        traffic = source_system.generate_traffic(source, inserts=0, updates=3, deletes=1, renames=1,
                                                 seed=SMALL.traffic_seed)
        today_key = today.strftime("%Y-%m-%d")
        ingested = {}
        for name in ("post_updates", "profiles"):
            run = defs.resolve_job_def(f"{name}_ingestion").execute_in_process(
                instance=instance, partition_key=today_key, run_config=QUIET_RUN_CONFIG)
            [event] = run.asset_materializations_for_node(name)
            ingested[name] = {k: event.metadata[k].value
                              for k in ("open_window", "rows_upserted", "rows_deleted")}
        assert ingested == {
            "post_updates": {"open_window": True, "rows_upserted": 3, "rows_deleted": 1},
            "profiles": {"open_window": True, "rows_upserted": 1, "rows_deleted": 0}}
        checks = run_checks(defs, instance)
        assert not checks[("enriched_posts", "offset_backlog")]  # 5 versions wait

        automation = dg.evaluate_automation_conditions(
            defs=defs, instance=instance, asset_selection=transformations, cursor=automation.cursor)
        every = [dg.AssetKey(name) for name in TRANSFORMED_ASSETS]
        requested = [key for key in every if automation.get_num_requested(key)]
        assert requested == every
        run = defs.resolve_implicit_global_asset_job_def().execute_in_process(
            instance=instance, asset_selection=requested, run_config=QUIET_RUN_CONFIG)
        processed = {name: run.asset_materializations_for_node(name)[0].metadata["processed_keys"].value
                     for name in ("enriched_posts", "user_post_stats")}
        checks = run_checks(defs, instance)
        again = dg.evaluate_automation_conditions(
            defs=defs, instance=instance, asset_selection=transformations, cursor=automation.cursor)
    renamed_posts = {pid for pid, uid, *_ in actual_rows(defs, "enriched_posts")
                     if uid in traffic.renamed_profiles}
    assert processed["enriched_posts"] == len(traffic.changed_posts | renamed_posts)
    assert all(checks.values()) and len(checks) == 8  # no backlog, fresh offsets
    assert again.total_requested == 0
    truth_enriched, truth_stats, _ = source_truth(source_system.source_url())
    assert actual_rows(defs, "enriched_posts") == truth_enriched
    assert actual_rows(defs, "user_post_stats") == truth_stats


def test_traffic_command_changes_the_seeded_source_and_refuses_an_empty_one(embedded_state):
    runner = CliRunner()
    empty = runner.invoke(demo, ["traffic"])
    assert empty.exit_code == 1 and "is empty: run the demo first" in empty.output
    engine = source_system.source_engine()
    source_system.seed_source(engine, users=4, posts_count=10, seed=1)
    result = runner.invoke(demo, ["traffic", "--seed", "5", "--inserts", "2", "--updates", "1",
                                  "--deletes", "1", "--renames", "1"])
    assert result.exit_code == 0, result.output
    assert "2 posts inserted, 1 updated, 1 deleted; 1 profile(s) renamed" in result.output
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT count(*), sum(is_deleted) FROM posts")).one() == (12, 1)
    engine.dispose()
