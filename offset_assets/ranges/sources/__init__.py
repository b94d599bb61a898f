"""Where an ingestion range's rows come from, one module per kind of source, each the
source class (planned on the driver) and beside it its executor-side read:

- `sql.py`: `SqlTableSource`, a table read through SQLAlchemy; its slices are read by
  Spark's executors (`sql_read.py`);
- `kafka.py`: `KafkaSource` (optional extra: `pip install offset-assets[kafka]`); its
  partitions' slices are read by the executors (`kafka_read.py`: messages as they came),
  and a message becomes a row in `kafka_message_rows.py` (its value's fields as columns,
  a tombstone as a delete, a value that does not fit marked);
- `folder.py`: `FolderSource`, files landing in time-partitioned folders.

What every source hands the ingestion: `batch.py` (`SourceBatch`, `MALFORMED`); the Spark
tasks that read slices outside Spark's own readers: `slice_tasks.py`. Names are resolved
lazily: importing the package imports no source's dependencies.
"""

from __future__ import annotations

from offset_assets.lazy_exports import lazy_getattr

_EXPORTS = {
    "SourceBatch": "offset_assets.ranges.sources.batch",
    "RangeSource": "offset_assets.ranges.sources.batch",
    "MALFORMED": "offset_assets.ranges.sources.batch",
    "SqlTableSource": "offset_assets.ranges.sources.sql",
    "FolderSource": "offset_assets.ranges.sources.folder",
    "KafkaSource": "offset_assets.ranges.sources.kafka",
}

__all__ = sorted(_EXPORTS)

__getattr__ = lazy_getattr(__name__, _EXPORTS)
