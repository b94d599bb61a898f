"""`OffsetStore`: the committed offsets as a Dagster resource, its API delegating to
`control_plane/offsets.py` (`OffsetRepository`) and the engine's offset initialisation.

The store holds no offset logic of its own: each method opens the repository of its
control plane (`db_url`) and calls the method of the same name, so the store and a
caller of the repository (the engine, the checks, the CLI) can never disagree.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import dagster as dg
from pydantic import Field
from sqlalchemy import Connection

from offset_assets.config import default_db_url
from offset_assets.control_plane.database import ControlPlane, connect
from offset_assets.control_plane.offsets import OffsetKey, OffsetRepository

if TYPE_CHECKING:  # the engine imports Spark: only the method that needs it imports it
    from offset_assets.engine.transformation import Transformation


class OffsetStore(dg.ConfigurableResource):
    """Committed offsets (per transformation and input, the highest `update_ts`
    processed) in the control-plane table `transform_input_offset`.

    The database is `db_url`, else `OFFSET_ASSETS_DB_URL`, else a SQLite file under
    `./state`; it is migrated to the current schema on first use. Works as a Dagster
    resource and as a plain object: `OffsetStore().get_offset("t", "posts")`.

    Like the repository, every method refuses a transformation id or input name outside
    the name rule (`InvalidNameError`) and a bulk holding an offset that is not a finite,
    non-negative number (`InvalidOffsetError`) before anything is written.
    """

    db_url: str | None = Field(
        default=None,
        description="Control-plane SQLAlchemy URL; default OFFSET_ASSETS_DB_URL, "
        "else SQLite under ./state.",
    )

    def control_plane(self) -> ControlPlane:
        return connect(self.db_url or default_db_url())

    def repository(self) -> OffsetRepository:
        """The offset repository of this control plane; every offset method below is its own."""
        return OffsetRepository(self.control_plane())

    # -- OffsetRepository, by name ------------------------------------------------------

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

    # -- the engine's initialisation from meta ------------------------------------------

    def initialize_offsets_from_transform_meta(self, transformation: Transformation) -> dict[str, float]:
        """`IncrementalEngine.initialize_offsets_from_transform_meta` on this control plane,
        with the Spark session of the transformation's tables: set the offsets of a
        transformation that ran without them from its meta, so that switching to offsets
        redoes no work (never lowers an existing offset)."""
        from offset_assets.engine import IncrementalEngine

        spark = transformation.outputs[0].spark
        return IncrementalEngine(spark, self.control_plane()).initialize_offsets_from_transform_meta(transformation)
