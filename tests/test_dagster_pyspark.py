"""dagster-pyspark's resources as the engine's Spark provider.

What the data plane relies on holds whichever resource built the session: the UTC
session time zone is applied on the session the engine is given, a configuration asking
for another one is refused naming the setting, and the Java and endpoint checks run on
the provider's configuration before Spark starts. Processes that only evaluate offset
checks and sensors start no Spark at all.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest
from dagster_pyspark import LazyPySparkResource, PySparkResource

from assets_defs.demo.story import NON_EMBEDDED
from offset_assets.class_archive import ENV_CLASS_ARCHIVE
from offset_assets.config import ENV_SPARK_MASTER, ENV_SPARK_REMOTE
from offset_assets.dagster_adapter import (
    IncrementalEngineResource,
    OffsetStore,
    SparkSessionResource,
    spark_config_from_environment,
)
from offset_assets.dagster_adapter.spark_resource import check_provider_before_start, data_plane_session
from offset_assets.errors import JavaNotFoundError
from offset_assets.spark import LOCAL_TEST_CONF, RUN_COST_CONF, SparkSettingError, SparkUnavailableError
from tests.spark_cluster import free_port

ROOT = Path(__file__).resolve().parent.parent
TIME_ZONE = "spark.sql.session.timeZone"


@pytest.fixture
def other_time_zone(spark):
    """The shared session on another time zone, as a user's own code may have left it."""
    spark.conf.set(TIME_ZONE, "America/New_York")
    yield spark
    spark.conf.set(TIME_ZONE, "UTC")


@pytest.mark.parametrize("provider", [LazyPySparkResource, PySparkResource, SparkSessionResource])
def test_an_asset_on_any_pyspark_resource_gets_the_session_in_utc(other_time_zone, sqlite_url, provider):
    seen = {}

    @dg.asset
    def probe(incremental_engine: IncrementalEngineResource) -> None:
        session = incremental_engine.spark_session
        seen.update(same=session is other_time_zone, tz=session.conf.get(TIME_ZONE),
                    cached=incremental_engine.spark_session is session)

    engine = IncrementalEngineResource(offset_store=OffsetStore(db_url=sqlite_url),
                                       spark=provider(spark_config={}))
    assert dg.materialize([probe], resources={"incremental_engine": engine}).success
    assert seen == {"same": True, "tz": "UTC", "cached": True}


def test_a_configuration_asking_for_another_time_zone_is_refused_before_spark_is_touched(other_time_zone):
    provider = LazyPySparkResource(spark_config={"spark": {"sql": {"session": {"timeZone": "Europe/Paris"}}}})
    with pytest.raises(SparkSettingError, match=r"spark\.sql\.session\.timeZone='Europe/Paris'.*needs "
                                                r"spark\.sql\.session\.timeZone=UTC"):
        data_plane_session(provider)
    assert other_time_zone.conf.get(TIME_ZONE) == "America/New_York"  # the provider never built


def test_the_endpoint_named_in_spark_config_is_knocked_on_before_spark_starts(monkeypatch):
    for name in (ENV_SPARK_MASTER, ENV_SPARK_REMOTE, "SPARK_REMOTE"):
        monkeypatch.delenv(name, raising=False)
    url = f"sc://127.0.0.1:{free_port()}"
    with pytest.raises(SparkUnavailableError, match=f"Spark endpoint {url} does not answer"):
        check_provider_before_start(LazyPySparkResource(spark_config={"spark.remote": url}))
    master = f"spark://127.0.0.1:{free_port()}"
    with pytest.raises(SparkUnavailableError, match=f"Spark endpoint {master} does not answer"):
        check_provider_before_start(LazyPySparkResource(spark_config={"spark": {"master": master}}))
    with pytest.raises(SparkUnavailableError, match="choose one"):
        check_provider_before_start(LazyPySparkResource(spark_config={"spark.master": master, "spark.remote": url}))
    # SparkSessionResource resolves OFFSET_ASSETS_SPARK_REMOTE itself; a plain spark_config would ignore it.
    monkeypatch.setenv(ENV_SPARK_REMOTE, url)
    with pytest.raises(SparkUnavailableError, match=f"Spark endpoint {url} does not answer"):
        check_provider_before_start(SparkSessionResource())
    with pytest.raises(SparkSettingError, match="OFFSET_ASSETS_SPARK_REMOTE is set, but the LazyPySparkResource"):
        check_provider_before_start(LazyPySparkResource(spark_config={}))


def test_a_missing_java_is_found_from_the_provider_config(monkeypatch, tmp_path):
    for name in (ENV_SPARK_MASTER, ENV_SPARK_REMOTE, "SPARK_REMOTE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "no-java"))
    with pytest.raises(JavaNotFoundError, match="Java not found"):
        check_provider_before_start(LazyPySparkResource(spark_config={"spark.master": "local[1]"}))


def fresh_python(code: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if k not in (*NON_EMBEDDED, ENV_SPARK_MASTER, ENV_SPARK_REMOTE)}
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, env={**clean, "PYTHONPATH": str(ROOT), **env})


CONTROL_PLANE_ONLY = """
import json
import dagster as dg
from pyspark import SparkContext
from pyspark.sql import SparkSession
from assets_defs.definitions import build_definitions

defs = build_definitions()
with dg.instance_for_test() as instance:
    checks = defs.resolve_job_def("offset_checks_job").execute_in_process(instance=instance)
    sensor = defs.resolve_sensor_def("enriched_posts_inputs_changed")
    with dg.build_sensor_context(instance=instance, resources=defs.resources) as context:
        tick = sensor(context)
print(json.dumps({
    "provider": type(defs.resources["incremental_engine"].spark).__name__,
    "checks": len(checks.get_asset_check_evaluations()),
    "sensor": type(tick).__name__,
    "active_session": SparkSession.getActiveSession() is not None,
    "jvm": SparkContext._gateway is not None,
}))
"""


def test_offset_checks_and_a_sensor_in_a_fresh_process_start_no_spark(tmp_path):
    child = fresh_python(CONTROL_PLANE_ONLY, {"OFFSET_ASSETS_HOME": str(tmp_path / "state"),
                                              "DAGSTER_HOME": str(tmp_path / "dagster_home")})
    assert child.returncode == 0, child.stderr[-3000:]
    assert json.loads(child.stdout.strip().splitlines()[-1]) == {
        "provider": "LazyPySparkResource", "checks": 8, "sensor": "SkipReason",
        "active_session": False, "jvm": False}


def test_a_missing_java_is_one_line_naming_it_not_a_launcher_traceback(tmp_path):
    child = fresh_python(
        "from assets_defs.resources import resources_for\n"
        "resources_for()['incremental_engine'].spark_session\n",
        {"OFFSET_ASSETS_HOME": str(tmp_path / "state"), "JAVA_HOME": str(tmp_path / "no-java")})
    assert child.returncode == 1
    assert child.stderr.strip().splitlines()[-1] == (
        "offset_assets.errors.JavaNotFoundError: Java not found: Spark 4 needs Java 17+ "
        "(install openjdk-17 or set JAVA_HOME)")
    assert "JAVA_GATEWAY_EXITED" not in child.stderr


def test_spark_session_resource_resolves_an_env_var_master_where_a_spark_config_cannot(monkeypatch, sqlite_url):
    """The one thing SparkSessionResource adds: `master`/`remote` take dg.EnvVar, resolved in the run."""
    monkeypatch.setenv("ANY_MASTER_VARIABLE", "spark://cluster:7077")
    monkeypatch.setenv(ENV_CLASS_ARCHIVE, "off")  # its options: test_class_archive.py
    seen = []

    @dg.asset
    def probe(incremental_engine: IncrementalEngineResource) -> None:
        seen.append(incremental_engine.spark.session_config())  # no session: nothing starts

    engine = IncrementalEngineResource(offset_store=OffsetStore(db_url=sqlite_url), spark=SparkSessionResource(
        master=dg.EnvVar("ANY_MASTER_VARIABLE"), spark_config={"spark.app.name": "x"}))
    assert dg.materialize([probe], resources={"incremental_engine": engine}).success
    assert seen == [{**RUN_COST_CONF, "spark.app.name": "x", "spark.master": "spark://cluster:7077"}]


def test_a_spark_config_value_wins_over_the_run_cost_settings(monkeypatch):
    """The run-cost settings sit under a driver's configuration; a Connect client gets none."""
    monkeypatch.setenv(ENV_CLASS_ARCHIVE, "off")  # its options: test_class_archive.py
    monkeypatch.delenv(ENV_SPARK_MASTER, raising=False)
    monkeypatch.delenv(ENV_SPARK_REMOTE, raising=False)
    own = {"spark.sql.codegen.cache.maxEntries": "50"}
    assert SparkSessionResource(spark_config=own).session_config() == {
        **RUN_COST_CONF, **own, "spark.master": "local[*]"}
    assert SparkSessionResource(spark_config=own, remote="sc://connect:15002").session_config() == {
        **own, "spark.remote": "sc://connect:15002"}


def test_a_master_the_caller_names_wins_over_the_environment_default(monkeypatch):
    monkeypatch.setenv(ENV_CLASS_ARCHIVE, "off")  # its options: test_class_archive.py
    monkeypatch.delenv(ENV_SPARK_MASTER, raising=False)
    monkeypatch.delenv(ENV_SPARK_REMOTE, raising=False)
    assert spark_config_from_environment({"spark.master": "local[2]"}) == {
        **RUN_COST_CONF, "spark.master": "local[2]"}
    assert spark_config_from_environment({"spark": {"master": "local[2]"}})["spark.master"] == "local[2]"
    assert spark_config_from_environment()["spark.master"] == "local[*]"


def test_the_environment_names_where_spark_runs_only_when_the_caller_does_not(monkeypatch):
    """OFFSET_ASSETS_SPARK_* are defaults, as for get_spark_session(master=...) and SparkSessionResource."""
    monkeypatch.setenv(ENV_CLASS_ARCHIVE, "off")  # its options: test_class_archive.py
    monkeypatch.delenv(ENV_SPARK_REMOTE, raising=False)
    monkeypatch.setenv(ENV_SPARK_MASTER, "spark://cluster:7077")
    assert spark_config_from_environment({"spark.app.name": "x"}) == {
        **RUN_COST_CONF, "spark.app.name": "x", "spark.master": "spark://cluster:7077"}
    assert spark_config_from_environment({"spark.master": "local[2]"})["spark.master"] == "local[2]"
    # A Connect endpoint the caller names gets no master beside it (that would be refused).
    assert spark_config_from_environment({"spark.remote": "sc://connect:15002"}) == {
        "spark.remote": "sc://connect:15002"}
    monkeypatch.setenv(ENV_SPARK_REMOTE, "sc://connect:15002")
    assert spark_config_from_environment({"spark.app.name": "x"}) == {
        "spark.app.name": "x", "spark.remote": "sc://connect:15002"}


def test_spark_session_resource_builds_its_session_from_session_config_on_first_access(spark, monkeypatch):
    monkeypatch.delenv(ENV_SPARK_REMOTE, raising=False)
    monkeypatch.setenv(ENV_SPARK_MASTER, "local[2]")
    resource = SparkSessionResource(spark_config={"spark.sql.shuffle.partitions": "3"})
    try:
        session = resource.spark_session
        assert session is spark  # getOrCreate: the process's session, given the resource's settings
        assert session.conf.get("spark.sql.shuffle.partitions") == "3"
        assert resource.spark_session is session and resource.spark_context is spark.sparkContext
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", LOCAL_TEST_CONF["spark.sql.shuffle.partitions"])
