"""Exception classes shared by every layer.

Each error names what is at fault (the table, the key, the value, the URL) so that the
message alone tells an operator what to fix. Layers define narrower subclasses next to
their code; everything raised on purpose derives from `OffsetAssetsError`.
"""

from __future__ import annotations


class OffsetAssetsError(Exception):
    """Base class of every error raised on purpose by offset-assets."""


class ControlPlaneUnavailableError(OffsetAssetsError):
    """The control-plane database cannot be reached or its URL is malformed."""


class InvalidOffsetError(OffsetAssetsError, ValueError):
    """An offset value is NaN, infinite or not a number; nothing was written."""


class JavaNotFoundError(OffsetAssetsError):
    """No Java 17+ runtime for Spark."""


class LeaseHeldError(OffsetAssetsError):
    """Another live run holds the lease of this transformation."""
