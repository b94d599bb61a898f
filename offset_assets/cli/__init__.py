"""The `offset-assets` command line: one module per command group, registered here."""

from __future__ import annotations

from offset_assets.cli.base import main

__all__ = ["main"]

# Command modules register themselves on `main` when imported.
from offset_assets.cli import class_archive as _class_archive  # noqa: E402,F401
from offset_assets.cli import deltas as _deltas  # noqa: E402,F401
from offset_assets.cli import init_offsets as _init_offsets  # noqa: E402,F401
from offset_assets.cli import jobs as _jobs  # noqa: E402,F401
from offset_assets.cli import maintenance as _maintenance  # noqa: E402,F401
from offset_assets.cli import offsets as _offsets  # noqa: E402,F401
from offset_assets.cli import ranges as _ranges  # noqa: E402,F401
from offset_assets.cli import reading as _reading  # noqa: E402,F401
from offset_assets.cli import revert as _revert  # noqa: E402,F401
