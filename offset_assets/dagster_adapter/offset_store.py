"""`OffsetStore`: the offset repository as a Dagster resource."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import dagster as dg
from pydantic import Field
from sqlalchemy import Connection

from offset_assets.config import default_db_url
from offset_assets.control_plane.database import ControlPlane, connect
from offset_assets.control_plane.offsets import OffsetKey, OffsetRepository


class OffsetStore(dg.ConfigurableResource):
    """Committed offsets (per transformation and input, the highest `update_ts`
    processed) in the control-plane table `transform_input_offset`.

    The database is `db_url`, else `OFFSET_ASSETS_DB_URL`, else a SQLite file under
    `./state`; it is migrated to the current schema on first use. Works as a Dagster
    resource and as a plain object: `OffsetStore().get_offset("t", "posts")`.
    """

    db_url: str | None = Field(
        default=None,
        description="Control-plane SQLAlchemy URL; default OFFSET_ASSETS_DB_URL, "
        "else SQLite under ./state.",
    )

    def control_plane(self) -> ControlPlane:
        return connect(self.db_url or default_db_url())

    def repository(self) -> OffsetRepository:
        return OffsetRepository(self.control_plane())

    def get_offsets_for_transformation(
        self, transformation_id: str, conn: Connection | None = None
    ) -> dict[str, float]:
        return self.repository().get_offsets_for_transformation(transformation_id, conn)

    def get_offset(
        self, transformation_id: str, input_table_name: str, conn: Connection | None = None
    ) -> float | None:
        return self.repository().get_offset(transformation_id, input_table_name, conn)

    def update_offsets_bulk(
        self, offsets: Mapping[OffsetKey, float], conn: Connection | None = None
    ) -> None:
        self.repository().update_offsets_bulk(offsets, conn)

    def reset_offset(
        self,
        transformation_id: str,
        input_table_name: str | None = None,
        conn: Connection | None = None,
    ) -> int:
        return self.repository().reset_offset(transformation_id, input_table_name, conn)

    def get_statistics(
        self,
        now: float | None = None,
        *,
        transformation_id: str | None = None,
        conn: Connection | None = None,
    ) -> list[dict[str, Any]]:
        return self.repository().get_statistics(
            now, transformation_id=transformation_id, conn=conn
        )
