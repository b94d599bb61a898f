"""Backfills of incremental assets: a backfill resets the offsets, so everything is redone.

An incremental asset normally processes only what changed since its offsets. A Dagster
backfill (every run it launches carries the tag `dagster/backfill`) or a run tagged
`offset_assets/reset` asks for the opposite: the engine runs a `RunRequest.reprocess()`, which
resets the transformation's offsets and supersedes its meta, so every key present in
the inputs (and every key with output, so vanished keys lose theirs) is processed again.
The offsets that were reset, with their old values, are written to the materialization
metadata (`offsets_reset`) and to the run log; the run gets a short tag per
transformation naming the reason. (A reprocess request made outside Dagster,
`offset-assets reprocess`, is reported the same way by the run that works on it: the
engine's result names it, see `run_report.reprocess_reason`.)

`offset_assets/reset` with a value of `false`, `0` or `no` does not reset (so a launch
form can carry the tag switched off).
"""

from __future__ import annotations

from collections.abc import Mapping

BACKFILL_TAG = "dagster/backfill"
RESET_TAG = "offset_assets/reset"
# Added to a run that reset offsets, one tag per transformation, its value the reason
# (`reset_reason`): the runs list of a backfill (and the run's page) shows which
# transformations were reset without opening the metadata. The value stays short (the
# UI cuts long tags); the offsets themselves are in the materialization metadata.
OFFSETS_RESET_TAG_PREFIX = "offset_assets/offsets_reset."

_FALSE_VALUES = frozenset({"false", "0", "no", "off", ""})


def is_reset_run(tags: Mapping[str, str]) -> bool:
    """True when the run's tags ask for offsets to be reset before reading."""
    if BACKFILL_TAG in tags:
        return True
    value = tags.get(RESET_TAG)
    return value is not None and value.strip().lower() not in _FALSE_VALUES


def reset_reason(tags: Mapping[str, str]) -> str:
    """Which tag caused the reset, for the log and the metadata."""
    if BACKFILL_TAG in tags:
        return f"backfill {tags[BACKFILL_TAG]}"
    return f"tag {RESET_TAG}={tags.get(RESET_TAG)}"


def tag_reset_reason(tags: Mapping[str, str]) -> str | None:
    """Why the run's tags ask for a reset (`reset_reason`), or None when they do not."""
    return reset_reason(tags) if is_reset_run(tags) else None
