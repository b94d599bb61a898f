"""Opening a versioned table as the delta catalog registered it (primary key and schema
from the catalog, not from a definition in code): `open_registered_table`."""

from __future__ import annotations

import json
from collections.abc import Callable

from pyspark.sql import SparkSession
from pyspark.sql.types import StructType

from offset_assets.control_plane.database import ControlPlane
from offset_assets.control_plane.delta_catalog import DeltaCatalog
from offset_assets.versioned.table import VersionedTable


def open_registered_table(spark: SparkSession | Callable[[], SparkSession], plane: ControlPlane,
                          name: str, warehouse: str | None = None) -> VersionedTable | None:
    """The versioned table `name` with the primary key and schema the delta catalog holds
    for it, its files under `warehouse` (default: `OFFSET_ASSETS_WAREHOUSE`, else
    ./state/warehouse); None when no table of that name is registered (each caller says
    why in its own words: not materialized yet, not a table of this project, ...).

    `spark` may be a function returning the session: it is called only once the table
    is found, so asking for a table that does not exist starts no Spark session."""
    spec = DeltaCatalog(plane).table_spec(name)
    if spec is None:
        return None
    session = spark() if callable(spark) else spark
    schema = StructType.fromJson(json.loads(spec.schema_json))
    return VersionedTable(session, plane, name, spec.primary_key, schema, warehouse=warehouse)
