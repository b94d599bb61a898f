"""What a run did: a ChangeList (processed keys, offsets per input) grown into a report."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


def merge_offsets(a: Mapping[str, float], b: Mapping[str, float]) -> dict[str, float]:
    """ChangeList merge: per input the larger offset wins, so offsets only move forward."""
    merged = dict(a)
    for name, value in b.items():
        merged[name] = max(merged[name], value) if name in merged else value
    return merged


@dataclass
class RunResult:
    transformation_id: str
    run_id: str
    mode: str  # "full" | "changelist"
    change_detection: str  # "v1" | "v2" | "explicit"
    commit_mode: str  # "end" | "batch"
    # The commit clock when the run took its snapshot: every input commit at or before it
    # is read, none after. A commit time, not the run's wall clock (see started_at).
    process_ts: float
    snapshot_deltas: dict[str, int]
    offsets_before: dict[str, float]
    offsets_after: dict[str, float] = field(default_factory=dict)
    offsets_reset: dict[str, float] = field(default_factory=dict)
    changed_keys: int = 0
    processed_keys: int = 0
    failed_keys: int = 0
    errors: list[str] = field(default_factory=list)
    rows_read: dict[str, int] = field(default_factory=dict)
    rows_written: dict[str, int] = field(default_factory=dict)
    rows_deleted: dict[str, int] = field(default_factory=dict)
    deltas: dict[str, list[int]] = field(default_factory=dict)
    batches: int = 0
    batches_failed: int = 0
    duration_s: float = 0.0
    # Wall clock (epoch seconds) of the run's start (lease taken) and of its finish.
    started_at: float | None = None
    finished_at: float | None = None

    @property
    def succeeded(self) -> bool:
        return self.failed_keys == 0

    def versions_written(self, name: str) -> int:
        """Versions the run committed to table `name`: rows written plus rows deleted."""
        return self.rows_written.get(name, 0) + self.rows_deleted.get(name, 0)

    def add_rows_read(self, name: str, count: int) -> None:
        self.rows_read[name] = self.rows_read.get(name, 0) + count

    def add_written(self, name: str, upserted: int, deleted: int) -> None:
        self.rows_written[name] = self.rows_written.get(name, 0) + upserted
        self.rows_deleted[name] = self.rows_deleted.get(name, 0) + deleted

    def add_delta(self, name: str, delta_num: int) -> None:
        self.deltas.setdefault(name, []).append(delta_num)

    def summary(self) -> str:
        status = "ok" if self.succeeded else f"{self.failed_keys} key(s) FAILED"
        return (
            f"{self.transformation_id} [{self.mode}/{self.change_detection}, commit={self.commit_mode}] "
            f"changed={self.changed_keys} processed={self.processed_keys} {status}; "
            f"read={self.rows_read} written={self.rows_written} deleted={self.rows_deleted}; "
            f"offsets {self.offsets_before} -> {self.offsets_after}; "
            f"batches={self.batches} in {self.duration_s:.1f}s"
        )
