"""`IncrementalEngine`: the incremental engine's entry points, without Dagster: `run` (a
`RunRequest`), run_full, run_changelist, changed_keys, offset resets and reprocess requests.

Every run goes through one protocol, `TransformationRun` (`run.py`), which the Dagster
IO manager drives too.
"""

from __future__ import annotations

import uuid

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType

from offset_assets.control_plane.database import ControlPlane
from offset_assets.control_plane.delta_catalog import DeltaCatalog
from offset_assets.control_plane.leases import DEFAULT_TTL_S, RunLeases
from offset_assets.control_plane.offsets import OffsetRepository
from offset_assets.control_plane.reprocess import ReprocessRequests
from offset_assets.engine import offset_init
from offset_assets.engine.changed_keys import DEFAULT_DRIVER_LIMIT, ChangedIndex, KeysLike, compute_changed_index
from offset_assets.engine.changed_keys.held_index import held_index
from offset_assets.engine.loading import DEFAULT_PUSHDOWN_LIMIT
from offset_assets.engine.meta import meta_table
from offset_assets.engine.pending import current_request
from offset_assets.engine.result import RunResult
from offset_assets.engine.run import TransformationRun
from offset_assets.engine.transformation import Transformation
from offset_assets.engine.vocabulary import ChangeDetectionLike, RunRequest
from offset_assets.versioned.evaluation import DEFAULT_SMALL_RUN_ROWS_LIMIT
from offset_assets.versioned.held_files import DEFAULT_HELD_ROWS_LIMIT

__all__ = ["IncrementalEngine", "KeysLike", "TransformationRun"]


class IncrementalEngine:
    """Runs transformations against one control plane and one Spark session.

    `pushdown_limit`: up to this many key values are pushed down to Parquet as an IN
    filter (above: a broadcast semi-join); `driver_keys_limit`: a changed index of up to
    this many rows is held by the driver (above: it stays distributed), and the most rows
    a run lets one JVM hold: a join broadcasts a relation only when the catalog's row
    counts bound it within this limit (the changes of an incremental run), any other join
    is shuffled. `small_run_rows_limit`: a run whose tables hold at most this many
    stored versions in all is small: it evaluates its expressions interpreted rather than
    compiling them, without adaptive execution, its shuffles in few partitions
    (`evaluation.py`; 0: every run as the session is configured). `held_rows_limit`: an
    incremental run whose changed index reads at most this many versions, as the catalog
    bounds them, is indexed by the driver; a batch whose keys the driver holds and whose
    reads the catalog bounds so is read by it, and an output whose committed versions it
    bounds so is classified and written by it, with pyarrow and no Spark job
    (`changed_keys/held_index.py`, `held_inputs.py`, `outputs.py`; 0: everything by Spark). Decided before a plan is
    built, from the catalog, not from a Spark count."""

    def __init__(
        self,
        spark: SparkSession,
        plane: ControlPlane,
        lease_ttl_s: float = DEFAULT_TTL_S,
        pushdown_limit: int = DEFAULT_PUSHDOWN_LIMIT,
        driver_keys_limit: int = DEFAULT_DRIVER_LIMIT,
        small_run_rows_limit: int = DEFAULT_SMALL_RUN_ROWS_LIMIT,
        held_rows_limit: int = DEFAULT_HELD_ROWS_LIMIT,
    ) -> None:
        self.spark = spark
        self.plane = plane
        self.lease_ttl_s = lease_ttl_s
        self.pushdown_limit = pushdown_limit
        self.driver_keys_limit = driver_keys_limit
        self.small_run_rows_limit = small_run_rows_limit
        self.held_rows_limit = held_rows_limit
        self.offsets = OffsetRepository(plane)
        self.catalog = DeltaCatalog(plane)
        self.leases = RunLeases(plane)

    def run(self, transformation: Transformation, request: RunRequest | None = None,
            run_id: str | None = None) -> RunResult:
        """Run `transformation` as `request` asks (default: incremental, by the
        transformation's own change detection), start to finish."""
        with self.open_run(transformation, request, run_id=run_id) as run:
            for batch in run.batches:
                run.process_batch(batch, run.t.func)
            return run.finish()

    def run_full(self, transformation: Transformation, run_id: str | None = None,
                 change_detection: ChangeDetectionLike | None = None, reprocess_all: bool = False) -> RunResult:
        """Process every changed key (v2 by offsets, or v1 by full comparison).

        `reprocess_all` (what a backfill asks for) resets the offsets and supersedes the
        meta: every key present in the inputs or in the meta is processed again; a run
        that dies half-way leaves the rest to the next run."""
        request = RunRequest.reprocess() if reprocess_all else RunRequest.incremental(change_detection)
        return self.run(transformation, request, run_id=run_id)

    def run_changelist(self, transformation: Transformation, keys: KeysLike,
                       run_id: str | None = None) -> RunResult:
        """Process exactly `keys` (transform-key values); offsets are never changed."""
        return self.run(transformation, RunRequest.changelist(keys), run_id=run_id)

    def open_run(self, transformation: Transformation, request: RunRequest | None = None,
                 run_id: str | None = None) -> TransformationRun:
        """A run to drive step by step (the Dagster IO manager does): use it as a context manager."""
        return TransformationRun(self, transformation, run_id or uuid.uuid4().hex[:12], request or RunRequest())

    def changed_index(self, transformation: Transformation, change_detection: ChangeDetectionLike | None = None,
                      ) -> ChangedIndex | None:
        """The changed index a run would compute now (read-only; no lease, nothing
        written); None when the control plane alone shows nothing changed."""
        mode = change_detection or transformation.change_detection
        meta = meta_table(self.spark, self.plane, transformation)
        request = current_request(self.plane, transformation.transformation_id,
                                  [inp.name for inp in transformation.inputs], mode)
        return compute_changed_index(transformation, meta, request, self.pushdown_limit,
                                     broadcast_limit=self.driver_keys_limit)

    def changed_keys(self, transformation: Transformation, change_detection: ChangeDetectionLike | None = None,
                     ) -> DataFrame:
        """The keys a run would process now (read-only; no lease, nothing written), found
        as a run finds them: by the driver when the run's index would be
        (`changed_keys/held_index.py`), else by Spark."""
        keys = list(transformation.transform_keys)
        mode = change_detection or transformation.change_detection
        meta = meta_table(self.spark, self.plane, transformation)
        request = current_request(self.plane, transformation.transformation_id,
                                  [inp.name for inp in transformation.inputs], mode)
        held = held_index(transformation, meta, request, request.deltas_by_input(transformation),
                          min(self.held_rows_limit, self.driver_keys_limit))
        if held is not None:
            distinct = held.select(keys).group_by(keys, use_threads=False).aggregate([])
            return self.spark.createDataFrame(distinct.select(keys), StructType([meta.schema[k] for k in keys]))
        index = compute_changed_index(transformation, meta, request, self.pushdown_limit,
                                      broadcast_limit=self.driver_keys_limit)
        if index is None:
            return meta.read_actual().select(*keys).where("false")
        return index.rows.select(*keys).distinct()

    def reset_offsets(self, transformation: Transformation, input_name: str | None = None) -> int:
        """Re-scan: delete offsets so the next run reads those inputs from the beginning
        (keys whose meta is older than their versions come back)."""
        return self.offsets.reset_offset(transformation.transformation_id, input_name)

    def request_reprocess(self, transformation: Transformation) -> float:
        """Reprocess: the next run processes every key again (offsets reset and meta
        superseded, in one control-plane transaction)."""
        return ReprocessRequests(self.plane).request(transformation.transformation_id)

    def initialize_offsets_from_transform_meta(self, transformation: Transformation) -> dict[str, float]:
        """Switch an existing transformation to offsets without redoing its work."""
        return offset_init.initialize_offsets_from_transform_meta(self, transformation)
