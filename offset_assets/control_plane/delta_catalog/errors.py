"""Errors of the delta catalog; each message names the table and the delta at fault."""

from __future__ import annotations

import time

from offset_assets.control_plane.delta_catalog.records import DeltaInfo
from offset_assets.errors import OffsetAssetsError


class DeltaCatalogError(OffsetAssetsError):
    """A delta-catalog operation was refused; the message names the table and delta."""


class UnknownTableError(DeltaCatalogError):
    """The table is not registered in the delta catalog."""


class HotDeltaHeldError(DeltaCatalogError):
    """The table already has a hot delta; only one writer at a time."""

    def __init__(self, table_name: str, hot: DeltaInfo) -> None:
        self.table_name = table_name
        self.hot = hot
        opened = _iso(hot.opened_at) if hot.opened_at is not None else "?"
        super().__init__(
            f"table {table_name!r} already has hot delta {hot.delta_num} held by "
            f"{hot.holder!r} (run {hot.run_id!r}, opened {opened}); commit or roll it back "
            f"(VersionedTable.discard_dead_hot() discards it if that holder died)"
        )


class DeltaNotHotError(DeltaCatalogError):
    """Commit or rollback of a delta that is not hot (already committed, unknown, replaced)."""


def _iso(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))
