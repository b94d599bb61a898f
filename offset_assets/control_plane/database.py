"""Connections to the control-plane database, and bringing its schema to head.

One `ControlPlane` per URL and process: it owns the SQLAlchemy engine and runs the
Alembic migrations once, the first time the URL is used. SQLite write transactions
start with BEGIN IMMEDIATE so concurrent writers queue on the database lock instead of
failing on a lock upgrade half-way through a transaction.
"""

from __future__ import annotations

import functools
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import unquote

from sqlalchemy import URL, Connection, Engine, create_engine, event, inspect, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, NoSuchModuleError, SQLAlchemyError

from offset_assets.errors import ControlPlaneUnavailableError

if TYPE_CHECKING:
    from alembic.config import Config

MIGRATIONS_DIR = Path(__file__).parent / "migrations"
VERSION_TABLE = "offset_assets_alembic_version"
SQLITE_BUSY_TIMEOUT_S = 60

# `scheme://user:` then everything up to the last `@`: the password of a URL that does
# not parse. Greedy, so an unescaped `@` inside the password is hidden too.
_USER_PASSWORD = re.compile(r"^([^:/?#]*://[^:@/?#]*:)(.*)@")
_QUERY_PASSWORD = re.compile(r"([?&]password=)([^&]*)", re.IGNORECASE)


class ControlPlaneURLError(ControlPlaneUnavailableError):
    """The control-plane URL does not parse, or names a database SQLAlchemy cannot load."""

    def __str__(self) -> str:
        return f"{self.problem} {self.url!r}: {self.cause}"


class ControlPlaneNotFoundError(ControlPlaneUnavailableError):
    """No control plane at the URL (no SQLite file, or a database without the
    control-plane tables), and the caller asked for an existing one."""


def sqlalchemy_url(url: str) -> URL:
    """`url` parsed, with the driver offset-assets connects through: the one rule for every
    URL handed to it (a control plane, a SQL source, the CLI's `--db-url`).

    PostgreSQL goes through psycopg2 whether the URL names no driver (`postgresql://`,
    `postgres://`) or names it (`postgresql+psycopg2://`): SQLAlchemy 2.1 would give the
    plain scheme psycopg 3. A URL naming another driver keeps it. Raises what
    `sqlalchemy.engine.make_url` raises for a URL that does not parse."""
    parsed = make_url(url)
    if parsed.drivername in ("postgresql", "postgres"):
        return parsed.set(drivername="postgresql+psycopg2")
    return parsed


def _parse(url: str) -> URL | None:
    """`url` parsed; None when it does not parse or its password holds an unescaped `@`
    (SQLAlchemy then reads the rest of the password as the host)."""
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError):
        return None
    return None if "@" in (parsed.host or "") else parsed


def mask_url(url: str) -> str:
    """The URL with its password hidden, for messages and logs.

    Hides the password of the user part and of a `password` query parameter. A URL that
    does not parse is masked from the user's `:` to its last `@`: the message may hide
    too much, never the password."""
    parsed = _parse(url)
    if parsed is not None:
        masked = parsed.render_as_string(hide_password=True)
    else:
        masked = _USER_PASSWORD.sub(r"\1***@", url)
    return _QUERY_PASSWORD.sub(r"\1***", masked)


def _passwords(url: str) -> set[str]:
    """The passwords written in `url`, as written and decoded, to strip from a driver's message."""
    parsed = _parse(url)
    if parsed is not None:
        found = {parsed.password or ""}
    else:
        user_part = _USER_PASSWORD.match(url)
        found = {user_part.group(2)} if user_part else set()
    found |= {match.group(2) for match in _QUERY_PASSWORD.finditer(url)}
    found |= {unquote(password) for password in found}
    return {password for password in found if password}


def _failure(
    kind: type[ControlPlaneUnavailableError], problem: str, url: str, exc: BaseException
) -> ControlPlaneUnavailableError:
    """`kind` naming the masked URL and the first line of `exc`, any password removed."""
    cause = _first_line(exc)
    for password in _passwords(url):
        cause = cause.replace(password, "***")
    return kind(problem, mask_url(url), cause)


def _create_engine(url: str, *, create: bool) -> Engine:
    try:
        parsed = sqlalchemy_url(url)
    except ArgumentError as exc:
        raise _failure(ControlPlaneURLError, "malformed control-plane URL", url, exc) from None
    except ValueError as exc:
        # SQLAlchemy's one ValueError here is int() of the port (`:abc`, an unclosed `[::1`).
        port = ValueError(f"the port is not a number ({exc})")
        raise _failure(ControlPlaneURLError, "malformed control-plane URL", url, port) from None
    if "@" in (parsed.host or ""):
        # Read as user `u`, password `p`, host `ss@h`: the driver would echo part of the password.
        raise ControlPlaneURLError(
            "malformed control-plane URL", mask_url(url), "an '@' in the password must be written %40"
        )
    try:
        if parsed.get_backend_name() == "sqlite":
            return _create_sqlite_engine(url, parsed, create=create)
        return create_engine(parsed, pool_pre_ping=True)
    except (NoSuchModuleError, ArgumentError, ImportError) as exc:
        raise _failure(ControlPlaneURLError, "unsupported control-plane URL", url, exc) from None


def _create_sqlite_engine(url: str, parsed: URL, *, create: bool) -> Engine:
    path = _sqlite_file(parsed)
    try:
        if path is not None and create:
            path.parent.mkdir(parents=True, exist_ok=True)
        elif path is not None and not path.exists():
            # Checked before the engine exists: SQLite creates the file on connecting.
            # A relative path is resolved against the working folder: say which file.
            missing = "the file" if path.is_absolute() else f"the file {path.resolve()}"
            raise ControlPlaneNotFoundError("no control plane at", mask_url(url), f"{missing} does not exist")
    except OSError as exc:
        problem = "cannot create control-plane database" if create else "cannot reach control-plane database"
        raise _failure(ControlPlaneUnavailableError, problem, url, exc) from None
    engine = create_engine(
        parsed,
        connect_args={"timeout": SQLITE_BUSY_TIMEOUT_S, "isolation_level": None},
    )
    _make_sqlite_transactional(engine)
    return engine


def _sqlite_file(parsed: URL) -> Path | None:
    """The file of a SQLite URL; None for an in-memory database or a `file:` URI
    (`?uri=true`), whose path SQLite resolves itself."""
    if not parsed.database or parsed.database == ":memory:" or parsed.query.get("uri"):
        return None
    return Path(parsed.database)


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
                raise _failure(
                    ControlPlaneUnavailableError, "cannot reach control-plane database", self.url, exc
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


def connect(url: str, *, create: bool = True) -> ControlPlane:
    """The process-wide `ControlPlane` for `url`, created and migrated on first use.

    With `create=False` (callers that only act on an existing control plane, such as
    the CLI) nothing is created: where there is none, no SQLite file or a database
    without the control-plane tables, `ControlPlaneNotFoundError` is raised. An existing
    control plane of an older revision is still migrated to head.

    A URL that does not parse or that the driver refuses, and a database that cannot be
    reached, raise `ControlPlaneUnavailableError` (or a subclass) naming the URL with its
    password masked and the cause.
    """
    with _instances_lock:
        plane = _instances.get(url)
        if plane is None:
            plane = ControlPlane(url, _create_engine(url, create=create))
            try:
                at_head = _open_first_connection(plane, require_schema=not create)
                if not at_head:
                    upgrade_to_head(plane)
            except BaseException:
                plane.dispose()
                raise
            _instances[url] = plane
        return plane


def _open_first_connection(plane: ControlPlane, *, require_schema: bool) -> bool:
    """One connection before anything else, so that whatever the driver refuses (a port
    out of range, an unknown `sslmode`, a server that is not there, a file that is not
    a database) fails here as one error, not half-way through a migration. Whether the
    schema is already at the shipped head: then no migration runs, and Alembic, about
    half a second of a shell command's start, is not imported."""
    try:
        with plane.engine.connect() as conn:
            has_schema = inspect(conn).has_table(VERSION_TABLE)
            stored = conn.execute(text(f"SELECT version_num FROM {VERSION_TABLE}")).scalars().all() if has_schema \
                else []
    except (SQLAlchemyError, OSError, ValueError, TypeError) as exc:
        # TypeError and ValueError: connect arguments from the URL's query the driver refuses.
        raise _failure(ControlPlaneUnavailableError, "cannot reach control-plane database", plane.url, exc) from None
    if require_schema and not has_schema:
        raise ControlPlaneNotFoundError(
            "no control plane at", plane.masked_url, f"the database has no {VERSION_TABLE} table"
        )
    return stored == [head_revision()]


@functools.cache
def head_revision() -> str | None:
    """The newest revision the package ships: the one no other revision names as its
    `down_revision` (None if the files do not make one line of revisions)."""
    revisions, parents = set(), set()
    for path in (MIGRATIONS_DIR / "versions").glob("*.py"):
        source = path.read_text()
        revision = re.search(r'^revision = "([^"]+)"', source, re.MULTILINE)
        down = re.search(r'^down_revision = "([^"]+)"', source, re.MULTILINE)
        revisions.update([revision.group(1)] if revision else [])
        parents.update([down.group(1)] if down else [])
    heads = revisions - parents
    return heads.pop() if len(heads) == 1 else None


def forget(url: str) -> None:
    """Drop the cached `ControlPlane` of `url` (tests that delete databases use this)."""
    with _instances_lock:
        plane = _instances.pop(url, None)
    if plane is not None:
        plane.dispose()


def alembic_config(plane: ControlPlane) -> Config:
    from alembic.config import Config  # here, not at the top: see `upgrade_to_head`

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.set_main_option("version_table", VERSION_TABLE)
    config.attributes["engine"] = plane.engine
    return config


def upgrade_to_head(plane: ControlPlane, revision: str = "head") -> None:
    """Create or upgrade the control-plane schema through the shipped migrations.

    Alembic is imported here, not with this module: executors' Python workers import the
    module (a source's URL is masked in their errors) and never migrate."""
    from alembic import command

    try:
        command.upgrade(alembic_config(plane), revision)
    except DBAPIError as exc:
        if _is_connect_error(exc):
            raise _failure(
                ControlPlaneUnavailableError, "cannot reach control-plane database", plane.url, exc
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
