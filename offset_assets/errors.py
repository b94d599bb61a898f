"""Exception classes shared by every layer.

Each error names what is at fault (the table, the key, the value, the URL) so that the
message alone tells an operator what to fix. Layers define narrower subclasses next to
their code; everything raised on purpose derives from `OffsetAssetsError`.
"""

from __future__ import annotations


class OffsetAssetsError(Exception):
    """Base class of every error raised on purpose by offset-assets."""


class ControlPlaneUnavailableError(OffsetAssetsError):
    """The control-plane database cannot be reached or its URL is malformed.

    `url` is the URL with its password masked and `cause` the first line of what failed,
    so the message is one line that never holds the password. Subclasses (a malformed
    URL, no control plane there) live next to `connect`.
    """

    def __init__(self, problem: str, url: str, cause: str) -> None:
        # All three in `args`, so the error survives pickling between processes.
        super().__init__(problem, url, cause)
        self.problem = problem
        self.url = url
        self.cause = cause

    def __str__(self) -> str:
        return f"{self.problem} {self.url}: {self.cause}"


class SettingError(OffsetAssetsError, ValueError):
    """An environment variable holds a value the library cannot use; the message names
    the variable, the value and what it may be."""


class InvalidOffsetError(OffsetAssetsError, ValueError):
    """An offset value is NaN, infinite, negative or not a number; nothing was written."""


class JavaNotFoundError(OffsetAssetsError):
    """No Java 17+ runtime for Spark."""


class LeaseHeldError(OffsetAssetsError):
    """Another live run holds the lease of this transformation."""
