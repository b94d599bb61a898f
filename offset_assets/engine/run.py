"""One run of one transformation, from lease to commit: the protocol that `run_full`,
`run_changelist` and the Dagster IO manager all drive.

    with engine.open_run(t, request) as run:
        for batch in run.batches:
            run.process_batch(batch, t.func)      # or input_frames + apply_outputs
        result = run.finish()

A run holds the transformation's lease, reads its state from the control plane once
(`state.py`: snapshot, offsets, the deltas to read, failures, a reprocess request, the
tables' sizes, which decide whether it runs as a small run: `evaluation.py`),
selects its keys (`keys.py`: the changed index, or a changelist's keys), loads each
batch's inputs (`loading.py`), writes its outputs (`outputs.py`) and commits outputs,
meta (`meta.py`) and offsets together (`commit.py`):

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
from collections.abc import Callable, Mapping
from contextlib import ExitStack
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from offset_assets.control_plane.leases import LeaseKeeper, make_holder
from offset_assets.engine.changed_keys import DistributedKeys, KeysLike, LocalKeys, RunSnapshot, select_keys
from offset_assets.engine.commit import commit_batches, discard_dead_hot_deltas, plan_commit
from offset_assets.engine.errors import TransformationOutputError, error_text
from offset_assets.engine.held_inputs import HeldInputs
from offset_assets.engine.loading import InputLoader, KeyValues, RunReads
from offset_assets.engine.meta import PendingBatch, meta_table
from offset_assets.engine.outputs import OutputWriter
from offset_assets.engine.result import RunResult
from offset_assets.engine.state import RunEngine, RunState
from offset_assets.engine.transformation import Transformation
from offset_assets.engine.vocabulary import CommitMode, RunMode, RunRequest, change_detection_of
from offset_assets.run_profile import Profiler
from offset_assets.versioned.caching import storage_level
from offset_assets.versioned.evaluation import small_run_settings
from offset_assets.versioned.hot_delta import HotDelta

log = logging.getLogger(__name__)

__all__ = ["KeysLike", "TransformationRun"]


class TransformationRun:
    """One run of one transformation (see the module docstring for the protocol)."""

    def __init__(self, engine: RunEngine, transformation: Transformation, run_id: str,
                 request: RunRequest) -> None:
        self.engine = engine
        self.t = transformation
        self.run_id = run_id
        self.lease_holder = make_holder(run_id)
        # Hot deltas name the transformation too, so a later run can recognise its own leftovers.
        self.holder = f"{transformation.transformation_id}:{self.lease_holder}"
        self.request = request
        self.change_detection = change_detection_of(request.change_detection or transformation.change_detection,
                                                    transformation.transformation_id)
        self._reads = RunReads(engine.pushdown_limit, engine.driver_keys_limit)
        self._keeper = LeaseKeeper(engine.leases, transformation.transformation_id, self.lease_holder,
                                   engine.lease_ttl_s)
        self._keys: LocalKeys | DistributedKeys | None = None
        self._writer: OutputWriter | None = None
        self._held_inputs: HeldInputs | None = None
        self._batch_frames: list[DataFrame] = []
        self._keys_present: dict[int, int] = {}  # per batch read: keys an input holds, when known
        self._meta_pending: list[PendingBatch] = []
        self._first_commit_done = False
        self._finished = False
        self._started = 0.0
        self._started_at: float | None = None
        self._profiler: Profiler | None = None
        self._session_settings = ExitStack()

    # -- lifecycle --------------------------------------------------------------------

    def __enter__(self) -> TransformationRun:
        self._started = time.monotonic()
        self._started_at = time.time()
        self._profiler = profiler = Profiler.start(self.spark)
        try:
            with profiler.phase("open"):
                self._keeper.__enter__()
        except BaseException:
            profiler.stop()
            raise
        try:
            self._open()
        except BaseException:
            self._close()
            raise
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        self._close()

    def _close(self) -> None:
        self._release_batch_frames()
        if self._keys is not None:
            self._keys.release()
        if not self._finished and self._writer is not None:
            # Files of an unfinished end-mode run are garbage: discard them now rather than
            # leave them to the next run.
            self._writer.discard()
        if not self._finished and log.isEnabledFor(logging.DEBUG):
            log.debug("profile of unfinished run %s of %s: %s", self.run_id, self.t.transformation_id,
                      self._profiler.finish().describe())
        self._profiler.stop()
        self._keeper.__exit__(None, None, None)
        self._session_settings.close()

    def _open(self) -> None:
        with self._profiler.phase("open"):
            self._read_state()
            self._session_settings.enter_context(small_run_settings(
                self.spark, self.state.versions_stored.values(), self.engine.small_run_rows_limit))
        with self._profiler.phase("changed_index"):
            selected = select_keys(self.t, self.meta, self.state.request, self.state.by_input, self.request.keys,
                                   self.engine.pushdown_limit, self.engine.driver_keys_limit,
                                   self.engine.held_rows_limit)
        self._keys = selected.keys
        held_limit = self.engine.held_rows_limit
        self._writer = OutputWriter(self.t, self.holder, self.run_id, self._reads, self.meta, self.result,
                                    selected.keys, held_limit)
        marked_by = selected.keys.marked_by if isinstance(selected.keys, LocalKeys) else {}
        self._loader = InputLoader(self.t, self.state.snapshot.deltas, selected.deltas_read, marked_by, self._reads)
        self._held_inputs = HeldInputs(self.t, self.state.snapshot.deltas, selected.deltas_read, marked_by,
                                       held_limit) if held_limit > 0 and isinstance(selected.keys, LocalKeys) else None
        self.batch_sizes = selected.keys.batch_sizes()
        self._batch_min_ts = selected.keys.batch_min_ts()
        self.batches: list[int] = sorted(self.batch_sizes)
        self.result.changed_keys = sum(self.batch_sizes.values())
        self.result.batches = len(self.batches)

    def _read_state(self) -> None:
        t = self.t
        self.meta = meta_table(self.spark, self.engine.plane, t)
        # We hold the lease: a hot delta an earlier run of t left belongs to a crashed run.
        discard_dead_hot_deltas([*t.outputs, self.meta], t.transformation_id)
        self.state = state = RunState.read(self.engine, t, self.request.mode, self.change_detection)
        self.result = RunResult.at_snapshot(
            t.transformation_id, self.run_id, state.snapshot.deltas, state.snapshot.process_ts,
            state.offsets_before, state.snapshot_commit_ts,
            mode=self._mode(state), change_detection=self.change_detection, commit_mode=t.commit_mode,
            started_at=self._started_at,
        )
        self.result.offsets_reset = dict(state.offsets_reset)
        self.result.offsets_reset_at = state.offsets_reset_at
        self.result.reprocess_requested_at = state.requested_at
        self.result.requested = self.request.mode
        for name, rows in state.output_rows.items():
            self._count_rows(name, rows)

    def _mode(self, state: RunState) -> RunMode:
        """A full run fulfilling a reprocess (a backfill's, or a pending request it works
        on) reprocesses; a rescan asked rescans; any other full run is incremental."""
        if not state.full:
            return RunMode.changelist
        if state.request_ts is not None:
            return RunMode.reprocess
        return RunMode.rescan if state.requested == RunMode.rescan else RunMode.incremental

    def _count_rows(self, output: str, actual_rows: int | None) -> None:
        """The output's actual rows now, as the catalog counted them at its last commit."""
        if actual_rows is None:
            self.result.output_rows.pop(output, None)
        else:
            self.result.output_rows[output] = actual_rows

    @property
    def spark(self) -> SparkSession:
        return self.engine.spark

    @property
    def snapshot(self) -> RunSnapshot:
        return self.state.snapshot

    @property
    def transform_keys(self) -> list[str]:
        return list(self.t.transform_keys)

    # -- batches ----------------------------------------------------------------------

    def _batch(self, batch: int) -> KeyValues | DataFrame:
        return self._keys.batch(batch)

    def _pending(self, batch: int, error: str | None) -> PendingBatch:
        return PendingBatch(self._batch(batch), self.batch_sizes[batch], error)

    def input_frames(self, batch: int) -> dict[str, DataFrame]:
        """Actual rows (as of the run snapshot) of every input for the keys of `batch`
        (`loading.InputLoader`: reference inputs only for the join values found)."""
        counted = self._counting_input()
        before = self.result.rows_read.get(counted, 0) if counted is not None else 0
        keys = self._batch(batch)
        with self._profiler.phase("input_reads"):
            frames = self._held_inputs.frames(keys, self.result) if self._held_inputs is not None else None
            if frames is None:
                frames = self._loader.frames(keys, self._persist, self.result)
        if counted is not None:
            self._keys_present[batch] = self.result.rows_read.get(counted, 0) - before
        return frames

    def _counting_input(self) -> str | None:
        """The input whose rows read count the batch's keys it holds, without a Spark job
        of their own: the only primary input, when its primary key is the transform key
        (one actual row per key). A batch key it does not hold is a deletion."""
        primary = self.t.primary_inputs
        if len(primary) == 1 and set(primary[0].table.primary_key) == set(self.t.transform_keys):
            return primary[0].name
        return None

    def _persist(self, df: DataFrame) -> DataFrame:
        df = df.persist(storage_level(isinstance(self._keys, DistributedKeys) and self._keys.shuffled))
        self._batch_frames.append(df)
        return df

    def _release_batch_frames(self) -> None:
        for df in self._batch_frames:
            df.unpersist()
        self._batch_frames.clear()

    def process_batch(self, batch: int, func: Callable[..., Any]) -> bool:
        """Run `func` on the batch and hand its outputs on; False when the batch failed."""
        frames = self.input_frames(batch)
        try:
            with self._profiler.phase("function"):
                produced = func(**frames)
        except Exception as exc:  # noqa: BLE001 - a failing batch is recorded, not fatal
            self.record_failure(batch, exc)
            return False
        return self.apply_outputs(batch, produced)

    def apply_outputs(self, batch: int, produced: DataFrame | Mapping[str, DataFrame]) -> bool:
        """Write the batch's outputs (end mode: into the run's hot deltas; batch mode: and
        commit them). An output the function got wrong fails the batch, not the run."""
        shuffled = isinstance(self._keys, DistributedKeys) and self._keys.shuffled
        try:
            with self._profiler.phase("output_write"):
                outputs = self._writer.evaluate(produced, self._persist)
                hots = self._writer.write(batch, outputs, shuffled, last=batch == self.batches[-1])
        except Exception as exc:  # noqa: BLE001 - errors of the user's function surface here
            self.record_failure(batch, exc)
            return False
        self.result.processed_keys += self.batch_sizes[batch]
        if self.t.commit_mode == CommitMode.batch:
            self._commit(list(hots.values()), [self._pending(batch, None)], batch)
        else:
            self._meta_pending.append(self._pending(batch, None))
        self._release_batch_frames()
        return True

    def record_failure(self, batch: int, exc: BaseException) -> None:
        """Record the keys of `batch` as failed with the error's text (batch mode: commit it).

        Every key of the batch is recorded failed in meta and retried by later runs, the
        deleted ones too: a batch's outputs are written whole or not at all, so their
        deletion waits with the rest. The result counts them apart where that costs no
        Spark job (`_counting_input`): `failed_keys` are the keys the function failed for,
        `deletions_waiting` the keys no input holds; elsewhere every key counts as failed."""
        count = self.batch_sizes[batch]
        text, whole = error_text(exc)
        present = self._keys_present.get(batch)
        deletions = 0 if present is None else max(0, count - present)
        log.error("batch %s of %s failed for %s key(s): %s", batch, self.t.transformation_id, count,
                  text.splitlines()[0] if text else text)
        log.debug("batch %s of %s failed: %s", batch, self.t.transformation_id, whole)
        self.result.failed_keys += count - deletions
        self.result.deletions_waiting += deletions
        self.result.batches_failed += 1
        self.result.errors.append(f"batch {batch}: {text[:1000]}")
        if self.t.commit_mode == CommitMode.batch:
            self._commit([], [self._pending(batch, text)], batch)
        else:
            self._meta_pending.append(self._pending(batch, text))
        self._release_batch_frames()

    # -- commit -----------------------------------------------------------------------

    def _commit(self, hots: list[HotDelta], meta: list[PendingBatch],
                batch: int | None, final: bool = False) -> None:
        plan = plan_commit(self.state, self.lease_holder, self.t.commit_mode, self._batch_min_ts, batch,
                           first=not self._first_commit_done, final=final)
        with self._profiler.phase("commit"):
            committed = commit_batches(self.engine.plane, plan, hots, self.meta, meta,
                                       self.state.snapshot.process_ts, self.holder, self.run_id,
                                       held=self.engine.held_rows_limit > 0)
        self._first_commit_done = True
        for hot in committed:
            self.result.add_delta(hot.table.name, hot.delta_num)
            if hot.table.name != self.meta.name:
                self._count_rows(hot.table.name, hot.info.actual_rows)
        self.result.offsets_after = {**self.result.offsets_after, **plan.offsets}

    def finish(self) -> RunResult:
        """Commit what the run holds: in end mode everything, in one transaction; in batch
        mode the bookkeeping of a complete run (its batches are committed already)."""
        if self._finished:
            raise TransformationOutputError(f"run {self.run_id} of {self.t.transformation_id!r} already finished")
        if self.t.commit_mode == CommitMode.end:
            if self._writer.departures_pending:
                with self._profiler.phase("output_write"):
                    self._writer.write_departures()
            self._commit(list(self._writer.hots.values()), self._meta_pending, None, final=True)
        else:
            self._commit([], [], None, final=True)
        self._finished = True
        self.result.profile = self._profiler.finish()
        log.debug("profile of run %s of %s: %s", self.run_id, self.t.transformation_id,
                  self.result.profile.describe())
        # The stored offsets now, without reading them back: we hold the lease, so only our
        # commits changed them (offsets_before is empty when the first commit reset them).
        self.result.offsets_after = {**self.state.offsets_before, **self.result.offsets_after}
        self.result.duration_s = time.monotonic() - self._started
        self.result.finished_at = time.time()
        log.info("%s", self.result.summary())
        return self.result
