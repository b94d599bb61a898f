"""What the control plane says a run of a transformation has to do, before any data is read.

One request (`index_request`) serves the run, `changed_keys` and the question asked
before a Spark session exists, "has this transformation work?": `pending_work`, answered
here only. Its answer is one value: idle, with the result of a run that would do nothing,
or work, with its `WorkReason`. A Dagster step with nothing to do answers it from the
control plane alone and starts no JVM, and so does the question whether an asset
downstream of it has work; a run started anyway would reach the same answer
(`compute_changed_index` returns None exactly when `IndexRequest.is_empty`) and issue no
Spark job.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from offset_assets.control_plane.database import ControlPlane
from offset_assets.control_plane.delta_catalog import DeltaCatalog
from offset_assets.control_plane.delta_catalog.records import DeltaInfo
from offset_assets.control_plane.failures import FailedDeltas
from offset_assets.control_plane.offsets import OffsetRepository
from offset_assets.control_plane.reprocess import PendingReprocess, ReprocessRequests
from offset_assets.control_plane.settled import SettledSnapshots
from offset_assets.engine.changed_keys import IndexRequest, RunSnapshot, snapshot_commit_ts
from offset_assets.engine.result import RunResult
from offset_assets.engine.transformation import meta_table_name
from offset_assets.engine.vocabulary import ChangeDetection, ChangeDetectionLike, CommitMode, RunMode, WorkReason
from offset_assets.errors import OffsetAssetsError


def index_request(plane: ControlPlane, transformation_id: str, snapshot: RunSnapshot,
                  offsets: Mapping[str, float], change_detection: ChangeDetectionLike, reprocess_ts: float | None,
                  listed_failures: Sequence[int], use_settled: bool = True,
                  meta_deltas: Sequence[DeltaInfo] | None = None,
                  reprocess_requested_at: float | None = None) -> IndexRequest:
    """What the control plane tells the changed index (offsets, settled deltas, listed
    failures, a pending reprocess request). `meta_deltas`: the meta's committed deltas
    when the caller has listed them (a run does, `RunState`): the oldest listed failure's
    delta is found there, and the changed index reads the listing no more."""
    use_offsets = change_detection == ChangeDetection.v2
    failed_since = None
    if use_offsets and listed_failures:
        meta_name = meta_table_name(transformation_id)
        if meta_deltas is None:
            oldest = DeltaCatalog(plane).by_num(meta_name, listed_failures[0])
        else:
            oldest = next((d for d in meta_deltas if d.delta_num == listed_failures[0]), None)
        if oldest is None:  # a run reading from a guessed point could miss failed keys
            raise OffsetAssetsError(
                f"{transformation_id}: meta delta {listed_failures[0]} of {meta_name}, listed as "
                "holding failed keys, is not in the delta catalog"
            )
        failed_since = oldest.commit_ts
    settled = {}
    if use_offsets and use_settled:
        settled = SettledSnapshots(plane).get(transformation_id) or {}
    return IndexRequest(
        snapshot=snapshot,
        offsets=offsets if use_offsets else {},
        use_offsets=use_offsets,
        settled=settled,
        failed_deltas=listed_failures,
        failed_since=failed_since,
        reprocess_ts=reprocess_ts,
        meta_deltas=None if meta_deltas is None else tuple(meta_deltas),
        reprocess_requested_at=reprocess_requested_at,
    )


def current_request(plane: ControlPlane, transformation_id: str, input_names: Sequence[str],
                    change_detection: ChangeDetectionLike) -> IndexRequest:
    """The request a full run started now would build (read-only)."""
    deltas, clock = DeltaCatalog(plane).snapshot_state(list(input_names))
    return _pending_request(plane, transformation_id, RunSnapshot(deltas, clock),
                            OffsetRepository(plane).get_offsets_for_transformation(transformation_id),
                            change_detection, ReprocessRequests(plane).pending_request(transformation_id),
                            FailedDeltas(plane).listed(transformation_id))


def _pending_request(plane: ControlPlane, transformation_id: str, snapshot: RunSnapshot,
                     offsets: Mapping[str, float], change_detection: ChangeDetectionLike,
                     reprocess: PendingReprocess | None, listed_failures: Sequence[int]) -> IndexRequest:
    """`index_request` of a run that would work on the pending reprocess request (if
    any), which it names by the wall clock it was made at."""
    return index_request(plane, transformation_id, snapshot, offsets, change_detection,
                         None if reprocess is None else reprocess.requested_ts, listed_failures,
                         reprocess_requested_at=None if reprocess is None else reprocess.requested_at)


@dataclass(frozen=True)
class PendingWork:
    """The answer to "has this transformation work?": the `reason` it has, or None when
    it is idle (`idle_result`: the result of the run that would do nothing). `request`:
    what the control plane said (None on a first run: nothing to build it from yet);
    `reset_inputs`: the inputs without an offset, which a run reads from the start."""

    transformation_id: str
    reason: WorkReason | None
    asked_at: float
    request: IndexRequest | None = None
    reset_inputs: tuple[str, ...] = ()

    @property
    def is_idle(self) -> bool:
        return self.reason is None

    @property
    def reprocess_requested_at(self) -> float | None:
        """The wall clock of the pending reprocess request the work is for."""
        return None if self.request is None else self.request.reprocess_requested_at

    def idle_result(self, plane: ControlPlane, run_id: str, commit_mode: CommitMode = CommitMode.end) -> RunResult:
        """The result of the run that would do nothing, as a run started when the question
        was asked would report it: no key, nothing committed, each input's newest commit
        (so its offset lag needs no further query)."""
        request = self.request
        if request is None or not self.is_idle:
            raise OffsetAssetsError(f"{self.transformation_id}: has work ({self.reason}), so no idle result")
        catalog = DeltaCatalog(plane)
        snapshot = request.snapshot
        result = RunResult.at_snapshot(self.transformation_id, run_id, snapshot.deltas, snapshot.process_ts,
                                       request.offsets, snapshot_commit_ts(catalog, snapshot, {}),
                                       mode=RunMode.incremental, change_detection=ChangeDetection.v2,
                                       commit_mode=commit_mode, started_at=self.asked_at)
        result.offsets_after = dict(request.offsets)
        result.finished_at = time.time()
        return result


def pending_work(plane: ControlPlane, transformation_id: str, input_names: Sequence[str],
                 output_names: Sequence[str]) -> PendingWork:
    """Whether a full v2 run of the transformation started now has work, from the
    control plane alone, each thing read once: the tables in the catalog, then the request
    a run would build (`current_request`: the snapshot, the offsets, a pending reprocess
    request, listed failures, the settled deltas). No Spark, no lease, nothing written.
    Idle when no input delta is beyond its offset and unsettled, no failure is listed and
    no reprocess is pending: a run started anyway would process no key and commit no delta.

    A transformation whose outputs or meta are not in the catalog yet has work: its first
    run creates them, so downstream assets find a table even when it is empty. v1 compares
    the data itself and is never answered here."""
    asked_at = time.time()
    catalog = DeltaCatalog(plane)
    if any(catalog.table_spec(name) is None for name in [*output_names, meta_table_name(transformation_id)]):
        return PendingWork(transformation_id, WorkReason.first_run, asked_at)
    request = current_request(plane, transformation_id, input_names, ChangeDetection.v2)
    reset = tuple(name for name in input_names if name not in request.offsets)
    if request.is_empty(catalog, input_names):
        reason = None
    elif request.reprocess_ts is not None:
        reason = WorkReason.reprocess_requested
    elif request.failed_deltas:
        reason = WorkReason.failed_keys
    else:
        reason = WorkReason.offsets_reset if reset else WorkReason.new_commits
    return PendingWork(transformation_id, reason, asked_at, request, reset)
