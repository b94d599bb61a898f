"""What the control plane says a run of a transformation has to do, before any data is read.

One request (`index_request`) serves the run, `changed_keys` and the question asked
before a Spark session exists: `idle_result`. A Dagster step with nothing to do
answers it from the control plane alone and starts no JVM; a run started anyway would
reach the same answer (`compute_changed_index` returns None exactly when
`IndexRequest.is_empty`) and issue no Spark job.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

from offset_assets.control_plane.database import ControlPlane
from offset_assets.control_plane.delta_catalog import DeltaCatalog
from offset_assets.control_plane.delta_catalog.records import DeltaInfo
from offset_assets.control_plane.failures import FailedDeltas
from offset_assets.control_plane.offsets import OffsetRepository
from offset_assets.control_plane.reprocess import ReprocessRequests
from offset_assets.control_plane.settled import SettledSnapshots
from offset_assets.engine.changed_keys import IndexRequest, RunSnapshot, snapshot_commit_ts
from offset_assets.engine.result import RunResult
from offset_assets.engine.transformation import meta_table_name
from offset_assets.engine.vocabulary import ChangeDetection, ChangeDetectionLike, CommitMode, RunMode
from offset_assets.errors import OffsetAssetsError


def index_request(plane: ControlPlane, transformation_id: str, snapshot: RunSnapshot,
                  offsets: Mapping[str, float], change_detection: ChangeDetectionLike, reprocess_ts: float | None,
                  listed_failures: Sequence[int], use_settled: bool = True,
                  meta_deltas: Sequence[DeltaInfo] | None = None) -> IndexRequest:
    """What the control plane tells the changed index (offsets, settled deltas, listed
    failures, a pending reprocess request). `meta_deltas`: the meta's committed deltas
    when the caller has listed them (a run does, `RunState`): the oldest listed failure's
    delta is found there, and the changed index reads the listing no more."""
    use_offsets = change_detection == "v2"
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
    )


def current_request(plane: ControlPlane, transformation_id: str, input_names: Sequence[str],
                    change_detection: ChangeDetectionLike) -> IndexRequest:
    """The request a full run started now would build (read-only)."""
    deltas, clock = DeltaCatalog(plane).snapshot_state(list(input_names))
    return index_request(plane, transformation_id, RunSnapshot(deltas, clock),
                         OffsetRepository(plane).get_offsets_for_transformation(transformation_id),
                         change_detection, ReprocessRequests(plane).pending(transformation_id),
                         FailedDeltas(plane).listed(transformation_id))


def idle_result(plane: ControlPlane, transformation_id: str, input_names: Sequence[str],
                output_names: Sequence[str], run_id: str, commit_mode: CommitMode = CommitMode.end) -> RunResult | None:
    """The result of a full v2 run started now, when the control plane alone shows it has
    nothing to do (no input delta beyond its offset and unsettled, no listed failure, no
    pending reprocess request); None when there is work. No Spark, no lease, nothing
    written: a run started anyway would process no key and commit no delta. The result
    carries each input's newest commit, so its offset lag needs no further query.

    A transformation whose outputs or meta are not in the catalog yet has work: its first
    run creates them, so downstream assets find a table even when it is empty. v1 compares
    the data itself and is never answered here."""
    started_at = time.time()
    catalog = DeltaCatalog(plane)
    if any(catalog.table_spec(name) is None for name in [*output_names, meta_table_name(transformation_id)]):
        return None
    request = current_request(plane, transformation_id, input_names, "v2")
    if not request.is_empty(catalog, input_names):
        return None
    return RunResult(
        transformation_id=transformation_id,
        run_id=run_id,
        mode=RunMode.incremental,
        change_detection=ChangeDetection.v2,
        commit_mode=commit_mode,
        process_ts=request.snapshot.process_ts,
        snapshot_deltas=dict(request.snapshot.deltas),
        offsets_before=dict(request.offsets),
        offsets_after=dict(request.offsets),
        input_commit_ts=snapshot_commit_ts(catalog, request.snapshot, {}),
        started_at=started_at,
        finished_at=time.time(),
    )
