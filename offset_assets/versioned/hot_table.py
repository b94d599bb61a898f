"""What a hot delta uses of its table (`VersionedTable` is one): the write's
orchestration (`hot_delta.py`), its candidate lookup (`write_candidates.py`), its files
(`delta_files.py`) and its refusals (`write_refusals.py`) read the table through it."""

from __future__ import annotations

from typing import Protocol

from pyspark.sql.types import StructType

from offset_assets.control_plane.database import ControlPlane
from offset_assets.control_plane.delta_catalog import DeltaCatalog
from offset_assets.control_plane.delta_catalog.records import DeltaInfo, SnapshotInfo
from offset_assets.versioned.layout import WarehouseFiles
from offset_assets.versioned.reads import TableReader

__all__ = ["HotTable"]


class HotTable(Protocol):
    """What a hot delta uses of its table (`VersionedTable` is one)."""

    name: str
    plane: ControlPlane
    primary_key: list[str]
    schema: StructType
    catalog: DeltaCatalog
    files: WarehouseFiles
    reader: TableReader

    @property
    def data_columns(self) -> list[str]: ...

    def actual_sources(
        self, as_of_delta: int | None, check_committed: bool = False
    ) -> tuple[SnapshotInfo | None, list[DeltaInfo], list[DeltaInfo]]: ...
