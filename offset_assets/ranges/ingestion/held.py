"""A small range read and written by the driver: no Spark job.

A range of at most `held_rows_limit` rows, as its source counts them, is read by the
driver through the reader Spark's tasks use (`HeldRangeSource`: the same values, the same
error on a value that does not fit), and classified and written by it with pyarrow
(`HotDelta.write_held`: the rules of Spark's write, `versioned/held_writes.py`). Its
committed versions are read from the files of the target's key range (an id range's
ids, row groups skipped by their statistics) or, for other ranges, from a target of at
most that many versions. Everything else goes to Spark as before: a job with a
transform, rows a source orders (a change log's `order_by`, Kafka's offsets), a target
of column types the driver does not write, rows whose types are not the target's, and a
range with records to quarantine. The range's claim, job_log and step_log rows, and its
commit, are the same either way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from offset_assets.ranges.ingestion.job import IngestionJob
from offset_assets.ranges.sources.batch import MALFORMED, HeldBatch
from offset_assets.versioned.held_files import arrow_schema, held_schema
from offset_assets.versioned.layout import SYS_OP

__all__ = ["HeldRange", "held_range", "may_hold"]

_SYS_OP_TYPE = pa.int32()


@dataclass(frozen=True)
class HeldRange:
    """A range's rows as the driver writes them: the target's columns (and sys_op), and
    the bounds of the target's first key column its lookups take (an id range's)."""

    rows: pa.Table
    end: str | None
    key_range: tuple[Any, Any] | None


def may_hold(job: IngestionJob) -> bool:
    """Whether a range of `job` may be read and written by the driver, before its rows
    are read: no transform, a target of atomic types (`held_files.held_schema`)."""
    target = job.target
    return job.transform is None and held_schema(target.schema, target.primary_key)


def held_range(job: IngestionJob, batch: HeldBatch) -> HeldRange | None:
    """`batch`'s rows as the target's columns for the driver's write, None when Spark
    must write them: rows a source orders, a malformed record, a target column absent or
    of another type (Spark's path then conforms them, or names what does not fit)."""
    if batch.order is not None or batch.malformed:
        return None
    target = job.target
    rows = batch.rows.drop_columns([MALFORMED]) if MALFORMED in batch.rows.column_names else batch.rows
    wanted = arrow_schema(target.schema, with_system=False)
    given = rows.schema
    if any(given.get_field_index(f.name) < 0 or given.field(f.name).type != f.type for f in wanted):
        return None
    columns = list(wanted.names)
    if SYS_OP in given.names:
        if given.field(SYS_OP).type != _SYS_OP_TYPE:
            return None
        columns.append(SYS_OP)
    first = target.primary_key[0]
    key_range = None
    if batch.key_range is not None and batch.key_range[0] == first:
        key_range = batch.key_range[1:]
    return HeldRange(rows.select(columns), batch.end, key_range)
