"""Errors of versioned tables: each names the table and what is wrong with the input.

Whenever one of these is raised by a write, nothing of that write was kept.
"""

from __future__ import annotations

from offset_assets.control_plane.delta_catalog.errors import (
    DeltaCatalogError,
    DeltaNotHotError,
    HotDeltaHeldError,
    UnknownTableError,
)
from offset_assets.errors import OffsetAssetsError

__all__ = [
    "ConflictingStatesError",
    "DeltaCatalogError",
    "DeltaClosedError",
    "DeltaNotHotError",
    "HotDeltaHeldError",
    "InvalidSysOpError",
    "NullKeyError",
    "SchemaMismatchError",
    "TableDefinitionError",
    "UnknownTableError",
    "UnorderedStatesError",
    "VersionedTableError",
]


class VersionedTableError(OffsetAssetsError):
    """Base class: a versioned-table operation was refused."""

    def __init__(self, table: str, message: str) -> None:
        self.table = table
        super().__init__(f"table {table!r}: {message}")


class TableDefinitionError(VersionedTableError):
    """The table's definition (name, primary key, schema) is invalid or disagrees with the
    definition already registered in the catalog."""


class SchemaMismatchError(VersionedTableError):
    """Written rows do not match the table: a missing or extra column, or a type that
    cannot be converted without loss."""


class NullKeyError(VersionedTableError):
    """A written row has a null primary-key value (or null in a non-nullable column)."""


class InvalidSysOpError(VersionedTableError):
    """`sys_op` is not 0 (upsert) or 1 (delete)."""


class ConflictingStatesError(VersionedTableError):
    """Two different states of one key in one delta."""

    def __init__(self, table: str, message: str, keys: list[dict]) -> None:
        self.keys = keys
        super().__init__(table, message)


class UnorderedStatesError(ConflictingStatesError):
    """Two different states of one key in rows of one ordered write whose order values do
    not compare (`writes.StateOrder.within`: offsets of different Kafka partitions).
    `spread`: per key of `keys`, the lowest and the highest `within` value of its rows."""

    def __init__(self, table: str, message: str, keys: list[dict], within: str,
                 spread: list[tuple[object, object]]) -> None:
        self.within = within
        self.spread = spread
        super().__init__(table, message, keys)


class DeltaClosedError(VersionedTableError):
    """Write, delete or commit on a hot delta that was already committed or rolled back."""
