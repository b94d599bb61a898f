"""Errors of the incremental engine."""

from __future__ import annotations

from offset_assets.errors import OffsetAssetsError


class TransformationDefinitionError(OffsetAssetsError, ValueError):
    """A transformation is declared inconsistently (names the transformation and the column)."""


class TransformationOutputError(OffsetAssetsError):
    """A transformation function returned something that cannot be written to its outputs."""
