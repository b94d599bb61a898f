"""Shared fixtures: one Spark session per test session (per xdist worker), a throwaway
PostgreSQL server per worker, and a fresh control-plane database per test on each backend.

The tiers (docs/testing.md) are named by what a test needs, and these fixtures say it:
`pytest_collection_modifyitems` marks every test by the fixtures it uses, so a new test
lands in its tier by what it asks for, not by a list of files.
"""

from __future__ import annotations

import contextlib
import os
import sys
import uuid
from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from bench.postgres_server import PostgresServer
from offset_assets.control_plane import database

# The ingestion tests' `source_url` fixture (a SQLite `customers` table); the Spark cluster and
# Connect server fixtures (started only by the tests that ask for them); the Kafka broker.
pytest_plugins = ["tests.customers_source", "tests.spark_cluster", "tests.kafka_broker"]

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")

# What a fixture needs, as the marker of every test that uses it (directly or through another fixture).
NEEDS = {
    "spark": "spark",
    "postgres_server": "postgres",
    "spark_cluster": "cluster",
    "connect_server": "connect",
    "kafka_broker": "kafka",
}
# The property test is the exactness guarantee itself: the quick tier runs it with a few
# histories (EXACTNESS_HISTORIES). Matched by name, shards named after it included, so
# that its file needs no tier marker of its own.
PROPERTY_TEST = "tests/test_engine_exactness.py::test_incremental_runs_equal_a_full_recompute_on_every_path"


def pytest_itemcollected(item):
    # Marked as each test is collected: before any pytest_collection_modifyitems, xdist's
    # included, which turns the xdist_group markers into the workers' groups.
    for fixture, marker in NEEDS.items():
        if fixture in item.fixturenames:
            item.add_marker(marker)
    if item.nodeid.startswith(PROPERTY_TEST):
        item.add_marker(pytest.mark.quick)
        item.add_marker(pytest.mark.slow)
    # The cluster's and the Connect server's JVMs are session fixtures: their tests share
    # one xdist worker (`--dist loadgroup`) so that each starts once.
    if item.get_closest_marker("cluster") or item.get_closest_marker("connect"):
        item.add_marker(pytest.mark.xdist_group("jvm_servers"))
    # The demo story is a session fixture too: its readers share a worker, so it runs once.
    elif "demo_story" in item.fixturenames:
        item.add_marker(pytest.mark.xdist_group("demo_story"))


def pytest_collection_modifyitems(config, items):
    if hasattr(config, "workerinput"):
        # Under xdist, the longest tests first: started last, one of them would run alone
        # on one core at the end. A stable sort: every worker collects the same order.
        items.sort(key=lambda item: item.get_closest_marker("slow") is None)


def _spark_is_running() -> bool:
    context = sys.modules.get("pyspark.core.context")  # not imported: no Spark yet
    return context is not None and context.SparkContext._active_spark_context is not None


@pytest.fixture(autouse=True)
def _spark_only_where_asked(request):
    """A test that starts Spark without the `spark` fixture would land in the quick tier
    with a JVM of its own: it fails instead, asking for the fixture."""
    before = _spark_is_running()
    yield
    if not before and _spark_is_running() and not request.node.get_closest_marker("spark"):
        pytest.fail("this test started a Spark session without asking for the `spark` fixture")


@pytest.fixture(autouse=True)
def _spark_conf_restored(request):
    """The shared session's runtime settings as every test found them. A Spark provider
    builds its session with `getOrCreate`, which applies its `spark_config` to the running
    session: the reference project's (adaptive execution on) would otherwise stay for the
    rest of the worker's tests, and the job budgets count jobs under the test settings."""
    if "spark" not in request.fixturenames:
        yield
        return
    with runtime_conf_kept(request.getfixturevalue("spark")):
        yield


@contextlib.contextmanager
def runtime_conf_kept(session) -> Iterator[None]:
    """The session's runtime settings as they were, whatever the block set or unset."""
    conf = session.conf
    before = conf.getAll
    try:
        yield
    finally:
        after = conf.getAll
        for key in after.keys() - before.keys():
            if conf.isModifiable(key):
                conf.unset(key)
        for key, value in before.items():
            if after.get(key) != value and conf.isModifiable(key):
                conf.set(key, value)


@contextlib.contextmanager
def process_time_zone(name: str) -> Iterator[None]:
    """The Python process's local time zone `name` (the JVM's is not touched): where a
    naive datetime that pyspark collects or takes means that zone's local time."""
    import time

    before = os.environ.get("TZ")
    os.environ["TZ"] = name
    time.tzset()
    try:
        yield
    finally:
        if before is None:
            del os.environ["TZ"]
        else:
            os.environ["TZ"] = before
        time.tzset()


@pytest.fixture(scope="session")
def spark():
    from offset_assets.spark import LOCAL_TEST_CONF, get_spark_session

    session = get_spark_session(master="local[2]", app_name="offset-assets-tests", conf=LOCAL_TEST_CONF)
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def local_reference_run(spark, tmp_path_factory) -> dict:
    """The reference story run once in this process (local Spark, SQLite): what its runs
    on the standalone cluster and over Spark Connect must equal, row for row."""
    from tests.reference_story import run_reference_locally

    # A session fixture is set up before any test's own fixtures: it keeps the settings itself.
    with pytest.MonkeyPatch.context() as env, runtime_conf_kept(spark):
        return run_reference_locally(tmp_path_factory.mktemp("reference-local"), env)


@pytest.fixture(scope="session")
def demo_story(spark, tmp_path_factory):
    """`make demo` at a small size, run once in this process (`tests/demo_state.py`):
    the reference project's story test and the webserver test read it."""
    from tests.demo_state import run_demo

    with pytest.MonkeyPatch.context() as env, runtime_conf_kept(spark):
        return run_demo(tmp_path_factory.mktemp("demo"), env)


@pytest.fixture
def demo(demo_story, monkeypatch):
    """The demo story's state, with the environment pointed at it for this test."""
    from offset_assets.config import default_db_url

    demo_story.use(monkeypatch)
    yield demo_story
    database.forget(default_db_url())


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    try:
        server = PostgresServer.start()
    except (FileNotFoundError, OSError) as exc:
        if IN_CI:
            pytest.fail(f"CI=true but PostgreSQL could not be started: {exc}")
        pytest.skip(f"PostgreSQL not available here ({exc}); CI runs these tests")
    except Exception as exc:  # initdb/pg_ctl failed: show their output
        if IN_CI:
            pytest.fail(f"CI=true but PostgreSQL failed to start: {exc} {getattr(exc, 'stderr', '')}")
        pytest.skip(f"PostgreSQL failed to start ({exc} {getattr(exc, 'stderr', '')})")
    yield server
    server.stop()


def new_postgres_database(server: PostgresServer) -> str:
    name = f"t_{uuid.uuid4().hex[:12]}"
    engine = sa.create_engine(server.admin_url, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    engine.dispose()
    return server.url_for(name)


@pytest.fixture
def sqlite_url(tmp_path) -> Iterator[str]:
    url = f"sqlite:///{tmp_path / 'control_plane.db'}"
    yield url
    database.forget(url)


@pytest.fixture
def postgres_url(postgres_server) -> Iterator[str]:
    url = new_postgres_database(postgres_server)
    yield url
    database.forget(url)


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def db_url(request) -> str:
    """A fresh, empty control-plane database URL on each backend."""
    if request.param == "sqlite":
        return request.getfixturevalue("sqlite_url")
    return request.getfixturevalue("postgres_url")


@pytest.fixture
def warehouse(tmp_path) -> str:
    path = tmp_path / "warehouse"
    path.mkdir()
    return str(path)
