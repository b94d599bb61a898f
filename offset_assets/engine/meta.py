"""Per-key transform meta: when each transform key was last processed and whether it
worked; its table, and the meta frame a commit writes for processed and failed batches.

Meta grows with the data, so it lives in the data plane as a versioned table of its own
(`_meta__<transformation_id>`), committed in the same control-plane transaction as the
outputs it describes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import BooleanType, DoubleType, StringType, StructField, StructType

from offset_assets.control_plane.database import ControlPlane
from offset_assets.engine.loading import KeyValues, union_all
from offset_assets.engine.transformation import Transformation
from offset_assets.local_frames import local_frame
from offset_assets.spark import is_connect_session
from offset_assets.versioned.held_files import arrow_schema, held_schema
from offset_assets.versioned.table import VersionedTable

META_COLUMNS = ("process_ts", "is_success", "error")
ERROR_TEXT_LIMIT = 4000


class PendingBatch(NamedTuple):
    """A batch whose meta a commit records: its keys, how many (known from the key
    selection, so the commit counts nothing in Spark) and its error text (None: success)."""

    keys: KeyValues | DataFrame
    rows: int
    error: str | None


MetaPending = Sequence[PendingBatch]


def meta_schema(transformation: Transformation) -> StructType:
    """Transform keys (typed as their input's columns; nullable where an input declares
    them so: a NULL key is a key with meta of its own), process_ts, is_success, error."""
    key_fields = []
    nullable = transformation.nullable_keys
    for key in transformation.transform_keys:
        source = transformation.inputs_with_column(key)[0].table.schema
        key_fields.append(StructField(key, source[key].dataType, nullable=key in nullable))
    return StructType(
        key_fields
        + [
            StructField("process_ts", DoubleType(), nullable=False),
            StructField("is_success", BooleanType(), nullable=False),
            StructField("error", StringType(), nullable=True),
        ]
    )


def meta_table(spark: SparkSession, plane: ControlPlane, transformation: Transformation) -> VersionedTable:
    warehouse = transformation.outputs[0].warehouse
    return VersionedTable(
        spark,
        plane,
        transformation.meta_table_name,
        list(transformation.transform_keys),
        meta_schema(transformation),
        warehouse=warehouse,
    )


def meta_rows(keys: DataFrame, columns: Sequence[str], process_ts: float, error: str | None) -> DataFrame:
    """Meta versions for `keys` (of the transform-key `columns`): success when `error` is
    None, else failed with its text."""
    text = None if error is None else error[:ERROR_TEXT_LIMIT]
    return keys.select(
        *[F.col(f"`{c}`") for c in columns],
        F.lit(process_ts).cast(DoubleType()).alias("process_ts"),
        F.lit(error is None).alias("is_success"),
        F.lit(text).cast(StringType()).alias("error"),
    )


def meta_frame(meta: VersionedTable, pending: MetaPending, process_ts: float) -> tuple[DataFrame, int, int]:
    """(meta rows, rows, failed rows) of processed and failed batches: one local relation
    when the driver holds the keys of several batches, else the batches' key frames (a
    single batch's relation is the one its reads built already). Keys collected from
    Spark go as one Arrow table (`local_frame`, as `KeyValues.frame` sends them), keys a
    caller gave are checked row by row."""
    failed = sum(batch.rows for batch in pending if batch.error is not None)
    total = sum(batch.rows for batch in pending)
    if len(pending) > 1 and all(isinstance(batch.keys, KeyValues) for batch in pending):
        rows = [(*key, process_ts, error is None, None if error is None else error[:ERROR_TEXT_LIMIT])
                for keys, _, error in pending for key in keys.rows]
        typed = all(batch.keys.typed for batch in pending)
        if typed and not is_connect_session(meta.spark):
            return local_frame(meta.spark, rows, meta.schema), total, failed
        return meta.spark.createDataFrame(rows, meta.schema, verifySchema=not typed), total, failed
    frames = [meta_rows(keys if isinstance(keys, DataFrame) else keys.frame(meta), meta.primary_key,
                        process_ts, error)
              for keys, _, error in pending]
    return union_all(frames), total, failed


def held_meta_rows(meta: VersionedTable, pending: MetaPending, process_ts: float,
                   ) -> tuple[pa.Table, int, int] | None:
    """`meta_frame` as an Arrow table the driver writes itself, when the driver holds
    every batch's keys as collected from Spark (typed like the meta table) and the meta
    table's types are ones the driver writes (`held_files.held_schema`); else None."""
    if not all(isinstance(batch.keys, KeyValues) and batch.keys.typed for batch in pending):
        return None
    if not held_schema(meta.schema, meta.primary_key):
        return None
    rows = [(*key, process_ts, error is None, None if error is None else error[:ERROR_TEXT_LIMIT])
            for keys, _, error in pending for key in keys.rows]
    columns = list(zip(*rows, strict=True)) if rows else [[] for _ in meta.schema.fields]
    schema = arrow_schema(meta.schema, with_system=False)
    table = pa.Table.from_arrays([pa.array(list(values), f.type) for values, f in zip(columns, schema, strict=True)],
                                 schema=schema)
    failed = sum(batch.rows for batch in pending if batch.error is not None)
    return table, len(rows), failed


def meta_frame_typed(pending: MetaPending) -> bool:
    """True when `meta_frame` builds the rows in the meta table's own types: every batch's
    keys are held by the driver, whose relations are typed like the meta table. Keys of
    a distributed batch have their input's types, which the meta write still checks."""
    return all(isinstance(batch.keys, KeyValues) for batch in pending)
