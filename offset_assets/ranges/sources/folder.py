"""Files landing in time-partitioned folders as a range source: a time range reads the
folders of its partitions, through Spark's own file readers.

A CSV or JSON file's record whose values do not fit the declared schema (a price `abc`,
a missing or an extra field of a CSV line, a line that is not JSON) is never read as
nulls: Spark's permissive reader keeps its raw text in a column of its own, from which
the record is marked (`MALFORMED`), so the job fails the range naming it or sets it aside
in its quarantine table. Parquet files carry their types: nothing to mark."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from pyspark.sql import Column, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from offset_assets.ranges.errors import SourceError
from offset_assets.ranges.planners import DataRange, parse_time
from offset_assets.ranges.sources.batch import MALFORMED, SHOWN_CHARS, SourceBatch
from offset_assets.ranges.sources.slice_tasks import read_once
from offset_assets.versioned.layout import WarehouseFiles
from offset_assets.versioned.writes import StateOrder

# The formats whose records Spark parses into the schema, and the column its permissive
# reader keeps a record's text in when its values do not fit.
TEXT_FORMATS = ("csv", "json")
CORRUPT = "__corrupt_record"
EXTRA = "__extra_field"
# Options of the file reader that the parse of one record's text takes no part in.
READER_ONLY_OPTIONS = {"header", "mode", "inferschema", "enforceschema", "samplingratio", "basepath",
                       "pathglobfilter", "recursivefilelookup", "multiline", "encoding", "charset"}


@dataclass(frozen=True)
class FolderSource:
    """Files landing in time-partitioned folders, `{root}/{partition_column}={value}/`.

    A time range [start, end) reads every partition folder whose partition instant lies
    in [floor(start), end), where floor is the partition granularity; `time_column`
    additionally keeps only rows inside the range (for ranges finer than a folder).
    Folders are located through the Hadoop file system of `root`, so any URI Spark can
    read works; a folder that has not landed yet simply contributes no rows.
    """

    root: str
    format: str = "parquet"
    partition_column: str = "dt"
    partition_format: str = "%Y-%m-%d"
    partition_step: timedelta = timedelta(days=1)
    schema: T.StructType | None = None  # needed for csv/json; parquet files carry their own
    options: Mapping[str, str] = field(default_factory=dict)
    time_column: str | None = None
    order_by: str | None = None  # as `SqlTableSource.order_by`: the last row of a key wins
    source_type: str = field(default="files", init=False)

    def __post_init__(self) -> None:
        mode = str(self.options.get("mode", "PERMISSIVE")).upper()
        if self._marks_malformed and (mode != "PERMISSIVE" or "columnNameOfCorruptRecord" in self.options):
            # DROPMALFORMED would lose records without a word; FAILFAST fails with Spark's
            # trace instead of naming the record: the job's on_malformed decides instead.
            raise SourceError(
                f"folder source {self.root!r}: option mode={self.options.get('mode')!r} / columnNameOfCorruptRecord "
                "is the source's own: a record that does not fit the schema fails the range naming it, or goes to "
                "the job's quarantine table (IngestionJob(on_malformed='quarantine'))")

    @property
    def _marks_malformed(self) -> bool:
        """Whether the files are text Spark parses into the schema (CSV, JSON)."""
        return self.schema is not None and self.format.lower() in TEXT_FORMATS

    def partition_paths(self, data_range: DataRange) -> list[str]:
        """Candidate folders of the range, in time order (whether they exist or not)."""
        if data_range.end is None:
            raise SourceError(f"folder source {self.root!r}: range {data_range.start!r} has no end")
        start, end = parse_time(data_range.start), parse_time(data_range.end)
        moment = datetime.strptime(start.strftime(self.partition_format), self.partition_format)
        paths: list[str] = []
        while moment < end:
            value = moment.strftime(self.partition_format)
            path = f"{self.root.rstrip('/')}/{self.partition_column}={value}"
            if path not in paths:
                paths.append(path)
            moment += self.partition_step
        return paths

    def read_range(self, spark: SparkSession, data_range: DataRange) -> SourceBatch:
        # The warehouse's file layer (fsspec): no JVM call, so a Spark Connect session works too.
        files = WarehouseFiles()
        paths = [path for path in self.partition_paths(data_range) if files.exists(path)]
        order = StateOrder(self.order_by) if self.order_by is not None else None
        if not paths:
            if self.schema is None:
                return SourceBatch(spark.createDataFrame([], T.StructType([])), data_range.end, 0)
            return SourceBatch(spark.createDataFrame([], self.schema), data_range.end, 0, order=order)
        reader = spark.read.format(self.format).options(basePath=self.root, **self.options)
        if self._marks_malformed:
            reader = reader.options(mode="PERMISSIVE", columnNameOfCorruptRecord=CORRUPT).schema(
                T.StructType([*self.schema.fields, T.StructField(CORRUPT, T.StringType())]))
        elif self.schema is not None:
            reader = reader.schema(self.schema)
        try:
            df = reader.load(paths)
        except Exception as exc:  # Spark analysis errors: name the folder instead of a JVM trace
            raise SourceError(
                f"folder source {self.root!r}: cannot read {paths}: {str(exc).splitlines()[0]}"
            ) from None
        if self.time_column is not None:
            start = parse_time(data_range.start).replace(tzinfo=UTC)
            end = parse_time(data_range.end or data_range.start).replace(tzinfo=UTC)
            column = F.col(self.time_column)
            inside = (column >= F.lit(start)) & (column < F.lit(end))
            # A malformed record whose time is unreadable belongs to every range of its
            # folder: each one fails on it (or quarantines it once, under one key).
            df = df.where(inside | F.col(CORRUPT).isNotNull() if self._marks_malformed else inside)
        if not self._marks_malformed:
            return SourceBatch(df, data_range.end, order=order)
        marked = df.select(*[F.col(f"`{c}`") for c in self.schema.fieldNames()], self._malformed().alias(MALFORMED))
        kept, counts = read_once(marked, {"rows": "count(1)", "malformed": f"count({MALFORMED})"})
        return SourceBatch(kept, data_range.end, counts["rows"], order=order, malformed=counts["malformed"])

    def _malformed(self) -> Column:
        """A record's `MALFORMED` struct, null when its values fit: its file and a digest of
        its text as its key (a file holds many records; the same text twice is one), the
        text, and the reason naming the file, the record and the first value at fault."""
        raw, path = F.col(CORRUPT), F.col("_metadata.file_path")
        reason = F.concat(F.lit(f"folder source {self.root!r}: "), path, F.lit(": record '"),
                          F.substring(raw, 1, SHOWN_CHARS), F.lit("': "), self._fault(raw))
        record = F.struct(F.concat(path, F.lit("#"), F.substring(F.sha2(raw, 256), 1, 16)).alias("source_key"),
                          raw.alias("raw_value"), reason.alias("reason"))
        return F.when(raw.isNotNull(), record)

    def _fault(self, raw: Column) -> Column:
        """What does not fit in a malformed record: the record parsed again with every
        field as text (Spark's own CSV or JSON parser, the source's options) names the first
        column whose text the schema's type refused; else its shape (a CSV line with more
        fields than the schema, a line that is no JSON object)."""
        fields = self.schema.fields
        options = {k: str(v) for k, v in self.options.items() if k.lower() not in READER_ONLY_OPTIONS}
        if self.format.lower() == "csv":
            as_text = ", ".join(f"`{f.name}` STRING" for f in [*fields, T.StructField(EXTRA, T.StringType())])
            tokens = F.from_csv(raw, as_text, options)
            shape = F.when(tokens[EXTRA].isNotNull(), F.lit(f"it has more fields than the schema's {len(fields)}"))
        else:
            tokens = F.from_json(raw, T.StructType([T.StructField(f.name, T.StringType()) for f in fields]), options)
            # A record that is corrupt and holds none of the fields as text is no JSON object.
            shape = F.when(F.coalesce(*[tokens[f.name] for f in fields]).isNull(), F.lit("it is not a JSON object"))
        refused = [F.when(tokens[f.name].isNotNull() & F.col(f"`{f.name}`").isNull(),
                          F.concat(F.lit(f"column '{f.name}' holds '"), F.substring(tokens[f.name], 1, SHOWN_CHARS),
                                   F.lit(f"', which is not {f.dataType.simpleString()}")))
                   for f in fields if not isinstance(f.dataType, T.StringType)]
        schema = ", ".join(f"{f.name} {f.dataType.simpleString()}" for f in fields)
        return F.coalesce(*refused, shape, F.lit(f"it does not fit the schema ({schema})"))
