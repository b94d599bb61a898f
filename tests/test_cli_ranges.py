"""`offset-assets ranges plan ASSET`: new id ranges become partitions a shell can run.

Dagster only runs a dynamic partition its instance knows, and the ingestion sensor is
what adds them; from a shell, this command plans the due ranges as the sensor does, adds
them to the instance of $DAGSTER_HOME and prints the `dagster asset materialize` command
of each, in run order. Each story loads a real Definitions module from the working
directory, plans against a real SQLite source and control plane, and uses a real
Dagster instance.
"""

from __future__ import annotations

import importlib
import sys
import textwrap

import dagster as dg
import pytest
import sqlalchemy as sa
from click.testing import CliRunner

from offset_assets.cli import main
from offset_assets.control_plane import database
from offset_assets.control_plane.job_log import JobLog

DEFINITIONS = """
import os

import dagster as dg
from dagster_pyspark import LazyPySparkResource

from offset_assets.dagster_adapter import (
    IncrementalEngineResource, OffsetIOManager, OffsetStore, build_ingestion_sensor, ingestion_asset,
)
from offset_assets.ranges.ingestion import IngestionJob, TargetTable
from offset_assets.ranges.planners import AutoIncrementIdPlanner, TimeWindowPlanner
from offset_assets.ranges.sources import SqlTableSource
from tests.customers_source import CUSTOMERS
from datetime import datetime, timedelta

SOURCE = os.environ["TEST_SOURCE_URL"]
by_id_job = IngestionJob(
    "customers_by_id", SqlTableSource(SOURCE, "customers", id_column="id", columns=["id", "name", "city"]),
    AutoIncrementIdPlanner(), TargetTable("customers_by_id", ["id"], CUSTOMERS),
)
daily_job = IngestionJob(
    "daily_customers",
    SqlTableSource(SOURCE, "customers", time_column="created_at", columns=["id", "name", "city"]),
    TimeWindowPlanner(datetime(2022, 1, 1), timedelta(days=1)),
    TargetTable("daily_customers", ["id"], CUSTOMERS),
)
customers_by_id = ingestion_asset(by_id_job)
daily_customers = ingestion_asset(daily_job)
store = OffsetStore(db_url=dg.EnvVar("TEST_CONTROL_PLANE_URL"))
engine = IncrementalEngineResource(offset_store=store, spark=LazyPySparkResource(spark_config={}),
                                   warehouse=os.environ["TEST_WAREHOUSE"])

@dg.asset
def not_ingested() -> None:
    pass

defs = dg.Definitions(
    assets=[customers_by_id, daily_customers, not_ingested],
    sensors=[build_ingestion_sensor(by_id_job, customers_by_id)],
    resources={"offset_store": store, "incremental_engine": engine, "io_manager": OffsetIOManager(engine=engine)},
)
"""


def add_customers(url: str, *names: str, day: int = 1) -> None:
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        for name in names:
            conn.execute(sa.text("INSERT INTO customers (name, city, created_at) VALUES (:n, 'Oslo', :t)"),
                         {"n": name, "t": f"2022-01-{day:02d} 10:00:00.000000"})
    engine.dispose()


@pytest.fixture
def project(tmp_path, monkeypatch, source_url, sqlite_url, warehouse):
    """A project folder holding a Definitions module (a fresh module name per test, as
    each test's module reads its own source and control plane), the working directory."""
    folder = tmp_path / "project"
    folder.mkdir()
    module = f"ranges_defs_{tmp_path.name.replace('-', '_')}"
    (folder / f"{module}.py").write_text(textwrap.dedent(DEFINITIONS))
    (folder / "pyproject.toml").write_text(f'[tool.dagster]\nmodule_name = "{module}"\n')
    (tmp_path / "dagster_home").mkdir()
    (tmp_path / "dagster_home" / "dagster.yaml").write_text("")
    monkeypatch.chdir(folder)
    monkeypatch.syspath_prepend(str(folder))
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    monkeypatch.setenv("TEST_SOURCE_URL", source_url)
    monkeypatch.setenv("TEST_CONTROL_PLANE_URL", sqlite_url)
    monkeypatch.setenv("TEST_WAREHOUSE", warehouse)
    monkeypatch.delenv("OFFSET_ASSETS_DB_URL", raising=False)
    yield module
    sys.modules.pop(module, None)


def plan(*args: str):
    return CliRunner().invoke(main, ["ranges", "plan", *args])


def materialize(module: str, asset: str, partition_key: str) -> dg.ExecuteInProcessResult:
    """What the printed command runs, in this process (with the shared Spark session)."""
    definitions = importlib.import_module(module)
    with dg.DagsterInstance.get() as instance:
        return dg.materialize([getattr(definitions, asset)], partition_key=partition_key,
                              resources=definitions.defs.resources, instance=instance, raise_on_error=False)


def test_plan_adds_the_due_id_range_to_the_instance_and_prints_the_command_that_runs_it(
        spark, project, source_url, sqlite_url):
    add_customers(source_url, "ann", "bob", "cid")

    first = plan("customers_by_id")

    assert first.exit_code == 0, first.output
    assert first.stdout.splitlines() == [
        f"dagster asset materialize -m {project} --select customers_by_id --partition id:0-3"]
    with dg.DagsterInstance.get() as instance:
        assert instance.get_dynamic_partitions("customers_by_id_ranges") == ["id:0-3"]
    assert materialize(project, "customers_by_id", "id:0-3").success
    assert JobLog(database.connect(sqlite_url)).get_range("customers_by_id", "0").status == "SUCCESS"

    nothing = plan("customers_by_id")
    assert (nothing.exit_code, nothing.stdout) == (0, "")
    assert "customers_by_id: no range is due" in nothing.stderr

    add_customers(source_url, "dan")
    second = plan("customers_by_id", "--definitions", project)
    assert second.stdout.splitlines() == [
        f"dagster asset materialize -m {project} --select customers_by_id --partition id:3-4"]
    with dg.DagsterInstance.get() as instance:
        assert instance.get_dynamic_partitions("customers_by_id_ranges") == ["id:0-3", "id:3-4"]


def test_plan_loads_definitions_a_decorated_function_returns_as_a_components_project_has_them(
        project, source_url, tmp_path):
    """A components project's `definitions.py` holds a `@dg.definitions` function, not a
    Definitions object: the command loads what it returns."""
    path = tmp_path / "project" / f"{project}.py"
    path.write_text(path.read_text().replace("defs = dg.Definitions(", "@dg.definitions\ndef defs():\n"
                                                                        "    return dg.Definitions("))
    add_customers(source_url, "ann", "bob")

    planned = plan("customers_by_id")

    assert planned.exit_code == 0, planned.output
    assert planned.stdout.splitlines() == [
        f"dagster asset materialize -m {project} --select customers_by_id --partition id:0-2"]


def test_plan_prints_the_closed_windows_of_a_time_window_asset_in_order(project, source_url):
    add_customers(source_url, "ann")

    result = plan("daily_customers", "-n", "2")

    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [
        f"dagster asset materialize -m {project} --select daily_customers --partition 2022-01-01",
        f"dagster asset materialize -m {project} --select daily_customers --partition 2022-01-02",
    ]
    assert "time-window partitions; run them in this order, each waits for the one before (first 2)" in (
        result.stderr)


def test_a_range_that_is_not_next_fails_saying_how_ranges_are_added(spark, project, source_url):
    add_customers(source_url, "ann", "bob", "cid")
    with dg.DagsterInstance.get() as instance:
        instance.add_dynamic_partitions("customers_by_id_ranges", ["id:2-3"])  # by hand, skipping 0-2

    result = materialize(project, "customers_by_id", "id:2-3")

    assert not result.success
    [failure] = [e for e in result.all_events if e.is_step_failure]
    message = failure.step_failure_data.error.message
    assert "range '2' is not the next range (next is '0')" in message
    assert "offset-assets ranges plan customers_by_id" in message


def test_plan_names_what_is_missing_in_one_line(project, monkeypatch, tmp_path):
    unknown = plan("nope")
    assert unknown.exit_code == 1
    assert unknown.stderr.strip() == (
        f"error: 'nope' is not an ingestion asset of '{project}' "
        "(ingestion assets: customers_by_id, daily_customers)")
    assert "not an ingestion asset" in plan("not_ingested").stderr

    missing_module = plan("customers_by_id", "--definitions", "no_such_module_here")
    assert missing_module.stderr.strip() == (
        "error: cannot load Definitions module 'no_such_module_here': "
        "ModuleNotFoundError: No module named 'no_such_module_here'")

    conflicting = CliRunner().invoke(main, ["--db-url", f"sqlite:///{tmp_path}/other.db",
                                            "ranges", "plan", "customers_by_id"])
    assert conflicting.exit_code == 1
    assert "is not the control plane of the Definitions' 'offset_store' resource" in conflicting.stderr

    monkeypatch.delenv("DAGSTER_HOME")
    no_home = plan("customers_by_id")
    assert no_home.exit_code == 1
    assert no_home.stderr.startswith("error: DAGSTER_HOME is not set")

    monkeypatch.chdir(tmp_path)
    no_module = plan("customers_by_id")
    assert no_module.stderr.strip() == (
        "error: no Definitions module: pass --definitions MODULE, or run where a pyproject.toml "
        f"has [tool.dagster] module_name (looked in {tmp_path / 'pyproject.toml'})")
