"""The changed keys: which transform keys a run processes, and how it holds them.

A run asks once, `select_keys` (`selection.py`): a changelist's given keys, or the
changed index of a full run, collected by the driver or kept distributed, in batches
(`held_keys.py`). The changed index (`index.py`) is built from what the control plane
says (`request.py`: the run snapshot, offsets, settled deltas, listed failures, a pending
reprocess request), the keys each version marks (`candidates.py`) and bounds from the
catalog alone (`bounds.py`), and checked against the transformation's meta.

Names are resolved on first use, so importing one part imports no other.
"""

from __future__ import annotations

from offset_assets.lazy_exports import lazy_getattr

_EXPORTS = {
    "select_keys": "offset_assets.engine.changed_keys.selection",
    "SelectedKeys": "offset_assets.engine.changed_keys.selection",
    "KeysLike": "offset_assets.engine.changed_keys.held_keys",
    "LocalKeys": "offset_assets.engine.changed_keys.held_keys",
    "DistributedKeys": "offset_assets.engine.changed_keys.held_keys",
    "DEFAULT_DRIVER_LIMIT": "offset_assets.engine.changed_keys.held_keys",
    "ChangedIndex": "offset_assets.engine.changed_keys.index",
    "compute_changed_index": "offset_assets.engine.changed_keys.index",
    "INPUT_COL": "offset_assets.engine.changed_keys.candidates",
    "TS_COL": "offset_assets.engine.changed_keys.candidates",
    "IndexRequest": "offset_assets.engine.changed_keys.request",
    "RunSnapshot": "offset_assets.engine.changed_keys.request",
    "snapshot_commit_ts": "offset_assets.engine.changed_keys.request",
}

__all__ = sorted(_EXPORTS)

__getattr__ = lazy_getattr(__name__, _EXPORTS)
