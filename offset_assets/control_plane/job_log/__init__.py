"""`job_log` and `step_log`: every data range an ingestion runs, and its steps.

One row per (job_name, data_range_start). `attempt` counts claims of the row; steps are
kept per attempt. `JobLog` is one repository over four parts, one module each:
`claims.py` (claim, heartbeat, takeover of a dead holder, SUCCESS or FAILURE),
`steps.py` (step_log), `listing.py` (reads of ranges), `reverts.py` (ranges a revert of
their table undid: REVERTED). What it records is in
`records.py`, its errors in `errors.py`; the tables are in `control_plane/schema.py`.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from offset_assets.control_plane.database import ControlPlane
from offset_assets.control_plane.job_log.claims import RangeClaims
from offset_assets.control_plane.job_log.errors import (
    ClaimLostError,
    JobNameError,
    RangeClaimError,
    RangeDoneError,
    RangeHeldError,
)
from offset_assets.control_plane.job_log.records import Claim, JobRecord, JobStatus, StepRecord, check_job_names
from offset_assets.control_plane.job_log.reverts import RangeReverts, RevertedRanges
from offset_assets.control_plane.job_log.steps import StepLog

# What `job_log` held as one module, still importable from the package.
__all__ = [
    "Claim",
    "ClaimLostError",
    "JobLog",
    "JobNameError",
    "JobRecord",
    "JobStatus",
    "RangeClaimError",
    "RangeDoneError",
    "RangeHeldError",
    "RevertedRanges",
    "StepRecord",
    "check_job_names",
]


class JobLog(RangeClaims, StepLog, RangeReverts):
    """Repository of job_log/step_log on one control plane.

    `clock` returns epoch seconds; tests pass a fake one to age heartbeats.
    """

    def __init__(self, plane: ControlPlane, clock: Callable[[], float] = time.time) -> None:
        self.plane = plane
        self._clock = clock
