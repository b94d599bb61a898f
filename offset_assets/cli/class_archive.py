"""`offset-assets class-archive`: build the archive of Spark's classes that every Spark
driver of this installation starts with (`offset_assets.class_archive`)."""

from __future__ import annotations

from pathlib import Path

import click

from offset_assets.class_archive import ENV_CLASS_ARCHIVE, configured_class_archive
from offset_assets.cli.base import clear_errors, main
from offset_assets.startup.class_archive_build import build_class_archive


@main.command("class-archive")
@click.option("--path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help=f"Where to write it (default: ${ENV_CLASS_ARCHIVE}, else inside the Python environment).")
@click.option("--if-missing", is_flag=True, help="Do nothing when the archive is there already.")
@clear_errors
def class_archive(path: Path | None, if_missing: bool) -> None:
    """Build the archive of Spark's classes (about 40 s): Spark drivers then start faster."""
    path = path or configured_class_archive()
    if path is None:
        raise click.UsageError(f"{ENV_CLASS_ARCHIVE} turns the class archive off: name a --path to build one")
    if if_missing and path.is_file():
        click.echo(f"class archive {path}: there already")
        return
    click.echo(f"building the class archive {path} (a local Spark driver runs a throwaway story) ...")
    seconds = build_class_archive(path)
    click.echo(f"class archive {path}: {path.stat().st_size / 2**20:.0f} MB in {seconds:.0f} s")
