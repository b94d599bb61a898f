"""What a run did: a ChangeList (processed keys, offsets per input) grown into a report.

The result carries everything a report of the run needs (its kind, the reprocess request
it worked on, each input's newest commit in its snapshot), so that a caller reports a
run without reading the control plane or the tables again."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from offset_assets.engine.vocabulary import ChangeDetection, CommitMode, RunMode
from offset_assets.run_profile import RunProfile


@dataclass
class RunResult:
    """What one run of a transformation did: its mode, the keys it found, processed and
    failed, the rows it read per input and wrote or deleted per output, the deltas it
    committed, each input's offset before and after (a ChangeList grown into a
    report), and where its time went (`profile`). Returned by
    `IncrementalEngine.run_full` and `run_changelist`; the Dagster adapter turns it into
    materialization metadata."""

    transformation_id: str
    run_id: str
    # What the run did: `reprocess` too for a full run that worked on a pending request.
    mode: RunMode
    change_detection: ChangeDetection
    commit_mode: CommitMode
    # The commit clock when the run took its snapshot: every input commit at or before it
    # is read, none after. A commit time, not the run's wall clock (see started_at).
    process_ts: float
    snapshot_deltas: dict[str, int]
    offsets_before: dict[str, float]
    offsets_after: dict[str, float] = field(default_factory=dict)
    # Offsets this run reset (a backfill), or that were reset between runs and not reported
    # yet (a rescan, a reprocess request): input -> the value it had.
    offsets_reset: dict[str, float] = field(default_factory=dict)
    # Wall clock of the latest reset made between runs that `offsets_reset` reports; None
    # when it reports none (or only the run's own).
    offsets_reset_at: float | None = None
    # Per input, the commit_ts of the newest delta in the run's snapshot (inputs without
    # a committed delta left out): what its offset lag is measured against.
    input_commit_ts: dict[str, float] = field(default_factory=dict)
    # Wall clock at which the pending reprocess request this run worked on was made
    # (`offset-assets reprocess`, `IncrementalEngine.request_reprocess`); None when the
    # run worked on none (a backfill resets by itself and names no request).
    reprocess_requested_at: float | None = None
    # What the run was asked (`RunRequest.mode`): a backfill asks a reprocess.
    requested: RunMode = RunMode.incremental
    changed_keys: int = 0
    processed_keys: int = 0
    failed_keys: int = 0
    # Keys of failed batches that no input holds any more: their deletion waits with the
    # failed keys (a batch's outputs are written whole or not at all).
    deletions_waiting: int = 0
    errors: list[str] = field(default_factory=list)
    rows_read: dict[str, int] = field(default_factory=dict)
    rows_written: dict[str, int] = field(default_factory=dict)
    rows_deleted: dict[str, int] = field(default_factory=dict)
    # Per output, its actual rows once the run ended: as of the output's last commit, the
    # run's own included (from the delta catalog's counts; an unknown count left out).
    output_rows: dict[str, int] = field(default_factory=dict)
    deltas: dict[str, list[int]] = field(default_factory=dict)
    batches: int = 0
    batches_failed: int = 0
    duration_s: float = 0.0
    # Wall clock (epoch seconds) of the run's start (lease taken) and of its finish.
    started_at: float | None = None
    finished_at: float | None = None
    # Where the time went: the driver's wall time and the Spark jobs by phase (`run_profile.py`);
    # None for a run that did not start (nothing to do).
    profile: RunProfile | None = None

    @classmethod
    def at_snapshot(cls, transformation_id: str, run_id: str, snapshot_deltas: Mapping[str, int],
                    process_ts: float, offsets_before: Mapping[str, float], input_commit_ts: Mapping[str, float],
                    *, mode: RunMode, change_detection: ChangeDetection, commit_mode: CommitMode,
                    started_at: float | None) -> RunResult:
        """The result of a run as its snapshot (each input's last delta, the commit clock)
        and the offsets it read make it, before it did anything: a run adds what it does;
        a run with nothing to do ends here (`PendingWork.idle_result`)."""
        return cls(
            transformation_id=transformation_id,
            run_id=run_id,
            mode=mode,
            change_detection=change_detection,
            commit_mode=commit_mode,
            process_ts=process_ts,
            snapshot_deltas=dict(snapshot_deltas),
            offsets_before=dict(offsets_before),
            input_commit_ts=dict(input_commit_ts),
            started_at=started_at,
        )

    @property
    def succeeded(self) -> bool:
        """No batch failed (a failed batch of deletions only counts no failed key)."""
        return self.batches_failed == 0

    @property
    def key_source(self) -> str:
        """How the run's keys were found: its change detection, `explicit` (a changelist)
        or `reprocess_all` (every key: a requested reprocess)."""
        if self.requested == RunMode.changelist:
            return "explicit"
        return "reprocess_all" if self.requested == RunMode.reprocess else str(self.change_detection)

    @property
    def spark_jobs(self) -> int | None:
        """The Spark jobs the run started (its profile's count); None when they were not
        counted (Spark Connect) or the run did not start."""
        return self.profile.job_count if self.profile is not None else None

    def failure_text(self) -> str:
        """The failed batches in one line: keys the function failed for, deletions of
        the same batches waiting with them, and what each batch's error said first."""
        waiting = (f", and {self.deletions_waiting} deletion(s) of the same batches wait with them"
                   if self.deletions_waiting else "")
        said = "; ".join(error.splitlines()[0][:300] for error in self.errors)
        return (f"{self.transformation_id}: {self.failed_keys} key(s) failed in {self.batches_failed} "
                f"batch(es){waiting}; they are retried by the next run: {said}")

    def versions_written(self, name: str) -> int:
        """Versions the run committed to table `name`: rows written plus rows deleted."""
        return self.rows_written.get(name, 0) + self.rows_deleted.get(name, 0)

    def offset_lag_s(self) -> dict[str, float | None]:
        """Per input, how far its offset after the run lags behind the input's newest
        commit in the run's snapshot, in seconds of commit time (0 when the offset
        reached it or the input has no commit; None without an offset). Unlike the
        offset's age, this stays 0 while an input receives nothing."""
        lags: dict[str, float | None] = {}
        for name in sorted({*self.snapshot_deltas, *self.offsets_after}):
            offset = self.offsets_after.get(name)
            newest = self.input_commit_ts.get(name)
            lags[name] = None if offset is None else max(0.0, newest - offset) if newest is not None else 0.0
        return lags

    def add_rows_read(self, name: str, count: int) -> None:
        self.rows_read[name] = self.rows_read.get(name, 0) + count

    def add_written(self, name: str, upserted: int, deleted: int) -> None:
        self.rows_written[name] = self.rows_written.get(name, 0) + upserted
        self.rows_deleted[name] = self.rows_deleted.get(name, 0) + deleted

    def add_delta(self, name: str, delta_num: int) -> None:
        self.deltas.setdefault(name, []).append(delta_num)

    def summary(self) -> str:
        status = "ok" if self.succeeded else (f"{self.failed_keys} key(s) FAILED"
                                               f" ({self.deletions_waiting} deletion(s) waiting)")
        return (
            f"{self.transformation_id} [{self.mode}/{self.key_source}, commit={self.commit_mode}] "
            f"changed={self.changed_keys} processed={self.processed_keys} {status}; "
            f"read={self.rows_read} written={self.rows_written} deleted={self.rows_deleted}; "
            f"offsets {self.offsets_before} -> {self.offsets_after}; "
            f"batches={self.batches} in {self.duration_s:.1f}s"
            f"{'' if self.spark_jobs is None else f', {self.spark_jobs} Spark job(s)'}"
        )
