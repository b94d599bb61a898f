"""A small range read and written by the driver: no Spark job.

A range of at most `held_rows_limit` rows, as its source counts them, is read by the
driver through the reader Spark's tasks use (`HeldRangeSource`: the same values, the same
error on a value that does not fit), and classified and written by it with pyarrow
(`HotDelta.write_held`: the rules of Spark's write, `versioned/held_writes.py`). Its
committed versions are read from the files of the target's key range (an id range's
ids, row groups skipped by their statistics) or, for other ranges, from a target of at
most that many versions. Everything else goes to Spark as before: a job with a
transform, rows ordered within a partition (Kafka's offsets) or by a floating-point
column, a `unique` order whose values repeat or are NULL (which its database allows, and
which Spark's write would break by the state's own order), a target of column types the
driver does not write, rows whose types are not the target's, and a range with records
to quarantine. The range's claim, job_log and step_log rows, and its
commit, are the same either way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from offset_assets.ranges.ingestion.job import IngestionJob
from offset_assets.ranges.sources.batch import MALFORMED, HeldBatch
from offset_assets.versioned.held_files import arrow_schema, held_schema
from offset_assets.versioned.layout import SYS_OP
from offset_assets.versioned.writes import StateOrder

__all__ = ["HeldRange", "held_range", "may_hold"]

_SYS_OP_TYPE = pa.int32()


@dataclass(frozen=True)
class HeldRange:
    """A range's rows as the driver writes them: the target's columns (and sys_op), and
    the bounds of the target's first key column its lookups take (an id range's)."""

    rows: pa.Table
    end: str | None
    key_range: tuple[Any, Any] | None
    order: StateOrder | None


def may_hold(job: IngestionJob) -> bool:
    """Whether a range of `job` may be read and written by the driver, before its rows
    are read: no transform, a target of atomic types (`held_files.held_schema`)."""
    target = job.target
    return job.transform is None and held_schema(target.schema, target.primary_key)


def held_range(job: IngestionJob, batch: HeldBatch) -> HeldRange | None:
    """`batch`'s rows as the target's columns (and sys_op and the order column) for the
    driver's write, None when Spark must write them: a malformed record, an order the
    driver does not keep, a target column absent or of another type (Spark's path then
    conforms them, or names what does not fit)."""
    if batch.malformed:
        return None
    target = job.target
    rows = batch.rows.drop_columns([MALFORMED]) if MALFORMED in batch.rows.column_names else batch.rows
    wanted = arrow_schema(target.schema, with_system=False)
    given = rows.schema
    if any(given.get_field_index(f.name) < 0 or given.field(f.name).type != f.type for f in wanted):
        return None
    columns = list(wanted.names)
    if SYS_OP in given.names:
        ops = _sys_ops(rows[SYS_OP])
        if ops is None:
            return None
        rows = rows.set_column(given.get_field_index(SYS_OP), SYS_OP, ops)
        columns.append(SYS_OP)
    order = batch.order
    if order is not None:
        if not _kept_order(rows, order):
            return None
        columns += [order.order_by] if order.order_by not in columns else []
    first = target.primary_key[0]
    key_range = None
    if batch.key_range is not None and batch.key_range[0] == first:
        key_range = batch.key_range[1:]
    return HeldRange(rows.select(columns), batch.end, key_range, order)


def _sys_ops(ops: pa.ChunkedArray) -> pa.ChunkedArray | None:
    """A source's sys_op column as the write's int (Spark's cast), None when it is not of
    integers or holds a value beyond an int (whose cast Spark's session decides)."""
    if not pa.types.is_integer(ops.type):
        return None
    if ops.type != _SYS_OP_TYPE and ops.null_count < len(ops):
        extent = pc.min_max(ops)
        if extent["min"].as_py() < -(2**31) or extent["max"].as_py() >= 2**31:
            return None
    return ops.cast(_SYS_OP_TYPE)


def _kept_order(rows: pa.Table, order: StateOrder) -> bool:
    """Whether the driver's write keeps `order` as Spark's does: one column (no `within`)
    of integers, decimals, dates or timestamps (no NaN to place), whose values, when the
    source says they are unique, are neither NULL nor repeated in the range."""
    if order.within is not None or rows.schema.get_field_index(order.order_by) < 0:
        return False
    values = rows[order.order_by]
    kind = values.type
    if not (pa.types.is_integer(kind) or pa.types.is_decimal(kind) or pa.types.is_date(kind)
            or pa.types.is_timestamp(kind)):
        return False
    return not order.unique or (values.null_count == 0 and pc.count_distinct(values).as_py() == len(values))
