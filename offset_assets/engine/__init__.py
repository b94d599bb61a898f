"""The incremental engine (layer 3): `IncrementalEngine` runs transformations; a run
(`run.py`) reads its state (`state.py`), selects its keys (`changed_keys/`),
loads inputs (`loading.py`), writes outputs (`outputs.py`) and commits (`commit.py`,
`meta.py`). Docs: docs/internals.md, "Incremental engine".

Names are resolved on first use, so importing one engine module imports no other.
"""

from __future__ import annotations

from offset_assets.lazy_exports import lazy_getattr

_EXPORTS = {
    "IncrementalEngine": "offset_assets.engine.incremental_engine",
    "TransformationRun": "offset_assets.engine.run",
    "KeysLike": "offset_assets.engine.changed_keys.held_keys",
    "Transformation": "offset_assets.engine.transformation",
    "TransformInput": "offset_assets.engine.transformation",
    "RunResult": "offset_assets.engine.result",
    "RunMode": "offset_assets.engine.vocabulary",
    "RunRequest": "offset_assets.engine.vocabulary",
    "CommitMode": "offset_assets.engine.vocabulary",
    "RunProfile": "offset_assets.run_profile",
    "ChangeDetection": "offset_assets.engine.vocabulary",
}

__all__ = sorted(_EXPORTS)

__getattr__ = lazy_getattr(__name__, _EXPORTS)
