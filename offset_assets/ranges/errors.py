"""Errors of range planning, sources and ingestion; each names the job, range or source at fault.

Claim conflicts (`RangeHeldError`, `RangeDoneError`, `ClaimLostError`) are raised by the
control plane's job log and live there; they are listed here too so callers of this
layer import every error they can meet from one module.
"""

from __future__ import annotations

from offset_assets.control_plane.job_log.errors import ClaimLostError, RangeClaimError, RangeDoneError, RangeHeldError
from offset_assets.errors import OffsetAssetsError

__all__ = [
    "ClaimLostError",
    "IngestionError",
    "MalformedValueError",
    "PlanningError",
    "RangeClaimError",
    "RangeDoneError",
    "RangeHeldError",
    "RangeOrderError",
    "SeveralStatesError",
    "SourceError",
]


class PlanningError(OffsetAssetsError, ValueError):
    """A planner is misconfigured or lacks an input it needs (e.g. the source's max id)."""


class RangeOrderError(RangeClaimError):
    """A range was asked to run while an earlier range of the same job is not done yet."""


class SourceError(OffsetAssetsError):
    """A source cannot be read for a range (missing table or column, bad folder, broker down)."""


class IngestionError(OffsetAssetsError):
    """Ingesting a range failed; the range is logged FAILURE and nothing of it committed."""


class MalformedValueError(SourceError):
    """A source record holds a value that does not fit its declared type (a Kafka value
    against `value_schema`, a SQL value against its column's type); the message names the
    record (topic, partition and offset, or the source row's key), the column and the value."""


class SeveralStatesError(IngestionError):
    """A range holds different states of one key and the job gives no order that decides
    between them; the message names the keys and the option that orders them."""
