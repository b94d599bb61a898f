"""Asset checks: how far each transformation's offsets lag behind its inputs.

Per incremental asset, `offset_age` (seconds since each input's offset last advanced:
WARN from one hour, ERROR from a day) and `offset_backlog` (committed input versions
beyond the offsets: WARN above zero, ERROR once the oldest has waited 30 minutes, far
beyond what automation takes to start a run). Both read the control plane only, so
they run after every materialization and on their own schedule (`offset_checks`, every
15 minutes) without starting Spark: a backlog nothing picks up turns the asset red.
"""

from assets_defs.assets.transformations import TRANSFORMATIONS
from offset_assets.dagster_adapter import build_offset_checks

OFFSET_AGE_WARN_S = 3600.0
OFFSET_AGE_ERROR_S = 86400.0
BACKLOG_ERROR_AFTER_S = 1800.0

OFFSET_CHECKS = build_offset_checks(
    TRANSFORMATIONS,
    warn_after_s=OFFSET_AGE_WARN_S,
    error_after_s=OFFSET_AGE_ERROR_S,
    max_backlog_versions=0,
    error_backlog_age_s=BACKLOG_ERROR_AFTER_S,
)
