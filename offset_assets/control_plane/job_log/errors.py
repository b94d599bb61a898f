"""Errors of the job log: a range that cannot be claimed, a claim lost, a bad name."""

from __future__ import annotations

from offset_assets.errors import OffsetAssetsError


class RangeClaimError(OffsetAssetsError):
    """A data range cannot be claimed; the message names the job, the range and why."""


class RangeHeldError(RangeClaimError):
    """Another live holder runs the range, or won a concurrent claim of it."""


class RangeDoneError(RangeClaimError):
    """The range was already ingested successfully and no refresh was asked for."""


class ClaimLostError(OffsetAssetsError):
    """The range was taken over (or never claimed) by this run: its result must not commit."""


class JobNameError(OffsetAssetsError, ValueError):
    """A job, workflow or load-type name that its job_log column cannot hold."""
