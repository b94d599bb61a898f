"""Running a transformation: run_full and run_changelist, without Dagster.

A run holds the transformation's lease, takes a snapshot (each input's last committed
delta and the commit clock), computes the changed index, processes it in batches and
commits outputs, meta and offsets together:

- commit_mode "end" (default): one control-plane transaction at the end of the run; a
  failure before it commits nothing and the next run redoes the work;
- commit_mode "batch": each batch commits its own outputs, meta and offsets, so a crash
  in batch k of K resumes at batch k (committed keys carry process_ts, so they drop out
  of the next changed index).

A batch whose function raises is recorded as failed in meta (with the error text), the
run goes on, and later runs retry those keys. `run_changelist` processes given keys and
never touches offsets.
"""

from __future__ import annotations

import logging
import time
import traceback
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from offset_assets.control_plane.database import ControlPlane
from offset_assets.control_plane.delta_catalog import DeltaCatalog
from offset_assets.control_plane.leases import (
    DEFAULT_TTL_S,
    LeaseKeeper,
    RunLeases,
    assert_lease_held,
    make_holder,
)
from offset_assets.control_plane.offsets import OffsetRepository
from offset_assets.engine.changed_index import (
    BATCH_COL,
    FIRST_TS_COL,
    INPUT_COL,
    TS_COL,
    RunSnapshot,
    assign_batches,
    compute_changed_index,
)
from offset_assets.engine.errors import TransformationOutputError
from offset_assets.engine.loading import DEFAULT_PUSHDOWN_LIMIT, read_actual_matching
from offset_assets.engine.meta import meta_rows, meta_table
from offset_assets.engine.result import RunResult
from offset_assets.engine.transformation import Transformation
from offset_assets.versioned.commit import commit_deltas
from offset_assets.versioned.table import VersionedTable

log = logging.getLogger(__name__)

KeysLike = DataFrame | Sequence[Mapping[str, Any]]


class IncrementalEngine:
    """Runs transformations against one control plane and one Spark session."""

    def __init__(
        self,
        spark: SparkSession,
        plane: ControlPlane,
        lease_ttl_s: float = DEFAULT_TTL_S,
        pushdown_limit: int = DEFAULT_PUSHDOWN_LIMIT,
    ) -> None:
        self.spark = spark
        self.plane = plane
        self.lease_ttl_s = lease_ttl_s
        self.pushdown_limit = pushdown_limit
        self.offsets = OffsetRepository(plane)
        self.catalog = DeltaCatalog(plane)
        self.leases = RunLeases(plane)

    def run_full(self, transformation: Transformation, run_id: str | None = None,
                 change_detection: str | None = None, reprocess_all: bool = False) -> RunResult:
        """Process every changed key (v2 by offsets, or v1 by full comparison).

        `reprocess_all` (what a backfill asks for) resets the offsets and supersedes the
        meta: every key present in the inputs or in the meta is processed again."""
        with self.open_run(transformation, run_id=run_id, change_detection=change_detection,
                           reprocess_all=reprocess_all) as run:
            for batch in run.batches:
                run.process_batch(batch, transformation.func)
            return run.finish()

    def run_changelist(self, transformation: Transformation, keys: KeysLike,
                       run_id: str | None = None) -> RunResult:
        """Process exactly `keys` (transform-key values); offsets are never changed."""
        with self.open_run(transformation, run_id=run_id, keys=keys) as run:
            for batch in run.batches:
                run.process_batch(batch, transformation.func)
            return run.finish()

    def open_run(self, transformation: Transformation, run_id: str | None = None,
                 keys: KeysLike | None = None, change_detection: str | None = None,
                 reprocess_all: bool = False) -> TransformationRun:
        """A run to drive step by step (the Dagster IO manager does): use it as a context manager."""
        return TransformationRun(
            self,
            transformation,
            run_id or uuid.uuid4().hex[:12],
            keys,
            change_detection or transformation.change_detection,
            reprocess_all,
        )

    def changed_keys(self, transformation: Transformation, change_detection: str | None = None,
                     ) -> DataFrame:
        """The keys a run would process now (read-only; no lease, nothing written)."""
        mode = change_detection or transformation.change_detection
        meta = meta_table(self.spark, self.plane, transformation)
        deltas, clock = self.catalog.snapshot_state([inp.name for inp in transformation.inputs])
        index = compute_changed_index(
            transformation,
            meta,
            RunSnapshot(deltas, clock),
            self.offsets.get_offsets_for_transformation(transformation.transformation_id),
            use_offsets=(mode == "v2"),
            pushdown_limit=self.pushdown_limit,
        )
        return index.keys.select(*transformation.transform_keys)

    def reset_offsets(self, transformation: Transformation, input_name: str | None = None) -> int:
        return self.offsets.reset_offset(transformation.transformation_id, input_name)

    def initialize_offsets_from_transform_meta(self, transformation: Transformation) -> dict[str, float]:
        """Seed 000: switch an existing transformation to offsets without redoing its work.

        Per input, offset = the newest commit not after the oldest successful process_ts
        (the seed's rule), capped by the oldest version that the meta shows as not yet
        processed (found by the v1 comparison): the seed assumes meta written by full
        runs, and the cap keeps the rule safe when it was not (changelist runs, failures).
        Nothing when there is no meta or an input is empty; a larger existing offset is kept.
        """
        tid = transformation.transformation_id
        meta = meta_table(self.spark, self.plane, transformation)
        min_process_ts = meta.read_actual().where(F.col("is_success")).agg(F.min("process_ts")).first()[0]
        if min_process_ts is None:
            return {}
        initial: dict[str, float] = {}
        for inp in transformation.inputs:
            commits = [
                d.commit_ts for d in self.catalog.committed(inp.name)
                if d.commit_ts <= min_process_ts and ((d.rows_upserted or 0) + (d.rows_deleted or 0)) > 0
            ]
            if commits:
                initial[inp.name] = max(commits)
        deltas, clock = self.catalog.snapshot_state([inp.name for inp in transformation.inputs])
        index = compute_changed_index(transformation, meta, RunSnapshot(deltas, clock), {},
                                      use_offsets=False, pushdown_limit=self.pushdown_limit)
        waiting = index.rows.where(F.col(INPUT_COL).isNotNull()).groupBy(INPUT_COL).agg(F.min(TS_COL).alias("m"))
        for row in waiting.collect():
            if row[INPUT_COL] in initial:
                initial[row[INPUT_COL]] = min(initial[row[INPUT_COL]], row["m"])
        self.offsets.update_offsets_bulk({(tid, name): ts for name, ts in initial.items()})
        stored = self.offsets.get_offsets_for_transformation(tid)
        return {name: stored[name] for name in initial}


class TransformationRun:
    """One run of one transformation, from lease to commit."""

    def __init__(self, engine: IncrementalEngine, transformation: Transformation, run_id: str,
                 explicit_keys: KeysLike | None, change_detection: str,
                 reprocess_all: bool = False) -> None:
        self.engine = engine
        self.t = transformation
        self.run_id = run_id
        self.lease_holder = make_holder(run_id)
        # Hot deltas name the transformation too, so a later run can recognise its own leftovers.
        self.holder = f"{transformation.transformation_id}:{self.lease_holder}"
        self._explicit_keys = explicit_keys
        self.change_detection = change_detection
        self.reprocess_all = reprocess_all
        self.offsets_reset: dict[str, float] = {}
        self._reset_committed = False
        self._keeper = LeaseKeeper(engine.leases, transformation.transformation_id, self.lease_holder,
                                   engine.lease_ttl_s)
        self._persisted: list[DataFrame] = []
        self._pending_outputs: dict[str, list[DataFrame]] = {}
        self._pending_meta: list[DataFrame] = []
        self._staged_batches: list[int] = []  # end mode: batches whose outputs wait for the commit
        self._finished = False
        self._started = 0.0

    # -- lifecycle --------------------------------------------------------------------

    def __enter__(self) -> TransformationRun:
        self._started = time.monotonic()
        self._keeper.__enter__()
        try:
            self._prepare()
        except BaseException:
            self._close()
            raise
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        self._close()

    def _close(self) -> None:
        for df in self._persisted:
            df.unpersist()
        self._persisted.clear()
        self._keeper.__exit__(None, None, None)

    def _persist(self, df: DataFrame) -> DataFrame:
        df = df.persist(StorageLevel.MEMORY_AND_DISK)
        self._persisted.append(df)
        return df

    @property
    def spark(self) -> SparkSession:
        return self.engine.spark

    @property
    def transform_keys(self) -> list[str]:
        return list(self.t.transform_keys)

    def _prepare(self) -> None:
        t, engine = self.t, self.engine
        self.meta = meta_table(self.spark, engine.plane, t)
        self._discard_crashed_hot_deltas()
        deltas, clock = engine.catalog.snapshot_state([inp.name for inp in t.inputs])
        self.snapshot = RunSnapshot(deltas, clock)
        self.snapshot_commit_ts = {
            name: engine.catalog.by_num(name, num).commit_ts
            for name, num in deltas.items() if num > 0
        }
        self.offsets_before = engine.offsets.get_offsets_for_transformation(t.transformation_id)
        if self.reprocess_all:
            # The reset itself is written in the run's commit transaction: a backfill that
            # fails leaves the offsets as they were.
            self.offsets_reset = dict(self.offsets_before)
            log.warning("reprocess_all: %s reads all history; offsets %s are reset at commit",
                        t.transformation_id, self.offsets_reset)
            self.offsets_before = {}
        explicit = self._explicit_keys is not None
        self.result = RunResult(
            transformation_id=t.transformation_id,
            run_id=self.run_id,
            mode="changelist" if explicit else "full",
            change_detection=("explicit" if explicit else
                              "reprocess_all" if self.reprocess_all else self.change_detection),
            commit_mode=t.commit_mode,
            process_ts=clock,
            snapshot_deltas=dict(deltas),
            offsets_before=dict(self.offsets_before),
        )
        self.result.offsets_reset = self.offsets_reset
        rows = None
        if explicit:
            keys = self._keys_frame(self._explicit_keys).withColumn(FIRST_TS_COL, F.lit(None).cast("double"))
        elif self.reprocess_all:
            keys = self._all_known_keys().withColumn(FIRST_TS_COL, F.lit(None).cast("double"))
        else:
            index = compute_changed_index(
                t, self.meta, self.snapshot, self.offsets_before,
                use_offsets=(self.change_detection == "v2"),
                pushdown_limit=engine.pushdown_limit,
            )
            index.rows = rows = self._persist(index.rows)  # read again for per-batch offsets
            keys = index.keys
        self.keys = self._persist(assign_batches(keys, self.transform_keys, t.batch_size))
        sizes = self.keys.groupBy(BATCH_COL).count().collect()
        self.batch_sizes = {row[BATCH_COL]: row["count"] for row in sizes}
        self.batches: list[int] = sorted(self.batch_sizes)
        self.result.changed_keys = sum(self.batch_sizes.values())
        self.result.batches = len(self.batches)
        self._batch_min_ts = self._min_ts_per_batch(rows) if rows is not None else {}

    def _all_known_keys(self) -> DataFrame:
        """Every key in the inputs (as of the snapshot) or in the meta: a full recompute,
        which also deletes the outputs of keys that no longer exist."""
        keys = self.meta.read_actual().select(*self.transform_keys)
        for inp in self.t.primary_inputs:
            actual = inp.table.read_actual(as_of_delta=self.snapshot.deltas.get(inp.name, 0))
            keys = keys.unionByName(actual.select(*self.transform_keys))
        return keys.where(" AND ".join(f"`{k}` IS NOT NULL" for k in self.transform_keys)).distinct()

    def _keys_frame(self, keys: KeysLike) -> DataFrame:
        if isinstance(keys, DataFrame):
            missing = [k for k in self.transform_keys if k not in keys.columns]
            if missing:
                raise TransformationOutputError(
                    f"run_changelist of {self.t.transformation_id!r}: keys lack column(s) {missing}"
                )
            return keys.select(*self.transform_keys).distinct()
        rows = [tuple(row[k] for k in self.transform_keys) for row in keys]
        key_schema = StructType([self.meta.schema[k] for k in self.transform_keys])
        return self.spark.createDataFrame(rows, key_schema).distinct()

    def _discard_crashed_hot_deltas(self) -> None:
        # We hold the lease, so a hot delta left by an earlier run of this transformation
        # belongs to a run that died before committing: its files are garbage.
        prefix = f"{self.t.transformation_id}:"
        for table in [*self.t.outputs, self.meta]:
            hot = table.hot()
            if hot is not None and (hot.holder or "").startswith(prefix):
                log.warning("discarding hot delta %s of %s left by crashed run %s",
                            hot.delta_num, table.name, hot.holder)
                table.rollback_hot()

    def _min_ts_per_batch(self, rows: DataFrame) -> dict[int, dict[str, float]]:
        if self.t.commit_mode != "batch" or not self.batches:
            return {}
        per_batch = (
            rows.where(F.col(TS_COL).isNotNull())
            .join(self.keys.select(*self.transform_keys, BATCH_COL), on=self.transform_keys)
            .groupBy(BATCH_COL, INPUT_COL)
            .agg(F.min(TS_COL).alias("min_ts"))
            .collect()
        )
        found: dict[int, dict[str, float]] = {}
        for row in per_batch:
            found.setdefault(row[BATCH_COL], {})[row[INPUT_COL]] = row["min_ts"]
        return found

    # -- batches ----------------------------------------------------------------------

    def batch_keys(self, batch: int) -> DataFrame:
        return self.keys.where(F.col(BATCH_COL) == batch).select(*self.transform_keys)

    def input_frames(self, batch: int) -> dict[str, DataFrame]:
        """Actual rows (as of the run snapshot) of every input for the keys of `batch`.

        Primary inputs are read for the batch's keys; reference inputs only for the join
        values those rows hold (filtered join), never whole."""
        keys = self.batch_keys(batch)
        frames: dict[str, DataFrame] = {}
        limit = self.engine.pushdown_limit
        for inp in self.t.primary_inputs:
            columns = {k: k for k in self.transform_keys}
            frame = read_actual_matching(inp.table, keys, columns,
                                         self.snapshot.deltas.get(inp.name, 0), limit)
            frames[inp.name] = self._persist(frame.select(*inp.table.data_columns))
        for inp in self.t.reference_inputs:
            sources = [frames[p.name] for p in self.t.inputs_with_column(next(iter(inp.join_keys)))
                       if set(inp.join_keys) <= set(p.table.data_columns)]
            values = sources[0].select(*inp.join_keys)
            for other in sources[1:]:
                values = values.unionByName(other.select(*inp.join_keys))
            frame = read_actual_matching(inp.table, values, dict(inp.join_keys),
                                         self.snapshot.deltas.get(inp.name, 0), limit)
            frames[inp.name] = self._persist(frame.select(*inp.table.data_columns))
        for name, frame in frames.items():
            self.result.add_rows_read(name, frame.count())
        return frames

    def process_batch(self, batch: int, func: Any) -> bool:
        """Run `func` on the batch and hand its outputs on; False when the batch failed."""
        frames = self.input_frames(batch)
        try:
            produced = func(**frames)
        except Exception as exc:  # noqa: BLE001 - a failing batch is recorded, not fatal
            self.record_failure(batch, exc)
            return False
        return self.apply_outputs(batch, produced)

    def apply_outputs(self, batch: int, produced: DataFrame | Mapping[str, DataFrame]) -> bool:
        """Evaluate the batch's outputs, then stage them (end mode) or commit them (batch mode)."""
        try:
            outputs = self._evaluate_outputs(batch, produced)
        except Exception as exc:  # noqa: BLE001 - errors of the user's function surface here
            self.record_failure(batch, exc)
            return False
        keys = self.batch_keys(batch)
        self.result.processed_keys += self.batch_sizes[batch]
        meta = meta_rows(keys, self.snapshot.process_ts, None)
        if self.t.commit_mode == "batch":
            self._commit({name: [df] for name, df in outputs.items()}, [meta], batch)
        else:
            for name, df in outputs.items():
                self._pending_outputs.setdefault(name, []).append(df)
            self._pending_meta.append(meta)
            self._staged_batches.append(batch)
        return True

    def record_failure(self, batch: int, exc: BaseException) -> None:
        keys = self.batch_keys(batch)
        count = self.batch_sizes[batch]
        text = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        log.error("batch %s of %s failed for %s key(s): %s", batch, self.t.transformation_id,
                  count, text)
        self.result.failed_keys += count
        self.result.batches_failed += 1
        self.result.errors.append(f"batch {batch}: {text[:1000]}")
        meta = meta_rows(keys, self.snapshot.process_ts, text)
        if self.t.commit_mode == "batch":
            self._commit({}, [meta], batch)
        else:
            self._pending_meta.append(meta)

    def _evaluate_outputs(self, batch: int, produced: DataFrame | Mapping[str, DataFrame],
                          ) -> dict[str, DataFrame]:
        tid = self.t.transformation_id
        by_name = {out.name: out for out in self.t.outputs}
        if isinstance(produced, DataFrame):
            if len(self.t.outputs) != 1:
                raise TransformationOutputError(
                    f"transformation {tid!r} has outputs {sorted(by_name)}: return a mapping of them"
                )
            produced = {self.t.outputs[0].name: produced}
        if not isinstance(produced, Mapping) or set(produced) != set(by_name):
            got = sorted(produced) if isinstance(produced, Mapping) else type(produced).__name__
            raise TransformationOutputError(
                f"transformation {tid!r} must return DataFrames for outputs {sorted(by_name)}, got {got}"
            )
        keys = self.batch_keys(batch)
        evaluated = {}
        for name, df in produced.items():
            table = by_name[name]
            missing = [c for c in table.data_columns if c not in df.columns]
            if missing:
                raise TransformationOutputError(
                    f"transformation {tid!r}: output {name!r} lacks column(s) {missing}"
                )
            df = self._persist(df.select(*table.data_columns))
            stray = df.join(keys, on=self.transform_keys, how="left_anti").limit(1).collect()
            if stray:
                raise TransformationOutputError(
                    f"transformation {tid!r}: output {name!r} has a row for transform key "
                    f"{stray[0].asDict()} that this batch did not process"
                )
            evaluated[name] = df
        return evaluated

    # -- commit -----------------------------------------------------------------------

    def _offsets_after(self, batch: int | None) -> dict[str, float]:
        """Offsets to commit: per input, the last delta the run read; in batch mode never
        past the oldest change still waiting in a later batch (inclusive boundary)."""
        if self.result.mode != "full":
            return {}  # run_changelist never moves offsets
        offsets = {}
        for name, commit_ts in self.snapshot_commit_ts.items():
            value = commit_ts
            if batch is not None:
                waiting = [
                    ts[name] for later, ts in self._batch_min_ts.items()
                    if later > batch and name in ts
                ]
                if waiting:
                    value = min(value, min(waiting))
            previous = self.offsets_before.get(name)
            if previous is None or value > previous:
                offsets[name] = value
        return offsets

    def _commit(self, outputs: Mapping[str, list[DataFrame]], metas: list[DataFrame],
                batch: int | None) -> None:
        engine, tid = self.engine, self.t.transformation_id
        offsets = self._offsets_after(batch)
        hots = []
        try:
            by_name = {out.name: out for out in self.t.outputs}
            for name, frames in outputs.items():
                table = by_name[name]
                hot = table.open_delta(holder=self.holder, run_id=self.run_id)
                hots.append(hot)
                keys = _union([self.batch_keys(b) for b in self._committing_batches(batch)])
                written = hot.write(self._replacement(table, _union(frames), keys))
                self.result.add_written(name, written.rows_upserted, written.rows_deleted)
            if metas:
                hot = self.meta.open_delta(holder=self.holder, run_id=self.run_id)
                hots.append(hot)
                hot.write(_union(metas))

            def on_commit(conn, commit_ts: float) -> None:  # noqa: ANN001
                assert_lease_held(conn, tid, self.lease_holder)
                if self.reprocess_all and not self._reset_committed:
                    engine.offsets.reset_offset(tid, conn=conn)
                if offsets:
                    engine.offsets.update_offsets_bulk(
                        {(tid, name): value for name, value in offsets.items()}, conn=conn)

            if hots:
                commit_deltas(hots, on_commit=on_commit)
            elif offsets or (self.reprocess_all and not self._reset_committed):
                with engine.plane.begin() as conn:
                    on_commit(conn, self.snapshot.process_ts)
        except BaseException:
            for hot in hots:
                try:
                    hot.rollback()
                except Exception:  # noqa: BLE001 - the original error matters more
                    log.exception("rollback of hot delta failed")
            raise
        self._reset_committed = True
        for hot in hots:
            self.result.add_delta(hot.table.name, hot.delta_num)
        self.result.offsets_after = {**self.result.offsets_after, **offsets}

    def _replacement(self, table: VersionedTable, new: DataFrame, keys: DataFrame) -> DataFrame:
        """The processed keys' new output, plus deletes of their previous output rows
        that the new output no longer has (one write: upserts and tombstones)."""
        previous = read_actual_matching(table, keys, {k: k for k in self.transform_keys},
                                        None, self.engine.pushdown_limit)
        pk = list(table.primary_key)
        gone = previous.select(*pk).join(new.select(*pk), on=pk, how="left_anti")
        deletes = gone.select(
            *[F.col(c) if c in pk else F.lit(None).cast(table.schema[c].dataType).alias(c)
              for c in table.data_columns],
            F.lit(1).alias("sys_op"),
        )
        return new.withColumn("sys_op", F.lit(0)).unionByName(deletes)

    def _committing_batches(self, batch: int | None) -> list[int]:
        if batch is not None:
            return [batch]
        return self._staged_batches

    def finish(self) -> RunResult:
        """Commit what end mode staged (outputs, meta and offsets in one transaction)."""
        if self._finished:
            raise TransformationOutputError(f"run {self.run_id} of {self.t.transformation_id!r} already finished")
        self._finished = True
        if self.t.commit_mode == "end":
            self._commit(self._pending_outputs, self._pending_meta, None)
        elif not self.batches:
            self._commit({}, [], None)
        final = self.engine.offsets.get_offsets_for_transformation(self.t.transformation_id)
        self.result.offsets_after = final
        self.result.duration_s = time.monotonic() - self._started
        log.info("%s", self.result.summary())
        return self.result


def _union(frames: Sequence[DataFrame]) -> DataFrame:
    result = frames[0]
    for frame in frames[1:]:
        result = result.unionByName(frame)
    return result
