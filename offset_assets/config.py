"""Embedded defaults and the environment variables that override them.

Everything has a safe local default so that `make demo` needs no set-up: a state folder
in the working directory holding the SQLite control plane and the Parquet warehouse.
Production points the same variables at PostgreSQL, a Hadoop file system and a cluster
(a `spark.master`, or a Spark Connect server).
"""

from __future__ import annotations

import os
from pathlib import Path

from offset_assets.errors import SettingError

ENV_HOME = "OFFSET_ASSETS_HOME"
ENV_DB_URL = "OFFSET_ASSETS_DB_URL"
ENV_WAREHOUSE = "OFFSET_ASSETS_WAREHOUSE"
ENV_SPARK_MASTER = "OFFSET_ASSETS_SPARK_MASTER"
ENV_SPARK_REMOTE = "OFFSET_ASSETS_SPARK_REMOTE"
ENV_EXECUTOR = "OFFSET_ASSETS_EXECUTOR"
EXECUTORS = ("in_process", "multiprocess")


def state_path() -> Path:
    """Where the local state folder is (`OFFSET_ASSETS_HOME`, else ./state), not created."""
    return Path(os.environ.get(ENV_HOME, "state")).resolve()


def state_dir() -> Path:
    """Local folder for embedded state (SQLite file, warehouse); created on demand."""
    path = state_path()
    path.mkdir(parents=True, exist_ok=True)
    return path


def default_db_url() -> str:
    """Control-plane URL: `OFFSET_ASSETS_DB_URL`, else a SQLite file in the state folder.

    Naming the URL creates nothing: `connect` creates the file and its folder when it
    creates the control plane, and the CLI, which never does, can look without creating."""
    url = os.environ.get(ENV_DB_URL)
    if url:
        return url
    return f"sqlite:///{state_path() / 'control_plane.db'}"


def default_warehouse() -> str:
    """Warehouse root: `OFFSET_ASSETS_WAREHOUSE` (any Hadoop URI), else a local folder."""
    root = os.environ.get(ENV_WAREHOUSE)
    if root:
        return root.rstrip("/")
    return str(state_dir() / "warehouse")


def default_spark_master() -> str:
    """`spark.master` of a session the library starts: `OFFSET_ASSETS_SPARK_MASTER`, else `local[*]`."""
    return os.environ.get(ENV_SPARK_MASTER, "local[*]")


def default_spark_remote() -> str | None:
    """Spark Connect endpoint (`sc://host:15002`): `OFFSET_ASSETS_SPARK_REMOTE`, else none
    (the library then starts its own driver with `default_spark_master()`)."""
    return os.environ.get(ENV_SPARK_REMOTE) or None


def default_executor() -> str:
    """How a Dagster run executes its steps: `OFFSET_ASSETS_EXECUTOR` (`in_process` or
    `multiprocess`), else `multiprocess` with a cluster master and `in_process` otherwise.

    A step process costs seconds of imports before it does anything, and with a local
    master a driver JVM too; a Spark Connect client attaches in about a second, so a run's
    steps share one process and one session. With a cluster master each step's light
    driver gets its own executors and independent steps run in parallel."""
    chosen = os.environ.get(ENV_EXECUTOR)
    if chosen:
        if chosen not in EXECUTORS:
            raise SettingError(f"{ENV_EXECUTOR}={chosen!r} is not one of {', '.join(EXECUTORS)}")
        return chosen
    if default_spark_remote() is None and not default_spark_master().startswith("local"):
        return "multiprocess"
    return "in_process"
