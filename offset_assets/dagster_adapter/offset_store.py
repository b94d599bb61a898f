"""`OffsetStore`: the committed offsets as a Dagster resource, its API delegating to
`control_plane/offsets.py` (`OffsetRepository`) and the engine's offset initialisation.

The store is a thin alias of the repository as a resource: it holds no offset logic and
repeats no signature. Each offset method *is* `OffsetRepository`'s method of the same
name (`_repository_method`), called on the repository of the store's control plane
(`db_url`), so the store and a caller of the repository (the engine, the checks, the
CLI) can never disagree.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import dagster as dg
from pydantic import Field

from offset_assets.config import default_db_url
from offset_assets.control_plane.database import ControlPlane, connect
from offset_assets.control_plane.offsets import OffsetRepository

if TYPE_CHECKING:  # the engine imports Spark: only the method that needs it imports it
    from offset_assets.engine.transformation import Transformation


def _repository_method(method: Callable[..., Any]) -> Callable[..., Any]:
    """`method` of `OffsetRepository` as a method of the store: called on the store's
    repository, with the repository's signature and docstring."""

    @functools.wraps(method)
    def on_repository(store: OffsetStore, *args: Any, **kwargs: Any) -> Any:
        return method(store.repository(), *args, **kwargs)

    return on_repository


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

    # `OffsetRepository`'s offset methods, each its own: signature, docstring and body.
    get_offsets_for_transformation = _repository_method(OffsetRepository.get_offsets_for_transformation)
    get_offset = _repository_method(OffsetRepository.get_offset)
    update_offsets_bulk = _repository_method(OffsetRepository.update_offsets_bulk)
    reset_offset = _repository_method(OffsetRepository.reset_offset)
    get_statistics = _repository_method(OffsetRepository.get_statistics)

    # -- the engine's initialisation from meta ------------------------------------------

    def initialize_offsets_from_transform_meta(self, transformation: Transformation) -> dict[str, float]:
        """`IncrementalEngine.initialize_offsets_from_transform_meta` on this control plane,
        with the Spark session of the transformation's tables: set the offsets of a
        transformation that ran without them from its meta, so that switching to offsets
        redoes no work (never lowers an existing offset)."""
        from offset_assets.engine import IncrementalEngine

        spark = transformation.outputs[0].spark
        return IncrementalEngine(spark, self.control_plane()).initialize_offsets_from_transform_meta(transformation)
