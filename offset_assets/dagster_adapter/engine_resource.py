"""`IncrementalEngineResource`: the engine as a typed Dagster resource.

One resource holds everything an incremental or ingestion asset needs: the control
plane (through the `OffsetStore` it nests), the Spark session (through dagster-pyspark's
`LazyPySparkResource`, or `PySparkResource`), the warehouse root and the engine settings. Asset bodies take
it as a parameter, the way dagster-dbt's assets take a `DbtCliResource`, and build their
invocations on it (`incremental/invocation.py`, `ingestion/invocation.py`): it gives them
what runs a transformation (`transformation_runner`, `transformation_opener`) and a range
(`range_ingestion`), and knows nothing of the invocations themselves, so both packages of
assets stand above it. A hand-written body may also drive the engine itself:

    @dg.asset
    def my_asset(incremental_engine: IncrementalEngineResource) -> None:
        engine = incremental_engine.engine()

It also reads any versioned table by name, the way a plain downstream asset or a script
holding the project's `Definitions` does (`read_table`, `sql`, `tables`), the key and
schema coming from the delta catalog.

The `OffsetIOManager` is built on the same resource, so an asset body and the IO
manager serving its table to downstream assets can never disagree on where tables live.
"""

# No `from __future__ import annotations`: Dagster builds the resource's config schema
# from its field annotations, which must be real types, not strings.

import datetime
import json
from collections.abc import Callable, Collection

import dagster as dg
from pydantic import Field, PrivateAttr
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType

from offset_assets.control_plane.database import ControlPlane
from offset_assets.control_plane.delta_catalog import DeltaCatalog
from offset_assets.control_plane.delta_catalog.errors import UnknownTableError
from offset_assets.control_plane.leases import DEFAULT_TTL_S
from offset_assets.dagster_adapter.asset_spec import IncrementalAsset, table_name_for
from offset_assets.dagster_adapter.offset_store import OffsetStore
from offset_assets.dagster_adapter.spark_resource import SparkProvider, data_plane_session
from offset_assets.engine import IncrementalEngine
from offset_assets.engine.loading import DEFAULT_PUSHDOWN_LIMIT
from offset_assets.engine.result import RunResult
from offset_assets.engine.run import TransformationRun
from offset_assets.engine.transformation import Transformation, TransformFunction, TransformInput
from offset_assets.engine.vocabulary import RunRequest
from offset_assets.ranges.ingestion import IngestionJob, RangeIngestion
from offset_assets.reading.tables import VersionedTables
from offset_assets.versioned.evaluation import DEFAULT_SMALL_RUN_ROWS_LIMIT
from offset_assets.versioned.held_files import DEFAULT_HELD_ROWS_LIMIT
from offset_assets.versioned.registered import open_registered_table
from offset_assets.versioned.table import VersionedTable

ENGINE_RESOURCE_KEY = "incremental_engine"


class IncrementalEngineResource(dg.ConfigurableResource):
    """Runs incremental transformations and ingestion ranges: versioned tables as Parquet
    under `warehouse`, catalogued with their offsets in the control plane of
    `offset_store`, computed by the Spark session of `spark` (dagster-pyspark's `LazyPySparkResource`
    or `PySparkResource`)."""

    offset_store: OffsetStore = Field(description="The control plane (offsets, delta catalog).")
    # A resource dependency, not a nested config: Dagster's config schema cannot hold a
    # union of resource classes, and the provider's own config is the one to edit.
    spark: dg.ResourceDependency[SparkProvider]
    warehouse: str | None = Field(
        default=None,
        description="Warehouse root (any Hadoop URI); default OFFSET_ASSETS_WAREHOUSE, "
        "else ./state/warehouse.",
    )
    lease_ttl_s: float = Field(
        default=DEFAULT_TTL_S,
        description="Seconds a run lease lives without renewal; a dead run's lease expires after it.",
    )
    pushdown_limit: int = Field(
        default=DEFAULT_PUSHDOWN_LIMIT,
        description="Up to this many changed keys are pushed down into reads as an IN list; "
        "beyond it the keys are joined.",
    )
    small_run_rows_limit: int = Field(
        default=DEFAULT_SMALL_RUN_ROWS_LIMIT,
        description="A run whose tables hold at most this many stored versions in all is small: "
        "it evaluates Spark expressions interpreted instead of compiling them afresh, without adaptive "
        "execution, its shuffles in few partitions (0: every run as the Spark session is configured).",
    )
    held_rows_limit: int = Field(
        default=DEFAULT_HELD_ROWS_LIMIT,
        description="An incremental run whose changed index reads at most this many versions (as the catalog "
        "bounds them) is indexed by the driver, a batch whose keys the driver holds and whose reads the catalog "
        "bounds so is read by it, and an output with at most this many committed versions is classified and "
        "written by it (pyarrow, no Spark job; the warehouse must be reachable from it, as for deleting files), "
        "and an ingestion range of at most this many source rows is read and written by it; 0: everything by Spark.",
    )
    row_count: bool = Field(
        default=True,
        description="Report dagster/row_count even for a table whose row count the delta catalog "
        "does not know (deltas committed before its revision 0006): one Spark job over the table, "
        "whose count the catalog then records, so the commits after it know theirs. Known counts "
        "cost no Spark job and are always reported.",
    )

    def control_plane(self) -> ControlPlane:
        return self.offset_store.control_plane()

    # The session whose settings were applied: checked once, not on every table access.
    _session: SparkSession | None = PrivateAttr(default=None)

    @property
    def spark_session(self) -> SparkSession:
        """The provider's session, with what the data plane relies on checked or applied."""
        if self._session is None or self.spark.spark_session is not self._session:
            self._session = data_plane_session(self.spark)
        return self._session

    def engine(self) -> IncrementalEngine:
        """An engine with this resource's settings (cheap: state lives in the control plane)."""
        return IncrementalEngine(self.spark_session, self.control_plane(),
                                 lease_ttl_s=self.lease_ttl_s, pushdown_limit=self.pushdown_limit,
                                 small_run_rows_limit=self.small_run_rows_limit,
                                 held_rows_limit=self.held_rows_limit)

    def tables(self) -> VersionedTables:
        """Every versioned table of this resource's control plane, read by name with this
        resource's Spark session: `read`, `changes`, `sql` (Prostore's system-time clauses),
        `register_views`."""
        return VersionedTables(self.spark_session, self.control_plane(), warehouse=self.warehouse)

    def read_table(self, table: str | dg.AssetKey, as_of_delta: int | None = None,
                   as_of: str | datetime.datetime | float | None = None) -> DataFrame:
        """The actual state of a versioned table (by name, or the asset whose table it
        is): as of committed delta `as_of_delta`, or as a reader saw it at `as_of` (ISO
        8601 text, in the session's time zone unless it names an offset; a datetime; epoch
        seconds), else as of its last committed delta. Columns: the table's, then sys_from, sys_to, sys_op,
        update_ts."""
        name = table_name_for(table) if isinstance(table, dg.AssetKey) else table
        return self.tables().read(name, as_of_delta=as_of_delta, as_of=as_of)

    def sql(self, query: str) -> DataFrame:
        """Spark SQL over the versioned tables, each name its actual state, history by
        Prostore's clauses (`FOR SYSTEM_TIME AS OF DELTA_NUM n`, `AS OF '<timestamp>'`,
        `STARTED IN (d1, d2)`, `FINISHED IN (d1, d2)`); one catalog state per query."""
        return self.tables().sql(query)

    def table(self, asset_key: dg.AssetKey) -> VersionedTable:
        """The versioned table of an asset, as registered in the delta catalog."""
        name = table_name_for(asset_key)
        table = self.registered_table(name)
        if table is None:
            raise UnknownTableError(
                f"asset {asset_key.to_user_string()} has no versioned table {name!r} in the "
                "delta catalog yet: materialize it first"
            )
        return table

    def row_counts(self, asset_keys: Collection[dg.AssetKey]) -> dict[dg.AssetKey, int]:
        """`dagster/row_count` of the assets' tables: their actual rows as the delta catalog
        records them at each commit, in one control-plane read (no Spark job). A table the
        catalog has no count for is counted by one Spark job when `row_count` is on, and
        left out otherwise; the count is recorded for the delta it was taken at, so the
        commits that follow know theirs again."""
        names = {key: table_name_for(key) for key in asset_keys}
        counts = self._counted(list(names.values()))
        return {key: counts[name] for key, name in names.items() if counts.get(name) is not None}

    def _counted(self, names: list[str]) -> dict[str, int | None]:
        """The tables' actual rows as the catalog knows them, an unknown count counted by
        Spark and recorded (when `row_count` is on)."""
        catalog = DeltaCatalog(self.control_plane())
        counts = catalog.actual_rows(names)
        for name, rows in counts.items():
            if rows is None and self.row_count:
                counts[name] = self._count_and_record(catalog, name)
        return counts

    def _count_and_record(self, catalog: DeltaCatalog, name: str) -> int | None:
        """The table's actual rows as of its last committed delta, counted by Spark and
        recorded in the catalog for that delta."""
        last = catalog.last_committed(name)
        table = self.registered_table(name)
        if last is None or table is None:
            return None
        rows = table.read_actual(as_of_delta=last.delta_num).count()
        catalog.record_actual_rows(name, last.delta_num, rows)
        return rows

    # -- what the invocations run ------------------------------------------------------------

    def transformation_runner(self, asset: IncrementalAsset, func: TransformFunction,
                              run_id: str) -> Callable[[RunRequest], RunResult]:
        """What runs `asset`'s transformation on a request, under Dagster run `run_id`:
        the engine run of one materialization by `incremental_asset`'s body."""
        return lambda request: self.engine().run(self._transformation_to_run(asset, func), request, run_id=run_id)

    def transformation_opener(self, asset: IncrementalAsset,
                              run_id: str) -> Callable[[RunRequest, TransformFunction], TransformationRun]:
        """What opens `asset`'s engine run (lease, snapshot, changed index) under Dagster
        run `run_id`, for the `OffsetIOManager`'s step, whose body is the function."""
        def open_run(request: RunRequest, func: TransformFunction) -> TransformationRun:
            return self.engine().open_run(self._transformation_to_run(asset, func), request, run_id=run_id)

        return open_run

    def range_ingestion(self, job: IngestionJob) -> RangeIngestion:
        """The ranges of `job` run on this resource's session, control plane and warehouse."""
        # The session is started when a range needs Spark: one the driver reads and writes
        # itself (a small SQL range) starts no JVM.
        return RangeIngestion(lambda: self.spark_session, self.control_plane(), job,
                              warehouse=self.warehouse, small_run_rows_limit=self.small_run_rows_limit,
                              held_rows_limit=self.held_rows_limit)

    def table_rows(self, name: str) -> int | None:
        """The actual rows of versioned table `name`, None when unknown (`row_count`)."""
        return self._counted([name])[name]

    def _transformation_to_run(self, asset: IncrementalAsset, func: TransformFunction) -> Transformation:
        """The transformation of `asset`, its outputs' unknown row counts taken first
        (`row_count`), so that the run's result reports every output's count."""
        if self.row_count:
            self._counted(list(asset.output_tables))
        return self.transformation(asset, func)

    def registered_table(self, name: str) -> VersionedTable | None:
        """The versioned table `name` as the delta catalog registered it, or None (no
        Spark session is started for a table that is not registered)."""
        return open_registered_table(lambda: self.spark_session, self.control_plane(), name, self.warehouse)

    def versioned_table(self, name: str, primary_key: list[str], schema: StructType) -> VersionedTable:
        return VersionedTable(self.spark_session, self.control_plane(), name, primary_key, schema,
                              warehouse=self.warehouse)

    def transformation(self, asset: IncrementalAsset, func: TransformFunction) -> Transformation:
        """The engine's view of an incremental asset: its input tables and output tables
        (one, or each output of a multi-asset)."""
        spec = asset.spec
        outputs = [self.versioned_table(out.table_name, list(out.primary_key),
                                        StructType.fromJson(json.loads(out.schema_json)))
                   for out in asset.outputs]
        return Transformation(
            transformation_id=asset.transformation_id,
            inputs=[TransformInput(self.table(inp.asset_key), inp.join_keys) for inp in asset.inputs],
            transform_keys=list(spec.transform_keys),
            outputs=outputs,
            func=func,
            batch_size=spec.batch_size,
            commit_mode=spec.commit_mode,
            change_detection=spec.change_detection,
        )
