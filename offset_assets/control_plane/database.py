"""Connections to the control-plane database, and bringing its schema to head.

One `ControlPlane` per URL and process: it owns the SQLAlchemy engine and runs the
Alembic migrations once, the first time the URL is used. SQLite write transactions
start with BEGIN IMMEDIATE so concurrent writers queue on the database lock instead of
failing on a lock upgrade half-way through a transaction.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, NoSuchModuleError

from offset_assets.errors import ControlPlaneUnavailableError

MIGRATIONS_DIR = Path(__file__).parent / "migrations"
VERSION_TABLE = "offset_assets_alembic_version"
SQLITE_BUSY_TIMEOUT_S = 60


def mask_url(url: str) -> str:
    """The URL with its password hidden, for messages and logs."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return url.split("@")[-1] if "@" in url else url


def _create_engine(url: str) -> Engine:
    try:
        parsed = make_url(url)
    except ArgumentError as exc:
        raise ControlPlaneUnavailableError(f"malformed control-plane URL {mask_url(url)!r}: {exc}") from None
    try:
        if parsed.get_backend_name() == "sqlite":
            if parsed.database and parsed.database != ":memory:":
                Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
            engine = create_engine(
                parsed,
                connect_args={"timeout": SQLITE_BUSY_TIMEOUT_S, "isolation_level": None},
            )
            _make_sqlite_transactional(engine)
            return engine
        if parsed.drivername in ("postgresql", "postgres"):
            # SQLAlchemy 2.1 defaults to psycopg 3; the project ships psycopg2.
            parsed = parsed.set(drivername="postgresql+psycopg2")
        return create_engine(parsed, pool_pre_ping=True)
    except (NoSuchModuleError, ArgumentError, ImportError) as exc:
        raise ControlPlaneUnavailableError(f"unsupported control-plane URL {mask_url(url)!r}: {exc}") from None


def _make_sqlite_transactional(engine: Engine) -> None:
    # pysqlite's own transaction handling is disabled (isolation_level=None) and
    # replaced by explicit BEGIN IMMEDIATE: the SQLAlchemy-documented recipe.
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection, _record):  # noqa: ANN001
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_S * 1000}")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn):  # noqa: ANN001
        conn.exec_driver_sql("BEGIN IMMEDIATE")


class ControlPlane:
    """The control-plane database at one URL, migrated to the head revision."""

    def __init__(self, url: str, engine: Engine) -> None:
        self.url = url
        self.engine = engine

    @property
    def masked_url(self) -> str:
        return mask_url(self.url)

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    @contextmanager
    def begin(self) -> Iterator[Connection]:
        """One transaction: committed when the block ends, rolled back on any error."""
        try:
            with self.engine.begin() as conn:
                yield conn
        except DBAPIError as exc:
            if exc.connection_invalidated or _is_connect_error(exc):
                raise ControlPlaneUnavailableError(
                    f"cannot reach control-plane database {self.masked_url}: {_first_line(exc)}"
                ) from None
            raise

    @contextmanager
    def within(self, conn: Connection | None) -> Iterator[Connection]:
        """The caller's transaction when it passes one (so its writes commit with the
        caller's), else a transaction of its own."""
        if conn is not None:
            yield conn
        else:
            with self.begin() as own:
                yield own

    def dispose(self) -> None:
        self.engine.dispose()


_instances: dict[str, ControlPlane] = {}
_instances_lock = threading.Lock()


def connect(url: str) -> ControlPlane:
    """The process-wide `ControlPlane` for `url`, created and migrated on first use."""
    with _instances_lock:
        plane = _instances.get(url)
        if plane is None:
            plane = ControlPlane(url, _create_engine(url))
            upgrade_to_head(plane)
            _instances[url] = plane
        return plane


def forget(url: str) -> None:
    """Drop the cached `ControlPlane` of `url` (tests that delete databases use this)."""
    with _instances_lock:
        plane = _instances.pop(url, None)
    if plane is not None:
        plane.dispose()


def alembic_config(plane: ControlPlane) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.set_main_option("version_table", VERSION_TABLE)
    config.attributes["engine"] = plane.engine
    return config


def upgrade_to_head(plane: ControlPlane, revision: str = "head") -> None:
    """Create or upgrade the control-plane schema through the shipped migrations."""
    try:
        command.upgrade(alembic_config(plane), revision)
    except DBAPIError as exc:
        if _is_connect_error(exc):
            raise ControlPlaneUnavailableError(
                f"cannot reach control-plane database {plane.masked_url}: {_first_line(exc)}"
            ) from None
        raise


def _is_connect_error(exc: DBAPIError) -> bool:
    text = str(exc.orig).lower()
    markers = ("could not connect", "connection refused", "unable to open database",
               "could not translate host", "connection to server", "timeout expired",
               "does not exist", "password authentication failed", "no such host")
    return any(marker in text for marker in markers)


def _first_line(exc: BaseException) -> str:
    orig = getattr(exc, "orig", None) or exc
    return str(orig).strip().splitlines()[0] if str(orig).strip() else type(orig).__name__
