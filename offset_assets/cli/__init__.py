"""The `offset-assets` command line: one module per command group, each imported when its
command runs (`base.COMMAND_MODULES`)."""

from __future__ import annotations

from offset_assets.cli.base import main, run

__all__ = ["main", "run"]
