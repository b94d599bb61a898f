"""What a range's rows become before its write: read from the source (marked, for a job
that quarantines; `malformed_policy.py` splits off the records that do not fit), and
shaped into the target's columns with the order the write keeps a key's last row by (see
the package's docstring)."""

from __future__ import annotations

from dataclasses import dataclass, field

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import DataType

from offset_assets.ranges.errors import IngestionError
from offset_assets.ranges.ingestion.job import IngestionJob, OnMalformed
from offset_assets.ranges.planners import DataRange
from offset_assets.ranges.sources.batch import SourceBatch
from offset_assets.versioned.layout import SYS_OP
from offset_assets.versioned.table_schema import column_types
from offset_assets.versioned.writes import StateOrder


@dataclass(frozen=True)
class ShapedRows:
    """A range's rows as its write takes them: the target's columns, `sys_op`, the order
    columns; their types; the order (None: none, or `dropped` by the transform)."""

    rows: DataFrame
    types: dict[str, DataType]
    order: StateOrder | None
    dropped: list[str] = field(default_factory=list)


def read_batch(spark: SparkSession, job: IngestionJob, data_range: DataRange) -> SourceBatch:
    """The range's rows from the source; for a job that quarantines, read with its
    malformed records marked and counted (`SourceBatch.read_marked`) where the source's
    plain read would fail on them."""
    batch = job.source.read_range(spark, data_range)
    if job.on_malformed == OnMalformed.QUARANTINE and batch.malformed is None:
        if batch.read_marked is None:
            raise IngestionError(f"job {job.name!r}: a {job.source.source_type} source cannot set "
                                 "malformed records aside; on_malformed='quarantine' needs a SQL, Kafka or "
                                 "CSV/JSON folder source")
        batch = batch.read_marked()
    return batch


def shape_rows(spark: SparkSession, job: IngestionJob, batch: SourceBatch, records: DataFrame) -> ShapedRows:
    """The range's rows as the target's columns (and `sys_op` and the source's order
    columns), their types, and the order the write keeps the last row of a key by.
    The schema is asked once, since over Spark Connect every ask is a round trip in
    which the server analyses the plan, the source's read included; the write takes
    the types as given."""
    target = job.target
    given = column_types(records.schema)
    if not given:  # an empty source without a schema (no file landed)
        return ShapedRows(spark.createDataFrame([], target.schema), column_types(target.schema), None)
    order = batch.order
    if job.transform is not None:
        rows = job.transform(records)
        types = column_types(rows.schema)
        if batch.deletes and SYS_OP not in types:
            raise IngestionError(
                f"job {job.name!r}: the range holds {batch.deletes} delete(s) (sys_op 1: Kafka tombstones) "
                f"and the transform's output has no {SYS_OP!r} column: keep it, or they would be written "
                "as upserts")
    else:
        absent = [c for c in order.columns if c not in given] if order else []
        if absent:
            raise IngestionError(f"job {job.name!r}: the source orders a key's rows by column(s) {absent}, "
                                 f"which its rows lack (they have {sorted(given)})")
        lacking = [c for c in target.schema.fieldNames() if c not in given]
        if lacking:
            others = [c for c in given if c not in target.schema.fieldNames() and c != SYS_OP]
            raise IngestionError(
                f"job {job.name!r}: the source's rows lack the target's column(s) {lacking}; the columns they "
                f"have beside the target's are {others}: declare the target's columns as the source names them, "
                "or give the job a transform that renames them")
        wanted = list(dict.fromkeys(c for c in [*target.schema.fieldNames(), SYS_OP,
                                                *(order.columns if order else [])] if c in given))
        missing = [c for c in target.primary_key if c not in batch.deletes_keyed_by]
        if batch.deletes and missing:
            raise IngestionError(
                f"job {job.name!r}: the range holds {batch.deletes} tombstone(s) (a key, a null value) and "
                f"the source does not say which of the target's key column(s) {missing} their message key "
                "holds: declare KafkaSource(message_key=...), or tombstones=False to skip them")
        rows, types = records.select(*[f"`{c}`" for c in wanted]), {c: given[c] for c in wanted}
    dropped = [c for c in order.columns if c not in types] if order else []
    return ShapedRows(rows, types, None if dropped else order, dropped)
