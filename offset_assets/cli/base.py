"""The root command group and how every command turns errors into one clear line."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any

import click

from offset_assets.config import default_db_url
from offset_assets.errors import OffsetAssetsError


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--db-url",
    envvar="OFFSET_ASSETS_DB_URL",
    default=None,
    help="Control-plane database URL (default: SQLite file in ./state).",
)
@click.pass_context
def main(ctx: click.Context, db_url: str | None) -> None:
    """offset-assets: incremental Dagster + Spark pipelines, operated from the shell."""
    ctx.obj = {"db_url": db_url or default_db_url()}


def clear_errors(func: Callable[..., Any]) -> Callable[..., Any]:
    """Print `error: <message>` and exit 1 for every error raised on purpose; no traceback."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except OffsetAssetsError as exc:
            click.echo(f"error: {exc}", err=True)
            sys.exit(1)

    return wrapper
