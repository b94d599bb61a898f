"""Compaction: a snapshot of a table's actual state, so reads stop merging every delta.

Compaction never rewrites or removes a delta: it adds a snapshot of the actual state at
the last committed delta c, sorted by primary key, and records it in the catalog. Reads
at n >= c then read snapshot c plus the deltas after it instead of every delta, while
history reads and as-of reads before c still read the deltas and stay exact. Snapshot
rows keep their sys_from and store their update_ts: a read of the actual state then
looks up commit times only for the deltas after the snapshot, so what it lists from the
catalog and carries in its plan follows the deltas since the last compaction, not the
table's age.

When to compact and how old snapshots and stray files are removed is `maintenance.py`.
"""

from __future__ import annotations

import math

from pyspark.sql import functions as F

from offset_assets.versioned.layout import (
    SYS_FROM,
    SYS_OP,
    UPDATE_TS,
    new_snapshot_path,
)
from offset_assets.versioned.table import VersionedTable

SNAPSHOT_ROWS_PER_FILE = 500_000


def compact(table: VersionedTable) -> int:
    """Write the snapshot of the last committed delta (if not there yet); returns its
    number (0: nothing committed, nothing to compact)."""
    catalog = table.catalog
    last = catalog.last_committed(table.name)
    if last is None:
        return 0
    previous = catalog.snapshot_at(table.name, last.delta_num)
    if previous is not None and previous.delta_num == last.delta_num:
        return last.delta_num
    estimate = (previous.row_count if previous else 0) + sum(
        (d.rows_upserted or 0)
        for d in catalog.committed(table.name, up_to_delta=last.delta_num)
        if previous is None or d.delta_num > previous.delta_num
    )
    files = max(1, math.ceil(estimate / SNAPSHOT_ROWS_PER_FILE))
    state = table.read_actual(as_of_delta=last.delta_num).select(
        *[F.col(f"`{c}`") for c in table.data_columns], SYS_OP, SYS_FROM, UPDATE_TS
    )
    path = new_snapshot_path(table.root, last.delta_num)
    try:
        (
            state.repartitionByRange(files, *table.primary_key)
            .sortWithinPartitions(*table.primary_key)
            .write.mode("error")  # not "errorifexists": Spark Connect accepts only this spelling
            .parquet(path)
        )
        rows = table.reader.scan([path]).count()
        catalog.add_snapshot(table.name, last.delta_num, path, rows, stores_update_ts=True)
    except BaseException:
        table.files.delete(path)
        raise
    return last.delta_num

