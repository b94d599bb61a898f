"""What a run asks the changed index, known from the control plane alone: the run
snapshot, the offsets, the settled deltas, the listed failures and a pending reprocess
request; and which deltas of each input that means, read from the offset inclusive
(`commit_ts >= offset`, the one boundary rule). No Spark job runs here."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from offset_assets.control_plane.delta_catalog import DeltaCatalog
from offset_assets.control_plane.delta_catalog.records import DeltaInfo
from offset_assets.engine.transformation import Transformation
from offset_assets.versioned.table import VersionedTable

# Offsets are commit timestamps (epoch seconds, > 0): reading "since 0" reads everything.
ALL_HISTORY = 0.0


@dataclass(frozen=True)
class RunSnapshot:
    """What a run may see: each input's last committed delta, and the commit clock then.

    `process_ts` is the clock value: every version the run reads has update_ts <= it, and
    every later commit gets a strictly greater timestamp, so recording it as the keys'
    process_ts leaves no gap and never hides a later change.
    """

    deltas: Mapping[str, int]
    process_ts: float


def deltas_to_read(catalog: DeltaCatalog, name: str, since: float, snapshot: RunSnapshot,
                   settled_delta: int) -> list[DeltaInfo]:
    """The committed deltas of input `name` a run reads: commit_ts >= `since` (the
    inclusive boundary), up to the run snapshot, after the last delta a complete earlier
    run processed entirely (`settled_delta`: re-reading those could only find processed
    versions), and not empty."""
    up_to = snapshot.deltas.get(name, 0)
    if up_to <= settled_delta:
        return []
    committed = catalog.committed(name, since_ts=since, up_to_delta=up_to)
    return [d for d in committed if d.delta_num > settled_delta and not d.is_empty]


@dataclass(frozen=True)
class IndexRequest:
    """What the control plane says before any data is read.

    `settled`: per input, the last delta a complete earlier run processed entirely (v2);
    `failed_deltas`: the meta deltas listed as holding failed keys, and `failed_since` the
    commit_ts of the oldest of them (v2); `reprocess_ts`: the clock value R of a pending
    reprocess request; `meta_deltas`: the meta's committed deltas when the run listed them
    already (None: the changed index lists them when it needs them)."""

    snapshot: RunSnapshot
    offsets: Mapping[str, float]
    use_offsets: bool
    settled: Mapping[str, int] = field(default_factory=dict)
    failed_deltas: Sequence[int] = ()
    failed_since: float | None = None
    reprocess_ts: float | None = None
    meta_deltas: Sequence[DeltaInfo] | None = None
    # The wall clock at which the pending reprocess request was made, when the request
    # was built from it (`pending.current_request`): what a step names the request by.
    reprocess_requested_at: float | None = None

    def meta_listing(self, meta: VersionedTable) -> list[DeltaInfo]:
        """The meta's committed deltas: the run's listing, or the catalog's now."""
        return meta.catalog.committed(meta.name) if self.meta_deltas is None else list(self.meta_deltas)

    def deltas_by_input(self, transformation: Transformation) -> dict[str, list[DeltaInfo]]:
        """The deltas each input contributes (inputs with none left out)."""
        catalog = DeltaCatalog(transformation.outputs[0].plane)
        return self.deltas_by_name(catalog, [inp.name for inp in transformation.inputs])

    def deltas_by_name(self, catalog: DeltaCatalog, input_names: Sequence[str]) -> dict[str, list[DeltaInfo]]:
        """`deltas_by_input` by table name: the control plane alone, no Spark."""
        found = {}
        for name in input_names:
            since = self.offsets.get(name, ALL_HISTORY) if self.use_offsets else ALL_HISTORY
            settled = self.settled.get(name, 0) if self.use_offsets else 0
            deltas = deltas_to_read(catalog, name, since, self.snapshot, settled)
            if deltas:
                found[name] = deltas
        return found

    def is_empty(self, catalog: DeltaCatalog, input_names: Sequence[str]) -> bool:
        """True when the control plane alone shows a run has nothing to process: offsets
        in use (v1 compares everything), no reprocess request, no listed failure, and no
        input delta to read. `compute_changed_index` returns None exactly then."""
        return (self.use_offsets and self.reprocess_ts is None and not self.failed_deltas
                and not self.deltas_by_name(catalog, input_names))


def snapshot_commit_ts(catalog: DeltaCatalog, snapshot: RunSnapshot,
                       by_input: Mapping[str, Sequence[DeltaInfo]]) -> dict[str, float]:
    """The commit_ts of each input's snapshot delta (inputs without one left out): from
    the deltas a run reads when the snapshot delta is among them (an input with changes),
    else from the catalog."""
    found = {}
    for name, num in snapshot.deltas.items():
        if num <= 0:
            continue
        listed = by_input.get(name)
        if listed and listed[-1].delta_num == num:
            found[name] = listed[-1].commit_ts
        else:
            found[name] = catalog.by_num(name, num).commit_ts
    return found


def listed_failure_deltas(meta: VersionedTable, request: IndexRequest) -> list[DeltaInfo]:
    """The meta deltas the control plane lists as holding failed keys (v2)."""
    if not (request.use_offsets and request.failed_deltas):
        return []
    listed = set(request.failed_deltas)
    return [d for d in request.meta_listing(meta) if d.delta_num in listed]


def meta_deltas_since(meta: VersionedTable, request: IndexRequest,
                      by_input: Mapping[str, Sequence[DeltaInfo]]) -> list[DeltaInfo] | None:
    """The meta deltas a v2 index checks its candidates against: committed since the
    oldest delta any input contributes or the oldest listed failure (every meta row
    written after a candidate's version is there); None when nothing is read."""
    read_from = [deltas[0].commit_ts for deltas in by_input.values()]
    if request.failed_since is not None:
        read_from.append(request.failed_since)
    if not read_from:
        return None
    since = min(read_from)
    if request.meta_deltas is None:
        return meta.catalog.committed(meta.name, since_ts=since)
    return [d for d in request.meta_deltas if d.commit_ts >= since]  # the run's listing, in number order
