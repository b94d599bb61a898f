"""The root command group, the control plane every command acts on, and how every command
turns errors into one clear line.

No command creates a control plane; pipeline runs do (`connect` from the engine and the
Dagster resources creates and migrates it on the first run). Every command reads or
changes what runs recorded: `offsets`, `metrics`, `deltas` and `jobs` read; `rescan`,
`reset`, `reprocess` and `init-offsets` change the offsets of a transformation that ran;
`compact` and `cleanup` rewrite tables a run registered. On a new, empty control plane
none has anything to act on, so a command run where there is none (outside the project
folder, a mistyped path) says where it looked and exits 1, instead of creating an empty
SQLite file and reporting "no offsets" as if nothing had run. An existing control plane
of an older revision is still migrated to head, as any use of the library does.

`ranges plan` is the exception: it plans an ingestion asset's ranges on the control plane
of the project's Definitions, as their sensor does on its first tick, so that the very
first range can be launched from a shell.
"""

from __future__ import annotations

import functools
import importlib
import importlib.abc
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import click

from offset_assets.config import ENV_DB_URL, default_db_url
from offset_assets.control_plane.database import ControlPlane, ControlPlaneNotFoundError, connect
from offset_assets.errors import OffsetAssetsError

# ctx.obj's key saying the command runs in the console script's own process (`run`).
OWN_PROCESS = "own_process"

# Each command's module, imported when the command runs (or `--help` lists them all): a
# query from a shell does not pay for the imports of the commands it does not run.
COMMAND_MODULES = {
    "class-archive": "class_archive", "deltas": "deltas", "init-offsets": "init_offsets", "jobs": "jobs",
    "compact": "maintenance", "cleanup": "maintenance", "offsets": "offsets", "rescan": "offsets",
    "reset": "offsets", "reprocess": "offsets", "metrics": "offsets", "ranges": "ranges", "show": "reading",
    "sql": "reading", "revert": "revert",
}


class CommandsByModule(click.Group):
    """The root group: a command's module is imported when the command is asked for; the
    module registers its commands on `main` as it is imported."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(COMMAND_MODULES) | set(self.commands))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in COMMAND_MODULES:
            importlib.import_module(f"offset_assets.cli.{COMMAND_MODULES[cmd_name]}")
        return super().get_command(ctx, cmd_name)


@click.group(cls=CommandsByModule, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--db-url",
    envvar=ENV_DB_URL,
    default=None,
    help="Control-plane database URL (default: control_plane.db in ./state or $OFFSET_ASSETS_HOME; "
    "the CLI never creates it).",
)
@click.pass_context
def main(ctx: click.Context, db_url: str | None) -> None:
    """offset-assets: incremental Dagster + Spark pipelines, operated from the shell."""
    own_process = bool(ctx.obj and ctx.obj.get(OWN_PROCESS))
    ctx.obj = {"db_url": db_url or default_db_url(), "db_url_is_default": not db_url, OWN_PROCESS: own_process}


def run() -> None:
    """The `offset-assets` console script: `main` in a process of its own, whose reads
    without a JVM may keep pandas out (`pandas_kept_out`)."""
    main(prog_name="offset-assets", obj={OWN_PROCESS: True})


class _RefusePandas(importlib.abc.MetaPathFinder):
    def find_spec(self, name: str, path: Any, target: Any = None) -> None:
        if name == "pandas" or name.startswith("pandas."):
            raise ImportError(f"{name}: not imported by a read without a JVM (offset_assets.cli.base.pandas_kept_out)")


@contextmanager
def pandas_kept_out(obj: dict[str, Any]) -> Iterator[None]:
    """A read without a JVM in the command's own process, pandas kept from importing.

    pyarrow imports pandas at its first conversion of a Python value, only to tell pandas
    objects apart: 0.3 s of the 2 s a query from a shell takes (docs/benchmark.md). The
    command's reads hold no pandas object, so the block keeps pandas out and pyarrow takes
    it for absent in those checks from then on, which nothing the command does later
    needs (a read through Spark after the block imports pandas as it always does). Only
    in the process of the console script (`run`): a process that imports the command
    (`CliRunner`, a notebook) keeps pyarrow's checks whole."""
    if not obj.get(OWN_PROCESS) or "pandas" in sys.modules:
        yield
        return
    refuse = _RefusePandas()
    sys.meta_path.insert(0, refuse)
    try:
        yield
    finally:
        sys.meta_path.remove(refuse)


def open_control_plane(obj: dict[str, Any]) -> ControlPlane:
    """The existing control plane the command acts on; never created (see above)."""
    return connect(obj["db_url"], create=False)


def clear_errors(func: Callable[..., Any]) -> Callable[..., Any]:
    """Print `error: <message>` and exit 1 for every error raised on purpose; no traceback."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except ControlPlaneNotFoundError as exc:
            click.echo(f"error: {exc}{_where_the_cli_looked()}; the CLI creates none, "
                       "a pipeline's first run does", err=True)
            sys.exit(1)
        except OffsetAssetsError as exc:
            click.echo(f"error: {exc}", err=True)
            sys.exit(1)

    return wrapper


def _where_the_cli_looked() -> str:
    context = click.get_current_context(silent=True)
    if context is None or not (context.obj or {}).get("db_url_is_default"):
        return ""
    return f" (the default path, as neither --db-url nor {ENV_DB_URL} names one)"
