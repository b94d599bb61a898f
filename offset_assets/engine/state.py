"""A run's state, read once: what the control plane tells a run when it starts.

`RunState.read` runs once per run, after the lease is taken: the snapshot (each input's
last committed delta and the commit clock), the offsets, and for a full run the pending
reprocess request, the meta deltas listed as holding failed keys, the settled deltas
(`IndexRequest`) and the deltas each input contributes since its offset, with their row
counts (which bound the changed index before any Spark job). Key selection (`changed_keys/`),
loading (`loading.py`) and the commit plan (`commit.py`) take what they need from it and
read none of it again; only the commit transaction reads (and writes) the control plane
after it, for its own checks (`commit.py`).

`RunEngine` names the parts of an `IncrementalEngine` a run uses.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from pyspark.sql import SparkSession

from offset_assets.control_plane.database import ControlPlane
from offset_assets.control_plane.delta_catalog import DeltaCatalog
from offset_assets.control_plane.delta_catalog.records import DeltaInfo
from offset_assets.control_plane.failures import FailedDeltas
from offset_assets.control_plane.leases import RunLeases
from offset_assets.control_plane.offset_resets import OffsetResets
from offset_assets.control_plane.offsets import OffsetRepository
from offset_assets.control_plane.reprocess import ReprocessRequests
from offset_assets.engine.changed_keys import IndexRequest, RunSnapshot, snapshot_commit_ts
from offset_assets.engine.pending import index_request
from offset_assets.engine.transformation import Transformation
from offset_assets.engine.vocabulary import ChangeDetection, RunMode

log = logging.getLogger(__name__)


class RunEngine(Protocol):
    """What a run uses of its engine (`IncrementalEngine` is one)."""

    spark: SparkSession
    plane: ControlPlane
    catalog: DeltaCatalog
    offsets: OffsetRepository
    leases: RunLeases
    lease_ttl_s: float
    pushdown_limit: int
    driver_keys_limit: int
    small_run_rows_limit: int
    held_rows_limit: int


@dataclass(frozen=True)
class RunState:
    """What a run works from, read from the control plane at its start.

    `requested`: the mode the run was asked for (`RunRequest.mode`); `offsets_before`:
    the offsets the run reads from (none for a reprocess, whose first
    commit deletes them); `offsets_reset`: what a full run reports as reset, the offsets
    a backfill deletes and those reset between runs (`OffsetResets`, reset at
    `offsets_reset_at`), which its final commit stops recording; `request_ts`: the clock value R of the reprocess the
    run fulfils (a backfill's own snapshot clock, else a pending request's), and
    `requested_at` the wall clock at which a pending request was made (None for a
    backfill); `request` and `by_input` (the deltas each input contributes) only for a
    full run. `snapshot_commit_ts`: the commit_ts of each input's snapshot delta, what a
    full run's offsets move to and what every run's offset lag is measured against.
    `versions_stored`: the versions each table the run reads (inputs, outputs, meta) has
    stored, from the catalog's counts (`evaluation.py`); `output_rows`: each output's
    actual rows as of its last commit (None: unknown), what the run's commits add to."""

    transformation_id: str
    requested: RunMode
    snapshot: RunSnapshot
    offsets_before: Mapping[str, float]
    offsets_reset: Mapping[str, float] = field(default_factory=dict)
    offsets_reset_at: float | None = None
    request_ts: float | None = None
    requested_at: float | None = None
    listed_failures: Sequence[int] = ()
    request: IndexRequest | None = None
    by_input: Mapping[str, list[DeltaInfo]] = field(default_factory=dict)
    snapshot_commit_ts: Mapping[str, float] = field(default_factory=dict)
    versions_stored: Mapping[str, int | None] = field(default_factory=dict)
    output_rows: Mapping[str, int | None] = field(default_factory=dict)

    @property
    def full(self) -> bool:
        return self.requested.full

    @property
    def reprocesses(self) -> bool:
        """The run was asked to reprocess every key (a backfill)."""
        return self.requested == RunMode.reprocess

    @property
    def resets_offsets(self) -> bool:
        return self.requested.resets_offsets

    @classmethod
    def read(cls, engine: RunEngine, t: Transformation, requested: RunMode,
             change_detection: ChangeDetection) -> RunState:
        """The state of a run of `t` asked `requested`, starting now (the caller holds its lease)."""
        full, reprocess, resets = requested.full, requested == RunMode.reprocess, requested.resets_offsets
        tid, catalog = t.transformation_id, engine.catalog
        input_names = [inp.name for inp in t.inputs]
        deltas, clock = catalog.snapshot_state(input_names)
        snapshot = RunSnapshot(deltas, clock)
        offsets = engine.offsets.get_offsets_for_transformation(tid)
        stored = catalog.versions_stored([*input_names, *(out.name for out in t.outputs), t.meta_table_name])
        output_rows = catalog.actual_rows([out.name for out in t.outputs])
        offsets_reset: dict[str, float] = {}
        request_ts: float | None = None
        requested_at: float | None = None
        if resets:
            # The reset is written in the run's first commit: a backfill (or a rescan) that
            # fails before it leaves the offsets as they were.
            offsets_reset = dict(offsets)
            log.warning("%s: %s reads every input from the start; offsets %s are reset at commit",
                        requested, tid, offsets_reset)
            offsets = {}
        if reprocess:
            # R = this run's process_ts: every earlier process_ts is smaller, so it covers
            # whatever a pending request covers and more.
            request_ts = clock
        elif full:
            # A reprocess covers the keys whose meta is older than the pending request's R.
            # (A changelist run fulfils no request: it does not read it.)
            pending = ReprocessRequests(engine.plane).pending_request(tid)
            if pending is not None:
                request_ts, requested_at = pending.requested_ts, pending.requested_at
        offsets_reset_at: float | None = None
        recorded = OffsetResets(engine.plane).recorded(tid) if full else None
        if recorded is not None:
            # The value recorded at the first reset wins: it is what the last complete run left.
            offsets_reset = {**offsets_reset, **recorded.offsets}
            offsets_reset_at = recorded.reset_at
        if not full:
            return cls(tid, requested, snapshot=snapshot, offsets_before=offsets,
                       offsets_reset=offsets_reset, request_ts=request_ts,
                       snapshot_commit_ts=snapshot_commit_ts(catalog, snapshot, {}), versions_stored=stored,
                       output_rows=output_rows)
        listed = FailedDeltas(engine.plane).listed(tid)
        use_offsets = change_detection == ChangeDetection.v2
        # The meta's delta listing, when the changed index needs it (listed failures, a
        # reprocess's bound, v1's meta bound): read here once for all of them.
        needs_meta_deltas = (use_offsets and bool(listed)) or request_ts is not None or not use_offsets
        meta_deltas = catalog.committed(t.meta_table_name) if needs_meta_deltas else None
        request = index_request(engine.plane, tid, snapshot, offsets, change_detection, request_ts, listed,
                                use_settled=not resets, meta_deltas=meta_deltas)
        by_input = request.deltas_by_name(catalog, input_names)
        return cls(tid, requested, snapshot=snapshot, offsets_before=offsets,
                   offsets_reset=offsets_reset, offsets_reset_at=offsets_reset_at, request_ts=request_ts,
                   requested_at=requested_at,
                   listed_failures=listed, request=request, by_input=by_input,
                   snapshot_commit_ts=snapshot_commit_ts(catalog, snapshot, by_input), versions_stored=stored,
                   output_rows=output_rows)
