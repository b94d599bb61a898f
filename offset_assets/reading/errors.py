"""Errors of reading versioned tables; each message is one line naming the table, the
clause or the file at fault."""

from __future__ import annotations

from offset_assets.errors import OffsetAssetsError


class SystemTimeError(OffsetAssetsError, ValueError):
    """A `FOR SYSTEM_TIME` clause that cannot be read: malformed, on a name that is not a
    versioned table, or naming a delta that is not committed. The message quotes the
    clause and says where it is in the query (line and column)."""


class TableTooLargeError(OffsetAssetsError):
    """A read without a JVM was asked for a table whose files exceed its `max_bytes`:
    such a table is read with Spark."""


class FilesRemovedError(OffsetAssetsError):
    """Files a read had planned with were removed while it ran (cleanup of a snapshot
    superseded long enough ago); the same read started again plans on the catalog as it
    is now and succeeds."""


class WriteRefusedError(OffsetAssetsError, ValueError):
    """A statement given to a read surface (`VersionedTables.sql`, `offset-assets sql`)
    that writes, changes the session, or is more than one statement."""


class EmbeddedQueryError(OffsetAssetsError):
    """DuckDB, the embedded engine of `offset-assets sql`, could not read or run a query
    (its own message, on one line)."""
