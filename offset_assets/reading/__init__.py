"""Reading versioned tables by name, the way the people downstream of a pipeline do.

On top of the versioned tables (layer 2) and below the engine's users: no Dagster, no
engine. A reader names a table; its primary key, schema and files come from the delta
catalog, and every read sees one committed catalog state (`state.py`).

- `tables.py`: `VersionedTables`, reads with Spark (classic or Spark Connect): the actual
  state, as of a delta or a time, the changes since, SQL with Prostore's system-time
  clauses (`system_time.py`), temp views of every table;
- `arrow.py`: `read_arrow` / `read_pandas`, the actual state without a JVM, from the
  catalog and the Parquet files (pyarrow), for tables that fit in memory;
- `errors.py`.
"""

from offset_assets.lazy_exports import lazy_getattr

# Resolved on first use: the Dagster adapter's resource imports the Spark reads, and no
# process should pay for pyarrow.dataset's import (a second on a busy machine) unread.
_EXPORTS = {
    "VersionedTables": "offset_assets.reading.tables",
    "read_arrow": "offset_assets.reading.arrow",
    "read_pandas": "offset_assets.reading.arrow",
    "FilesRemovedError": "offset_assets.reading.errors",
    "SystemTimeError": "offset_assets.reading.errors",
    "TableTooLargeError": "offset_assets.reading.errors",
}

__all__ = sorted(_EXPORTS)

__getattr__ = lazy_getattr(__name__, _EXPORTS)
