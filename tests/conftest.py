"""Shared fixtures: one Spark session per test session, a throwaway PostgreSQL server,
and a fresh control-plane database per test on each backend."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from offset_assets.control_plane import database
from tests.postgres_server import PostgresServer

# The ingestion tests' `source_url` fixture (a SQLite `customers` table); the Spark cluster and
# Connect server fixtures (started only by the tests that ask for them).
pytest_plugins = ["tests.customers_source", "tests.spark_cluster"]

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


@pytest.fixture(scope="session")
def spark():
    from offset_assets.spark import LOCAL_TEST_CONF, get_spark_session

    session = get_spark_session(master="local[2]", app_name="offset-assets-tests", conf=LOCAL_TEST_CONF)
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


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
