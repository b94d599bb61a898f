"""The code location: every component under `defs/`, checked as a whole when it loads."""

from pathlib import Path

import dagster as dg

from offset_assets.dagster_adapter import validate_definitions


@dg.definitions
def defs() -> dg.Definitions:
    return validate_definitions(dg.load_from_defs_folder(path_within_project=Path(__file__).parent))
