"""A SQL table as a range source, read through SQLAlchemy (SQLite, PostgreSQL, ...).

A source turns one `DataRange` into a Spark DataFrame plus the range end actually
reached (written back to job_log). Bounds follow the planners: time windows are
[start, end), id ranges (start, end]. The driver reflects the table, fixes the range's
bounds and counts its rows here; Spark's executors read its slices (`sql_read.py`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, time, timedelta
from typing import Any

import sqlalchemy as sa
from pyspark.sql import SparkSession
from pyspark.sql import types as T
from sqlalchemy.exc import NoSuchTableError, SQLAlchemyError

from offset_assets.control_plane.database import mask_url
from offset_assets.ranges.errors import SourceError
from offset_assets.ranges.planners import DataRange, parse_time
from offset_assets.ranges.sources.batch import MALFORMED, HeldBatch, SourceBatch
from offset_assets.ranges.sources.slice_tasks import read_once, session_parallelism
from offset_assets.ranges.sources.sql_read import (
    SlicedRead,
    SliceKind,
    slice_bounds,
    slice_count,
    source_engine,
)
from offset_assets.versioned.writes import StateOrder


def spark_type_for(sql_type: sa.types.TypeEngine) -> T.DataType:
    """The Spark type a reflected SQL column is read as."""
    if isinstance(sql_type, sa.Boolean):
        return T.BooleanType()
    if isinstance(sql_type, sa.Integer):
        return T.LongType()
    if isinstance(sql_type, sa.Float | sa.Double):
        return T.DoubleType()
    if isinstance(sql_type, sa.Numeric):
        precision = min(sql_type.precision or 38, 38)
        return T.DecimalType(precision, sql_type.scale if sql_type.scale is not None else 10)
    if isinstance(sql_type, sa.DateTime):
        return T.TimestampType()
    if isinstance(sql_type, sa.Date):
        return T.DateType()
    if isinstance(sql_type, sa.LargeBinary):
        return T.BinaryType()
    return T.StringType()


@dataclass(frozen=True)
class SqlTableSource:
    """A table read through SQLAlchemy (SQLite, PostgreSQL, ...), by time column or id.

    Exactly one of `time_column` (a DATETIME/DATE column, or epoch seconds as a number)
    and `id_column` (an auto-increment integer) selects the range's rows. The driver
    reflects the table, fixes the range's bounds and counts its rows; Spark's executors
    read it in slices (`sql_read.py`), each task its own sub-range over its own
    connection, `fetch_size` rows at a time. `slices` fixes the slice count; by default
    a slice holds at most `rows_per_slice` rows, the slices run in whole waves over the
    session's cores, and a range large enough has at least one slice per core. A SQLite
    file must be reachable at the same path by the executors (local sessions, a cluster
    on this machine); a remote cluster needs a network database.

    `order_by`: a number, date or timestamp column that orders the rows of one key (an
    append-only change log's sequence or change time, read with the other columns): of
    several rows of one key in a range, the one with the highest value gives the key's
    state, and two different rows at that value refuse the range (unless the column is
    the table's primary key or unique: then they cannot tie, and the write does not look).
    Without it, different rows of one key in one range refuse the range.

    `arrow_driver`: id slices of a SQLite file or a PostgreSQL table are read through the
    Arrow ADBC driver of the database (`sql_arrow.py`: several times less CPU a row) where
    the database says they convert exactly, by SQLAlchemy otherwise; False reads every
    slice by SQLAlchemy.

    A value the column's declared type cannot hold (SQLite keeps `'many'` in an INTEGER
    column) fails the range naming the row's key (the table's primary key, else the range
    column), the column and the value; a job that quarantines such records reads the range
    with them marked instead (`SourceBatch.read_marked`).
    """

    url: str
    table: str
    time_column: str | None = None
    id_column: str | None = None
    columns: Sequence[str] | None = None
    db_schema: str | None = None
    fetch_size: int = 10_000
    rows_per_slice: int = 200_000
    slices: int | None = None
    order_by: str | None = None
    arrow_driver: bool = True
    source_type: str = field(default="sql", init=False)

    def __post_init__(self) -> None:
        if (self.time_column is None) == (self.id_column is None):
            raise SourceError(
                f"SQL source {self.table!r}: give exactly one of time_column and id_column"
            )
        for name in ("fetch_size", "rows_per_slice", "slices"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise SourceError(f"SQL source {self.table!r}: {name} must be at least 1, got {value}")

    @property
    def _where(self) -> str:
        return f"SQL source {self.table!r} at {mask_url(self.url)}"

    def _reflect(self) -> sa.Table:
        try:
            return sa.Table(self.table, sa.MetaData(), schema=self.db_schema,
                            autoload_with=source_engine(self.url))
        except NoSuchTableError:
            raise SourceError(f"{self._where}: no such table") from None
        except SQLAlchemyError as exc:
            raise SourceError(f"{self._where}: {str(exc).splitlines()[0]}") from None

    def _column(self, table: sa.Table, name: str) -> sa.Column:
        if name not in table.c:
            raise SourceError(
                f"{self._where}: no column {name!r} (has {', '.join(table.c.keys())})"
            )
        return table.c[name]

    def max_id(self) -> int | None:
        """The largest id in the table now (None when empty): the end of the next id range."""
        if self.id_column is None:
            raise SourceError(f"{self._where}: max_id needs an id_column")
        table = self._reflect()
        column = self._column(table, self.id_column)
        try:
            with source_engine(self.url).connect() as conn:
                value = conn.execute(sa.select(sa.func.max(column))).scalar()
        except SQLAlchemyError as exc:
            raise SourceError(f"{self._where}: {str(exc).splitlines()[0]}") from None
        return None if value is None else int(value)

    def range_end(self, data_range: DataRange) -> str | None:
        """The end of `data_range`, decided now when it has none: an id range's is the
        table's largest id now (the range start when the table holds nothing beyond it).
        The ingestion records it in job_log before a row is read, so that every later run
        of the range reads exactly to it."""
        if data_range.end is not None or self.id_column is None:
            return data_range.end
        try:
            start = int(data_range.start)
        except ValueError:
            raise SourceError(f"{self._where}: id range start {data_range.start!r} is not integer") from None
        return str(max(self.max_id() or start, start))

    def _time_bound(self, column: sa.Column, text: str) -> Any:
        moment = parse_time(text)
        if isinstance(column.type, sa.DateTime):
            # Windows are UTC. A column of instants (PostgreSQL's timestamptz) is compared
            # with an instant: a naive bound would be read in the session's TimeZone.
            return moment.replace(tzinfo=UTC) if column.type.timezone else moment
        if isinstance(column.type, sa.Date):
            # A day is in [start, end) when its midnight is: compared as a date, since
            # SQLite compares a date's text with a timestamp's as strings ('2022-01-01' <
            # '2022-01-01 00:00:00'), which moved a window one day later.
            day = moment.date()
            return day if moment == datetime.combine(day, time()) else day + timedelta(days=1)
        if isinstance(column.type, sa.Float | sa.Numeric | sa.Integer):
            return moment.replace(tzinfo=UTC).timestamp()
        raise SourceError(
            f"{self._where}: time column {column.name!r} is {column.type}, "
            "expected a DATETIME/DATE or epoch seconds"
        )

    def _range_bounds(self, table: sa.Table, data_range: DataRange) -> tuple[sa.Column, SliceKind, Any, Any, str]:
        """The range's column, kind and bounds in the column's terms, and its end as logged."""
        if self.time_column is not None:
            column = self._column(table, self.time_column)
            if data_range.end is None:
                raise SourceError(f"{self._where}: time range {data_range.start!r} has no end")
            return (column, "time", self._time_bound(column, data_range.start),
                    self._time_bound(column, data_range.end), data_range.end)
        column = self._column(table, self.id_column or "")
        try:
            start_id = int(data_range.start)
            end_id = int(data_range.end) if data_range.end is not None else None
        except ValueError:
            raise SourceError(
                f"{self._where}: id range ({data_range.start}, {data_range.end}] is not integer"
            ) from None
        if end_id is None:  # the max id read at run time, written back as the range end
            end_id = max(self.max_id() or start_id, start_id)
        return column, "id", start_id, end_id, str(end_id)

    def _plan_read(self, data_range: DataRange) -> tuple[SlicedRead, str, int, StateOrder | None]:
        """The range as one slice (a Spark-free plan), the end reached, the range's row
        count and the order of its rows. Everything that can fail before a row is read
        does here: reflection, a missing column, a bad bound."""
        table = self._reflect()
        names = list(self.columns or table.c.keys())
        if self.order_by is not None and self.order_by not in names:
            names.append(self.order_by)
        selected = [self._column(table, name) for name in names]
        schema = T.StructType([T.StructField(c.name, spark_type_for(c.type)) for c in selected])
        if self.order_by is not None and isinstance(schema[self.order_by].dataType, T.StringType | T.BinaryType
                                                    | T.BooleanType):
            raise SourceError(f"{self._where}: order_by column {self.order_by!r} is "
                              f"{table.c[self.order_by].type}; a number, a date or a timestamp orders rows")
        column, kind, lower, upper, end = self._range_bounds(table, data_range)
        # A row is named by the table's primary key when it is read, else by its id, else by
        # all its columns (a time column may hold one instant for many rows).
        key = [c.name for c in table.primary_key.columns]
        if not key or not set(key) <= set(names):
            key = [column.name] if kind == "id" and column.name in names else names
        whole = SlicedRead(
            url=self.url, table=self.table, db_schema=self.db_schema,
            columns=tuple((c.name, c.type) for c in selected), schema=schema,
            range_column=column.name, range_type=column.type, kind=kind,
            bounds=(lower, upper), fetch_size=self.fetch_size,
            key_columns=tuple(key), arrow_driver=self.arrow_driver,
        )
        return whole, end, whole.count_rows(), self._order(table)

    def _sliced(self, spark: SparkSession, whole: SlicedRead, rows: int) -> SlicedRead:
        """`whole` cut into the slices Spark's tasks read."""
        count = self.slices or slice_count(rows, self.rows_per_slice, session_parallelism(spark))
        return replace(whole, bounds=tuple(slice_bounds(whole.kind, whole.bounds[0], whole.bounds[-1], count)))

    @staticmethod
    def _ids(plan: SlicedRead) -> tuple[str, Any, Any] | None:
        """An id range's ids (lower, upper]: a key range a write can bound its lookups by."""
        return (plan.range_column, plan.bounds[0] + 1, plan.bounds[-1]) if plan.kind == "id" else None

    def _order(self, table: sa.Table) -> StateOrder | None:
        """The order of the rows of one key: `order_by`, whose values are unique when it is
        the table's primary key or has a unique constraint or index of its own."""
        if self.order_by is None:
            return None
        alone = [self.order_by]
        unique = ([c.name for c in table.primary_key.columns] == alone
                  or any(isinstance(c, sa.UniqueConstraint) and [col.name for col in c.columns] == alone
                         for c in table.constraints)
                  or any(index.unique and [col.name for col in index.columns] == alone for index in table.indexes))
        return StateOrder(self.order_by, unique=unique)

    def read_range(self, spark: SparkSession, data_range: DataRange) -> SourceBatch:
        whole, end, rows, order = self._plan_read(data_range)
        plan, ids = self._sliced(spark, whole, rows), self._ids(whole)

        def read_marked() -> SourceBatch:
            # The slices planned above, read once, with their malformed records marked.
            kept, counts = read_once(replace(plan, marked=True).dataframe(spark),
                                     {"malformed": f"count({MALFORMED})"})
            return SourceBatch(kept, end, rows, ids, order, malformed=counts["malformed"])

        return SourceBatch(plan.dataframe(spark), end, rows, ids, order, read_marked=read_marked)

    def read_held(self, data_range: DataRange, limit: int, max_bytes: int, marked: bool) -> HeldBatch | None:
        """The range's rows read by the driver as one slice, when the database counts at
        most `limit` and they take at most `max_bytes` as Arrow (`HeldRangeSource`): the
        same reader, values and errors as a task's."""
        whole, end, rows, order = self._plan_read(data_range)
        # Counted, then reckoned: rows of unknown width (documents, blobs) by their size.
        if rows > limit or whole.arrow_bytes() > max_bytes:
            return None
        import pyarrow as pa  # a driver that only plans ranges never loads it
        from pyspark.sql.pandas.types import to_arrow_schema

        read = replace(whole, marked=marked)
        [piece] = read.slices()
        arrow = pa.Table.from_batches(list(read.read_slice(piece)),
                                      schema=to_arrow_schema(read.output_schema, timezone="UTC"))
        return HeldBatch(arrow, end, self._ids(whole), order)
