"""One run of one transformation, from lease to commit: the protocol that `run_full`,
`run_changelist` and the Dagster IO manager all drive.

    with engine.open_run(t) as run:
        for batch in run.batches:
            run.process_batch(batch, t.func)      # or input_frames + apply_outputs
        result = run.finish()

A run holds the transformation's lease, takes a snapshot (each input's last committed
delta and the commit clock), computes the changed index (`changed_index.py`), processes
it in batches and commits outputs, meta and offsets together (`commit.py`):

- commit_mode "end" (default): each batch's outputs are written into the output tables'
  hot deltas as the batch ends, and everything commits in one transaction in `finish`;
  a failure before that commits nothing and the next run redoes the work;
- commit_mode "batch": each batch commits its own outputs, meta and offsets, so a crash
  in batch k of K resumes at batch k (committed keys carry process_ts, so they drop out
  of the next changed index).

A batch whose function raises, or whose output cannot be written (a missing column, a
row for a key the batch did not process, two different rows for one output key), is
recorded as failed in meta with the error text; the run goes on and later runs retry
those keys. `run_changelist` processes given keys and never touches offsets.
"""

from __future__ import annotations

import logging
import time
import traceback
from collections.abc import Mapping, Sequence
from typing import Any

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from offset_assets.control_plane.failures import FailedDeltas
from offset_assets.control_plane.leases import LeaseKeeper, make_holder
from offset_assets.control_plane.reprocess import ReprocessRequests
from offset_assets.engine.changed_index import IndexRequest, RunSnapshot, compute_changed_index
from offset_assets.engine.commit import CommitPlan, commit_run_work, offsets_after
from offset_assets.engine.errors import TransformationOutputError
from offset_assets.engine.keys import (
    DistributedKeys,
    LocalKeys,
    distributed_from_rows,
    local_from_keys,
    local_from_rows,
)
from offset_assets.engine.loading import (
    KeyValues,
    latest_of_keys,
    read_actual_matching,
    read_actual_of_keys,
)
from offset_assets.engine.meta import ERROR_TEXT_LIMIT, meta_rows, meta_table
from offset_assets.engine.pending import index_request
from offset_assets.engine.result import RunResult
from offset_assets.engine.transformation import Transformation
from offset_assets.versioned.hot_delta import HotDelta
from offset_assets.versioned.in_filter import in_values
from offset_assets.versioned.reads import broadcast_limit
from offset_assets.versioned.table import VersionedTable
from offset_assets.versioned.writes import Refusal

log = logging.getLogger(__name__)

# Columns the run adds to an output while writing it (never stored).
STRAY, IN_BATCH = "__outside_batch", "__in_batch"

KeysLike = DataFrame | Sequence[Mapping[str, Any]]


class TransformationRun:
    """One run of one transformation (see the module docstring for the protocol)."""

    def __init__(self, engine: Any, transformation: Transformation, run_id: str,
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
        self._first_commit_done = False
        self._keeper = LeaseKeeper(engine.leases, transformation.transformation_id, self.lease_holder,
                                   engine.lease_ttl_s)
        self._batch_frames: list[DataFrame] = []
        self._output_hots: dict[str, HotDelta] = {}  # end mode: open until finish
        self._meta_pending: list[tuple[KeyValues | DataFrame, str | None]] = []
        self._failed_in_run = 0
        self._finished = False
        self._started = 0.0
        self._started_at: float | None = None

    # -- lifecycle --------------------------------------------------------------------

    def __enter__(self) -> TransformationRun:
        self._started = time.monotonic()
        self._started_at = time.time()
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
        self._release_batch_frames()
        if isinstance(getattr(self, "keys", None), DistributedKeys):
            self.keys.frame.unpersist()
        if not self._finished:
            # Files of an unfinished end-mode run are garbage: discard them now rather than
            # leave them to the next run.
            for hot in self._output_hots.values():
                _rollback_quietly(hot)
        self._keeper.__exit__(None, None, None)

    @property
    def spark(self) -> SparkSession:
        return self.engine.spark

    @property
    def transform_keys(self) -> list[str]:
        return list(self.t.transform_keys)

    @property
    def is_full(self) -> bool:
        return self._explicit_keys is None

    # -- preparation ------------------------------------------------------------------

    def _prepare(self) -> None:
        t, engine, tid = self.t, self.engine, self.t.transformation_id
        self.meta = meta_table(self.spark, engine.plane, t)
        self._discard_crashed_hot_deltas()
        deltas, clock = engine.catalog.snapshot_state([inp.name for inp in t.inputs])
        self.snapshot = RunSnapshot(deltas, clock)
        self.snapshot_commit_ts = {
            name: engine.catalog.by_num(name, num).commit_ts for name, num in deltas.items() if num > 0
        }
        self.offsets_before = engine.offsets.get_offsets_for_transformation(tid)
        self.pending_request = ReprocessRequests(engine.plane).pending(tid)
        if self.reprocess_all:
            # The reset is written in the run's first commit: a backfill that fails before
            # it leaves the offsets as they were.
            self.offsets_reset = dict(self.offsets_before)
            log.warning("reprocess_all: %s processes every key; offsets %s are reset at commit",
                        tid, self.offsets_reset)
            self.offsets_before = {}
        # A reprocess covers the keys whose meta is older than R: R = this run's process_ts
        # for a backfill (every earlier process_ts is smaller, so it covers whatever a
        # pending request covers and more), else the pending request's.
        self.request_ts = clock if self.reprocess_all else self.pending_request
        self._listed_failures = FailedDeltas(engine.plane).listed(tid) if self.is_full else []
        self.result = RunResult(
            transformation_id=tid,
            run_id=self.run_id,
            mode="full" if self.is_full else "changelist",
            change_detection=("explicit" if not self.is_full else
                              "reprocess_all" if self.reprocess_all else self.change_detection),
            commit_mode=t.commit_mode,
            process_ts=clock,
            snapshot_deltas=dict(deltas),
            offsets_before=dict(self.offsets_before),
            started_at=self._started_at,
        )
        self.result.offsets_reset = self.offsets_reset
        self.keys = self._select_keys()
        if isinstance(self.keys, LocalKeys):
            self.batch_sizes = {i: len(b) for i, b in enumerate(self.keys.batches)}
            self._batch_min_ts = dict(enumerate(self.keys.min_ts))
        else:
            self.batch_sizes = dict(self.keys.sizes)
            self._batch_min_ts = self.keys.min_ts
        self.batches: list[int] = sorted(self.batch_sizes)
        self.result.changed_keys = sum(self.batch_sizes.values())
        self.result.batches = len(self.batches)

    def _index_request(self) -> IndexRequest:
        return index_request(self.engine.plane, self.t.transformation_id, self.snapshot, self.offsets_before,
                             self.change_detection, self.request_ts, self._listed_failures,
                             use_settled=not self.reprocess_all)

    def _select_keys(self) -> LocalKeys | DistributedKeys:
        columns = self.transform_keys
        limit = self.engine.driver_keys_limit
        if not self.is_full:
            return self._explicit(columns, limit)
        request = self._index_request()
        by_input = request.deltas_by_input(self.t)
        self._deltas_read = by_input if request.use_offsets else {}
        index = compute_changed_index(self.t, self.meta, request, self.engine.pushdown_limit, by_input,
                                      broadcast_limit=limit)
        if index is None:
            return local_from_keys(columns, [], self.t.batch_size)
        if index.most_rows is not None and index.most_rows <= limit:
            # The catalog bounds the index within the limit: collect it, one job.
            return local_from_rows(columns, index.rows.collect(), self.t.batch_size)
        rows = index.rows.persist(StorageLevel.MEMORY_AND_DISK)
        try:
            # Not bounded by the catalog (v1, a reference input's changes): count, then
            # collect from the cache, two jobs. (A `limit().collect()` is a `take`, which
            # scans partitions in growing rounds: one job per round.) Bounded above the
            # limit (a first run, a reprocess of a large table): no count, the keys stay
            # distributed and the run streams through their batches.
            if index.most_rows is None and rows.count() <= limit:
                return local_from_rows(columns, rows.collect(), self.t.batch_size)
            self._deltas_read = {}
            return distributed_from_rows(columns, rows, self.t.batch_size,
                                         with_min_ts=self.t.commit_mode == "batch", broadcast_limit=limit)
        finally:
            rows.unpersist()

    def _explicit(self, columns: list[str], limit: int) -> LocalKeys | DistributedKeys:
        self._deltas_read = {}
        keys = self._explicit_keys
        if isinstance(keys, DataFrame):
            missing = [k for k in columns if k not in keys.columns]
            if missing:
                raise TransformationOutputError(
                    f"run_changelist of {self.t.transformation_id!r}: keys lack column(s) {missing}"
                )
            frame = keys.select(*columns).where(" AND ".join(f"`{c}` IS NOT NULL" for c in columns)).distinct()
            collected = frame.limit(limit + 1).collect()
            if len(collected) > limit:
                rows = frame.select(*columns, F.lit(None).cast("double").alias("update_ts"),
                                    F.lit(None).cast("string").alias("_input_name"))
                return distributed_from_rows(columns, rows, self.t.batch_size, with_min_ts=False,
                                             broadcast_limit=limit)
            return local_from_keys(columns, [tuple(row) for row in collected], self.t.batch_size)
        values = []
        for row in keys:
            missing = [k for k in columns if k not in row]
            if missing:
                raise TransformationOutputError(
                    f"run_changelist of {self.t.transformation_id!r}: key {dict(row)!r} lacks column(s) {missing}"
                )
            values.append(tuple(row[k] for k in columns))
        return local_from_keys(columns, values, self.t.batch_size)

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

    # -- batches ----------------------------------------------------------------------

    def _batch(self, batch: int) -> KeyValues | DataFrame:
        return self.keys.batch(batch)

    def batch_keys(self, batch: int) -> DataFrame:
        """The transform keys of `batch` as a DataFrame."""
        keys = self._batch(batch)
        return keys.frame(self.meta) if isinstance(keys, KeyValues) else keys

    def _reads(self) -> Any:
        """Reads built in this block broadcast only what the catalog bounds within the
        driver limit (`versioned.reads.broadcast_limit`)."""
        return broadcast_limit(self.engine.driver_keys_limit)

    def _read_for_keys(self, table: VersionedTable, keys: KeyValues | DataFrame, as_of: int | None) -> DataFrame:
        with self._reads():
            if isinstance(keys, KeyValues):
                return read_actual_of_keys(table, keys, as_of, self.engine.pushdown_limit)
            # A batch of distributed keys: hinted by `DistributedKeys.batch`.
            return table.read_actual(as_of_delta=as_of, keys=keys)

    def _primary_frame(self, inp: Any, keys: KeyValues | DataFrame) -> DataFrame:
        """Actual rows of a primary input for the batch's keys. Keys that this input's
        changes marked are read from the deltas the run read (their newest version is
        there); others (failed, reprocessed, marked through a reference) from the table."""
        table, as_of = inp.table, self.snapshot.deltas.get(inp.name, 0)
        deltas = self._deltas_read.get(inp.name)
        if (not isinstance(keys, KeyValues) or not deltas
                or set(table.primary_key) != set(self.transform_keys)):
            return self._read_for_keys(table, keys, as_of).select(*table.data_columns)
        # KeyValues columns follow the transform keys; the primary key may list them in
        # another order, which `latest_of_keys` does not mind (it joins by name).
        marked = self.keys.marked_by
        via_changes = tuple(k for k in keys.rows if inp.name in marked.get(k, ()))
        others = tuple(k for k in keys.rows if inp.name not in marked.get(k, ()))
        parts = []
        if via_changes:
            parts.append(latest_of_keys(table, deltas, KeyValues(keys.columns, via_changes),
                                        self.engine.pushdown_limit))
        if others or not parts:
            parts.append(self._read_for_keys(table, KeyValues(keys.columns, others), as_of)
                         .select(*table.data_columns))
        return _union(parts)

    def input_frames(self, batch: int) -> dict[str, DataFrame]:
        """Actual rows (as of the run snapshot) of every input for the keys of `batch`.

        Primary inputs are read for the batch's keys; reference inputs only for the join
        values those rows hold (filtered join), never whole. One aggregate per primary
        input counts its rows and collects those join values in the same Spark job."""
        keys = self._batch(batch)
        frames: dict[str, DataFrame] = {}
        join_values: dict[str, set[tuple]] = {}
        distributed_values: dict[str, list[DataFrame]] = {}
        for inp in self.t.primary_inputs:
            frame = self._persist(self._primary_frame(inp, keys))
            frames[inp.name] = frame
            columns = sorted({c for ref in self.t.reference_inputs for c in ref.join_keys
                              if c in inp.table.data_columns})
            if isinstance(keys, DataFrame):
                # Distributed keys: the join values stay distributed too (a batch's may be
                # as many as its rows), and the reference is semi-joined with them.
                self.result.add_rows_read(inp.name, frame.count())
                for ref in self.t.reference_inputs:
                    if set(ref.join_keys) <= set(columns):
                        distributed_values.setdefault(ref.name, []).append(frame.select(*ref.join_keys))
                continue
            groups = frame.groupBy(*columns).count().collect()
            self.result.add_rows_read(inp.name, sum(row["count"] for row in groups))
            for ref in self.t.reference_inputs:
                if set(ref.join_keys) <= set(columns):
                    wanted = join_values.setdefault(ref.name, set())
                    wanted.update(tuple(row[c] for c in ref.join_keys) for row in groups)
        for ref in self.t.reference_inputs:
            as_of = self.snapshot.deltas.get(ref.name, 0)
            if isinstance(keys, DataFrame):
                with self._reads():
                    if ref.name in distributed_values:
                        frame = read_actual_matching(ref.table, _union(distributed_values[ref.name]),
                                                     dict(ref.join_keys), as_of, self.engine.pushdown_limit,
                                                     broadcast_limit=self.engine.driver_keys_limit)
                    else:
                        frame = ref.table.read_actual(as_of_delta=as_of).where(F.lit(False))
                frames[ref.name] = self._persist(frame.select(*ref.table.data_columns))
                self.result.add_rows_read(ref.name, frames[ref.name].count())
                continue
            values = tuple(v for v in join_values.get(ref.name, ()) if None not in v)
            wanted = KeyValues(tuple(ref.join_keys.values()), values)
            with self._reads():
                frame = read_actual_of_keys(ref.table, wanted, as_of, self.engine.pushdown_limit)
            frames[ref.name] = self._persist(frame.select(*ref.table.data_columns))
            self.result.add_rows_read(ref.name, frames[ref.name].count())
        return frames

    def _persist(self, df: DataFrame) -> DataFrame:
        df = df.persist(StorageLevel.MEMORY_AND_DISK)
        self._batch_frames.append(df)
        return df

    def _release_batch_frames(self) -> None:
        for df in self._batch_frames:
            df.unpersist()
        self._batch_frames.clear()

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
        """Write the batch's outputs (end mode: into the run's hot deltas; batch mode: and
        commit them). An output the function got wrong fails the batch, not the run."""
        try:
            outputs = self._evaluate_outputs(batch, produced)
            hots = self._write_outputs(batch, outputs)
        except Exception as exc:  # noqa: BLE001 - errors of the user's function surface here
            self.record_failure(batch, exc)
            return False
        self.result.processed_keys += self.batch_sizes[batch]
        if self.t.commit_mode == "batch":
            self._commit(list(hots.values()), [(self._batch(batch), None)], batch)
        else:
            self._meta_pending.append((self._batch(batch), None))
        self._release_batch_frames()
        return True

    def record_failure(self, batch: int, exc: BaseException) -> None:
        count = self.batch_sizes[batch]
        text = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        log.error("batch %s of %s failed for %s key(s): %s", batch, self.t.transformation_id, count, text)
        self.result.failed_keys += count
        self.result.batches_failed += 1
        self.result.errors.append(f"batch {batch}: {text[:1000]}")
        self._failed_in_run += count
        if self.t.commit_mode == "batch":
            self._commit([], [(self._batch(batch), text)], batch)
        else:
            self._meta_pending.append((self._batch(batch), text))
        self._release_batch_frames()

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
        evaluated = {}
        for name, df in produced.items():
            table = by_name[name]
            missing = [c for c in table.data_columns if c not in df.columns]
            if missing:
                raise TransformationOutputError(
                    f"transformation {tid!r}: output {name!r} lacks column(s) {missing}"
                )
            evaluated[name] = self._persist(df.select(*table.data_columns))
        return evaluated

    def _flag_stray_rows(self, output: DataFrame, batch: int) -> DataFrame:
        """`output` with a column STRAY: true where the row's transform key is not one of
        the batch's keys. The write refuses such rows (`Refusal`) within its own
        classification, so the check costs no Spark job of its own."""
        keys = self._batch(batch)
        if isinstance(keys, KeyValues) and keys.fit_in_filter(self.engine.pushdown_limit):
            # A filter, not a join: broadcasting even a tiny key relation is a job.
            column = F.col(f"`{keys.columns[0]}`")
            return output.withColumn(
                STRAY, column.isNull() | ~in_values(keys.columns[0], [row[0] for row in keys.rows]))
        in_batch = self.batch_keys(batch).withColumn(IN_BATCH, F.lit(True))
        joined = output.join(in_batch, on=self.transform_keys, how="left")
        return joined.withColumn(STRAY, F.col(IN_BATCH).isNull()).drop(IN_BATCH)

    def _write_outputs(self, batch: int, outputs: Mapping[str, DataFrame]) -> dict[str, HotDelta]:
        """Write each output's replacement of the batch's keys into its hot delta."""
        by_name = {out.name: out for out in self.t.outputs}
        hots: dict[str, HotDelta] = {}
        savepoints = {}
        stats = {}
        try:
            for name, df in outputs.items():
                table = by_name[name]
                if self.t.commit_mode == "batch" or name not in self._output_hots:
                    hot = table.open_delta(holder=self.holder, run_id=self.run_id)
                    if self.t.commit_mode == "end":
                        self._output_hots[name] = hot
                else:
                    hot = self._output_hots[name]
                hots[name] = hot
                savepoints[name] = hot.savepoint()
                stats[name] = self._write_replacement(hot, table, df, batch)
        except BaseException:
            # The other outputs of a failed batch must not keep its rows: end mode undoes
            # this batch's writes in the run's hot deltas, batch mode drops its own.
            for name, hot in hots.items():
                if self.t.commit_mode == "end":
                    hot.restore(savepoints[name])
                else:
                    _rollback_quietly(hot)
            raise
        for name, written in stats.items():
            self.result.add_written(name, written.rows_upserted, written.rows_deleted)
        return hots

    def _write_replacement(self, hot: HotDelta, table: VersionedTable, new: DataFrame, batch: int) -> Any:
        """The processed keys' new output, plus deletes of their previous output rows that
        the new output no longer has: one write of upserts and tombstones. A row for a
        transform key the batch did not process refuses the write."""
        previous = self._read_for_keys(table, self._batch(batch), None).persist(StorageLevel.MEMORY_AND_DISK)
        try:
            pk = list(table.primary_key)
            # The new output's keys: left to Spark (a broadcast, a job of its own) when the
            # batch's keys are bounded, shuffled when a batch may be larger than the limit.
            new_keys = new.select(*pk)
            if isinstance(self.keys, DistributedKeys) and self.keys.shuffled:
                new_keys = new_keys.hint("merge")
            gone = previous.select(*pk).join(new_keys, on=pk, how="left_anti")
            deletes = gone.select(
                *[F.col(c) if c in pk else F.lit(None).cast(table.schema[c].dataType).alias(c)
                  for c in table.data_columns],
                F.lit(1).alias("sys_op"),
                F.lit(False).alias(STRAY),
            )
            rows = self._flag_stray_rows(new, batch).withColumn("sys_op", F.lit(0)).unionByName(deletes)
            # Every written key's actual row belongs to a processed key when the output's
            # primary key holds the transform keys: the read above is then the whole
            # candidate set and the write reads nothing more.
            actual = previous if set(self.transform_keys) <= set(pk) else None
            tid = self.t.transformation_id

            def stray_error(example: dict) -> Exception:
                return TransformationOutputError(
                    f"transformation {tid!r}: output {table.name!r} has a row for transform key "
                    f"{example} that this batch did not process"
                )

            # Batch mode writes each output delta once, then commits it.
            return hot.write(rows, actual=actual, refusal=Refusal(STRAY, self.transform_keys, stray_error),
                             last=self.t.commit_mode == "batch")
        finally:
            previous.unpersist()

    # -- commit -----------------------------------------------------------------------

    def _offsets_after(self, batch: int | None) -> dict[str, float]:
        if not self.is_full:
            return {}  # run_changelist never moves offsets
        waiting = [] if batch is None else [ts for later, ts in self._batch_min_ts.items() if later > batch]
        return offsets_after(self.snapshot_commit_ts, self.offsets_before, waiting)

    def _meta_frame(self, pending: Sequence[tuple[KeyValues | DataFrame, str | None]]) -> tuple[DataFrame, int, int]:
        """(meta rows, rows, failed rows) of processed and failed batches."""
        process_ts = self.snapshot.process_ts
        if all(isinstance(keys, KeyValues) for keys, _ in pending):
            rows = [(*key, process_ts, error is None, None if error is None else error[:ERROR_TEXT_LIMIT])
                    for keys, error in pending for key in keys.rows]
            failed = sum(len(keys.rows) for keys, error in pending if error is not None)
            return self.spark.createDataFrame(rows, self.meta.schema), len(rows), failed
        frames = [meta_rows(keys if isinstance(keys, DataFrame) else keys.frame(self.meta), process_ts, error)
                  for keys, error in pending]
        sizes = [len(k.rows) if isinstance(k, KeyValues) else k.count() for k, _ in pending]
        failed = sum(size for size, (_, error) in zip(sizes, pending, strict=True) if error is not None)
        return _union(frames), sum(sizes), failed

    def _commit(self, hots: list[HotDelta], meta: Sequence[tuple[KeyValues | DataFrame, str | None]],
                batch: int | None, final: bool = False) -> None:
        plan = CommitPlan(self.t.transformation_id, self.lease_holder, offsets=self._offsets_after(batch))
        if self.reprocess_all and not self._first_commit_done:
            plan.reset_offsets = True
            if self.t.commit_mode == "batch":
                plan.reprocess_request_ts = self.request_ts
        if final and self.is_full:
            plan.final = True
            plan.complete_request_ts = self.request_ts
            plan.drop_failed_deltas = self._listed_failures
            # v1 as well as v2: a complete run of either processed every change up to its snapshot.
            plan.settled = dict(self.snapshot.deltas)
        meta_hot = None
        try:
            if meta:
                frame, rows, failed = self._meta_frame(meta)
                if rows:
                    meta_hot = self.meta.open_delta(holder=self.holder, run_id=self.run_id)
                    meta_hot.write_new_versions(frame, rows)
                    plan.failed_meta_keys = failed
            written = [hot for hot in hots if hot.rows_upserted or hot.rows_deleted or hot.rows_unchanged]
            for hot in hots:
                if hot not in written:
                    hot.rollback()
            commit_run_work(self.engine.plane, written, meta_hot, plan)
        except BaseException:
            for hot in [*hots, *([meta_hot] if meta_hot else [])]:
                _rollback_quietly(hot)
            raise
        self._first_commit_done = True
        for hot in [*written, *([meta_hot] if meta_hot else [])]:
            self.result.add_delta(hot.table.name, hot.delta_num)
        self.result.offsets_after = {**self.result.offsets_after, **plan.offsets}

    def finish(self) -> RunResult:
        """Commit what the run holds: in end mode everything, in one transaction; in batch
        mode the bookkeeping of a complete run (its batches are committed already)."""
        if self._finished:
            raise TransformationOutputError(f"run {self.run_id} of {self.t.transformation_id!r} already finished")
        if self.t.commit_mode == "end":
            self._commit(list(self._output_hots.values()), self._meta_pending, None, final=True)
        else:
            self._commit([], [], None, final=True)
        self._finished = True
        # The stored offsets now, without reading them back: we hold the lease, so only our
        # commits changed them (offsets_before is empty when the first commit reset them).
        self.result.offsets_after = {**self.offsets_before, **self.result.offsets_after}
        self.result.duration_s = time.monotonic() - self._started
        self.result.finished_at = time.time()
        log.info("%s", self.result.summary())
        return self.result


def _rollback_quietly(hot: HotDelta) -> None:
    if not hot.is_open:
        return
    try:
        hot.rollback()
    except Exception:  # noqa: BLE001 - the original error matters more
        log.exception("rollback of hot delta %s of %s failed", hot.delta_num, hot.table.name)


def _union(frames: Sequence[DataFrame]) -> DataFrame:
    result = frames[0]
    for frame in frames[1:]:
        result = result.unionByName(frame)
    return result
