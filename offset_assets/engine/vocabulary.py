"""The words a user, the engine and the Dagster adapter share, each defined here once:
how a run finds its changed keys (`ChangeDetection`), when it commits (`CommitMode`),
what a step does with failed keys (`OnFailedKeys`),
what a run is asked to do (`RunRequest`, of a `RunMode`), and why a transformation has
work before its run starts (`WorkReason`).

In the engine layer, free of Spark and Dagster, so that every layer above imports it;
`offset_assets` and `offset_assets.dagster_adapter` re-export the names users write.
The user-facing strings stay inputs: each enum is a `str` ("v2", "end", ...), and the
`...Like` aliases name the strings a signature accepts besides the enum.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Literal

from offset_assets.engine.errors import TransformationDefinitionError

if TYPE_CHECKING:  # a changelist may be a DataFrame; this module imports no Spark
    from pyspark.sql import DataFrame


class ChangeDetection(StrEnum):
    """How a run finds its changed keys: `v2` by offsets (the default), `v1` by full
    comparison (to verify v2 and measure against it). A str: `"v1"` is accepted wherever
    a ChangeDetection is, and compares equal to `ChangeDetection.v1`."""

    v2 = "v2"
    v1 = "v1"


class CommitMode(StrEnum):
    """When a run commits: `end` (everything in one transaction when the run finishes;
    the default) or `batch` (each batch its outputs, meta and offsets, so a crash resumes
    at the batch it stopped in)."""

    end = "end"
    batch = "batch"


class OnFailedKeys(StrEnum):
    """What an incremental asset's step does when keys fail (the function raised for
    their batch): `RAISE` fails the step (the default), `WARN` logs a warning and lets the
    materialization stand; either way the keys are recorded as failed and retried by later
    runs. Upper-case members, as ingestion's `OnMalformed`: the two failure policies read
    alike (and `raise` is a Python keyword)."""

    RAISE = "raise"
    WARN = "warn"


ChangeDetectionLike = ChangeDetection | Literal["v2", "v1"]
CommitModeLike = CommitMode | Literal["end", "batch"]
OnFailedKeysLike = OnFailedKeys | Literal["raise", "warn"]


def change_detection_of(value: object, transformation_id: str) -> ChangeDetection:
    """`value` ("v1", "v2" or the enum) as a ChangeDetection; anything else is refused,
    naming the transformation."""
    return _member(ChangeDetection, value, "change_detection", transformation_id)


def commit_mode_of(value: object, transformation_id: str) -> CommitMode:
    """`value` ("end", "batch" or the enum) as a CommitMode; anything else is refused,
    naming the transformation."""
    return _member(CommitMode, value, "commit_mode", transformation_id)


def _member(enum: type[StrEnum], value: object, option: str, transformation_id: str) -> Any:
    if value not in tuple(enum):  # a tuple: membership without hashing odd values
        allowed = " or ".join(repr(member.value) for member in enum)
        raise TransformationDefinitionError(
            f"transformation {transformation_id!r}: {option} {value!r} is not {allowed}"
        )
    return enum(value)


class RunMode(StrEnum):
    """What a run is asked to do, and what it did: `incremental` (what changed since the
    offsets), `reprocess` (every key: a backfill asks it; a full run working on a pending
    reprocess request reports it), `rescan` (every input's whole history read again,
    offsets reset at its first commit: what the offsets may have skipped; keys whose meta
    is newer than their versions stay as they are) or `changelist` (given keys; offsets
    untouched). A run with nothing to do is not a mode: it is an incremental run's
    result with no key."""

    incremental = "incremental"
    reprocess = "reprocess"
    rescan = "rescan"
    changelist = "changelist"

    @property
    def full(self) -> bool:
        """A run over the changed keys (incremental, reprocess, rescan), not a changelist."""
        return self != RunMode.changelist

    @property
    def resets_offsets(self) -> bool:
        """A run that reads every input from the start: its first commit resets the
        offsets (a reprocess, a rescan)."""
        return self in (RunMode.reprocess, RunMode.rescan)


class WorkReason(StrEnum):
    """Why an incremental (v2) run of a transformation started now has work, as the
    control plane alone shows it (`engine/pending.py`); the first that holds, in this
    order: its first run (an output or its meta not in the catalog yet), a pending
    reprocess request, failed keys listed for a retry, an input whose offset was reset,
    input commits beyond the offsets."""

    first_run = "first_run"
    reprocess_requested = "reprocess_requested"
    failed_keys = "failed_keys"
    offsets_reset = "offsets_reset"
    new_commits = "new_commits"


@dataclass(frozen=True)
class RunRequest:
    """What one run of a transformation is asked to do: its `mode`; for a full run, the
    `change_detection` (None: the transformation's own); for a changelist, its
    `keys` (transform-key values, rows or a DataFrame). A reprocess resets the offsets
    in its first commit and supersedes the meta: every key is processed again; a rescan
    resets the offsets the same way and keeps the meta."""

    mode: RunMode = RunMode.incremental
    change_detection: ChangeDetection | None = None
    keys: DataFrame | Sequence[Mapping[str, Any]] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "mode", RunMode(self.mode))
        if self.change_detection is not None:
            object.__setattr__(self, "change_detection", ChangeDetection(self.change_detection))
        if self.mode == RunMode.changelist and self.keys is None:
            raise ValueError("a changelist run request needs its keys")
        if self.mode != RunMode.changelist and self.keys is not None:
            raise ValueError(f"a {self.mode} run request takes no keys: only a changelist does")

    @classmethod
    def incremental(cls, change_detection: ChangeDetectionLike | None = None) -> RunRequest:
        return cls(RunMode.incremental, change_detection=change_detection)

    @classmethod
    def reprocess(cls, change_detection: ChangeDetectionLike | None = None) -> RunRequest:
        return cls(RunMode.reprocess, change_detection=change_detection)

    @classmethod
    def rescan(cls, change_detection: ChangeDetectionLike | None = None) -> RunRequest:
        return cls(RunMode.rescan, change_detection=change_detection)

    @classmethod
    def changelist(cls, keys: DataFrame | Sequence[Mapping[str, Any]]) -> RunRequest:
        return cls(RunMode.changelist, keys=keys)
