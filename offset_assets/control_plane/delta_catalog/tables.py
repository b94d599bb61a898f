"""Registered versioned tables: primary key and schema, as the catalog stores them."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError

from offset_assets.control_plane.database import ControlPlane
from offset_assets.control_plane.delta_catalog.records import TableSpec
from offset_assets.control_plane.names import validate_name
from offset_assets.control_plane.schema import versioned_table


class TableRegistry:
    """The `versioned_table` rows of one control plane (part of `DeltaCatalog`)."""

    plane: ControlPlane

    def register_table(self, name: str, primary_key: Sequence[str], schema_json: str) -> TableSpec:
        """Register `name` unless it exists; returns the stored spec either way.

        The caller compares the stored spec with its own (primary key, schema): a
        concurrent first registration of the same table is not an error here.
        """
        validate_name(name, "table name")
        existing = self.table_spec(name)
        if existing is not None:
            return existing
        try:
            with self.plane.begin() as conn:
                conn.execute(
                    versioned_table.insert().values(
                        table_name=name,
                        primary_key=json.dumps(list(primary_key)),
                        schema_json=schema_json,
                        created_at=time.time(),
                    )
                )
        except IntegrityError:
            pass  # registered concurrently: the stored spec wins
        spec = self.table_spec(name)
        assert spec is not None
        return spec

    def table_spec(self, name: str) -> TableSpec | None:
        with self.plane.begin() as conn:
            row = conn.execute(sa.select(versioned_table).where(versioned_table.c.table_name == name)).first()
        if row is None:
            return None
        return TableSpec(row.table_name, json.loads(row.primary_key), row.schema_json, row.created_at)

    def update_schema(self, name: str, expected_schema_json: str, new_schema_json: str) -> bool:
        """Compare-and-set of a table's schema (compatible evolution); False when the stored
        schema is no longer `expected_schema_json` (changed concurrently)."""
        with self.plane.begin() as conn:
            result = conn.execute(
                versioned_table.update()
                .where(versioned_table.c.table_name == name)
                .where(versioned_table.c.schema_json == expected_schema_json)
                .values(schema_json=new_schema_json)
            )
        return result.rowcount == 1

    def tables(self) -> list[str]:
        with self.plane.begin() as conn:
            rows = conn.execute(sa.select(versioned_table.c.table_name).order_by(versioned_table.c.table_name))
            return [row[0] for row in rows]
