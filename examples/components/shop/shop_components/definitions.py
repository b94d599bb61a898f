"""The code location: every component under `defs/`, checked as a whole when it loads; a
component's mistake is one line naming its file and key (`load_defs_folder`)."""

from pathlib import Path

import dagster as dg

from offset_assets.dagster_adapter import load_defs_folder


@dg.definitions
def defs() -> dg.Definitions:
    return load_defs_folder(Path(__file__).parent)
