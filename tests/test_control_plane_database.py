import pickle
import socket
import sqlite3

import pytest
import sqlalchemy as sa

from offset_assets.control_plane import ControlPlaneNotFoundError, ControlPlaneURLError, connect, database
from offset_assets.errors import ControlPlaneUnavailableError


def test_fresh_database_is_brought_to_head(db_url):
    plane = connect(db_url)
    tables = set(sa.inspect(plane.engine).get_table_names())
    assert {"transform_input_offset", "table_delta", "commit_clock", "run_lease"} <= tables
    with plane.begin() as conn:
        assert conn.execute(sa.text("SELECT last_commit_ts FROM commit_clock")).scalar_one() == 0


# --- what `connect` raises: the error the CLI and the Dagster resources share ------------


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.parametrize(
    ("url", "kind", "masked", "cause"),
    [
        ("postgresql://u:s3cret@localhost:abc/db", ControlPlaneURLError,
         "postgresql://u:***@localhost:abc/db", "the port is not a number"),
        ("postgresql://u:s3cret@[::1/db", ControlPlaneURLError,
         "postgresql://u:***@[::1/db", "the port is not a number"),
        ("postgresql://u:s3cret@localhost:99999/db", ControlPlaneUnavailableError,
         "postgresql://u:***@localhost:99999/db", 'invalid port number: "99999"'),
        ("postgresql://u:s3cret@127.0.0.1:{port}/db?sslmode=bogus", ControlPlaneUnavailableError,
         "postgresql://u:***@127.0.0.1:{port}/db?sslmode=bogus", 'invalid sslmode value: "bogus"'),
        ("postgresql://u:s3cret@127.0.0.1:{port}/db", ControlPlaneUnavailableError,
         "postgresql://u:***@127.0.0.1:{port}/db", 'connection to server at "127.0.0.1", port {port} failed'),
        ("sqlite:////proc/1/nonexistent/x.db", ControlPlaneUnavailableError,
         "sqlite:////proc/1/nonexistent/x.db", "No such file or directory: '/proc/1/nonexistent'"),
    ],
    ids=["port not a number", "unclosed IPv6 host", "port out of range", "unknown sslmode", "closed port",
         "SQLite under a missing folder"],
)
def test_connect_raises_control_plane_unavailable_naming_the_masked_url_and_the_cause(url, kind, masked, cause):
    port = closed_port()
    with pytest.raises(ControlPlaneUnavailableError) as failed:
        connect(url.format(port=port))

    error = failed.value
    assert type(error) is kind
    assert error.url == masked.format(port=port)
    assert cause.format(port=port) in error.cause
    assert error.url in str(error) and error.cause in str(error)
    assert "\n" not in str(error) and "s3cret" not in str(error)
    assert str(pickle.loads(pickle.dumps(error))) == str(error)


def test_connect_without_create_refuses_a_missing_sqlite_file_and_creates_nothing(tmp_path):
    url = f"sqlite:///{tmp_path}/state/control_plane.db"

    with pytest.raises(ControlPlaneNotFoundError) as failed:
        connect(url, create=False)

    assert str(failed.value) == f"no control plane at {url}: the file does not exist"
    assert list(tmp_path.iterdir()) == []


@pytest.fixture
def database_without_control_plane(db_url) -> str:
    """`db_url` with its database created (an empty SQLite file, an empty PostgreSQL
    database) but no control plane in it."""
    if db_url.startswith("sqlite"):
        sqlite3.connect(db_url.removeprefix("sqlite:///")).close()
    return db_url


def test_connect_without_create_refuses_a_database_without_the_control_plane_tables(
    database_without_control_plane,
):
    url = database_without_control_plane

    with pytest.raises(ControlPlaneNotFoundError, match="the database has no offset_assets_alembic_version table"):
        connect(url, create=False)

    engine = sa.create_engine(url)
    assert sa.inspect(engine).get_table_names() == []
    engine.dispose()


def test_connect_without_create_opens_a_control_plane_a_run_created(db_url):
    connect(db_url)
    database.forget(db_url)

    plane = connect(db_url, create=False)

    assert "transform_input_offset" in sa.inspect(plane.engine).get_table_names()
