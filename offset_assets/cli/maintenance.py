"""`offset-assets compact TABLE` and `offset-assets cleanup [TABLE]`: table maintenance.

Compaction snapshots a table's actual state so reads stop merging every delta; cleanup
removes snapshots superseded longer ago than the retention and files no catalog row
references (see `offset_assets.versioned.maintenance`).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import click

from offset_assets.cli.base import clear_errors, main, open_control_plane
from offset_assets.config import default_warehouse
from offset_assets.control_plane.database import ControlPlane
from offset_assets.control_plane.delta_catalog import DeltaCatalog
from offset_assets.control_plane.delta_catalog.errors import UnknownTableError
from offset_assets.versioned.errors import VersionedTableError
from offset_assets.versioned.maintenance import (
    DEFAULT_RETENTION_S,
    MaintenancePolicy,
    cleanup,
    maintain,
)

if TYPE_CHECKING:  # Spark is imported by the commands that use it, not by `show` or `sql`
    from offset_assets.versioned.table import VersionedTable

DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$")


def parse_duration(_ctx: click.Context, _param: click.Parameter, text: str) -> float:
    """Seconds in `text`: a number with an optional unit s, m, h or d (`90m`, `7d`, `0`)."""
    match = DURATION.match(text)
    if match is None:
        raise click.BadParameter(f"{text!r} is not a duration such as 3600, 90m, 24h or 7d")
    return float(match.group(1)) * DURATION_UNITS[match.group(2) or "s"]


def open_table(plane: ControlPlane, name: str, warehouse: str) -> VersionedTable:
    """The registered table `name`, refused when its files are not under `warehouse`
    (a snapshot written there would be readable, but cleanup would look elsewhere)."""
    from offset_assets.spark import get_spark_session
    from offset_assets.versioned.registered import open_registered_table

    catalog = DeltaCatalog(plane)
    table = open_registered_table(get_spark_session, plane, name, warehouse)
    if table is None:
        known = ", ".join(catalog.tables()) or "none"
        raise UnknownTableError(f"no versioned table {name!r} in the delta catalog (tables: {known})")
    stray = next((path for path in sorted(catalog.data_paths(name)) if not path.startswith(f"{table.root}/")), None)
    if stray is not None:
        raise VersionedTableError(
            name, f"its files are at {stray}, not under warehouse {warehouse!r}: pass --warehouse"
        )
    return table


warehouse_option = click.option(
    "--warehouse", envvar="OFFSET_ASSETS_WAREHOUSE", default=None, help="Warehouse root (default ./state/warehouse)."
)


@main.command("compact")
@click.argument("table")
@click.option("--max-deltas", type=click.IntRange(min=1), default=1, show_default=True,
              help="Compact only once this many deltas with versions follow the latest snapshot.")
@click.option("--max-rows-ratio", type=click.FloatRange(min=0, min_open=True), default=None,
              help="...or once they hold this many times the snapshot's rows.")
@warehouse_option
@click.pass_obj
@clear_errors
def compact_command(obj: dict[str, Any], table: str, max_deltas: int, max_rows_ratio: float | None,
                    warehouse: str | None) -> None:
    """Snapshot the actual state of TABLE at its last committed delta.

    By default whenever a delta with versions follows the latest snapshot; with
    --max-deltas / --max-rows-ratio only when that policy says it is due. History stays
    exact: deltas are kept, reads before the snapshot are unchanged.
    """
    versioned = open_table(open_control_plane(obj), table, warehouse or default_warehouse())
    result = maintain(versioned, MaintenancePolicy(max_deltas, max_rows_ratio))
    if result.compacted:
        rows = versioned.catalog.snapshot_at(table, result.snapshot_delta).row_count
        click.echo(f"{table}: snapshot at delta {result.snapshot_delta} ({rows} rows); {result.reason}")
    else:
        at = "no snapshot" if result.snapshot_delta is None else f"snapshot at delta {result.snapshot_delta}"
        click.echo(f"{table}: not compacted ({result.reason}; {at}, {result.deltas_since_snapshot} delta(s) after it)")


@main.command("cleanup")
@click.argument("table", required=False)
@click.option("--retention", default=f"{int(DEFAULT_RETENTION_S // 3600)}h", show_default=True,
              callback=parse_duration,
              help="Keep superseded snapshots and unreferenced files younger than this (s, m, h, d).")
@warehouse_option
@click.pass_obj
@clear_errors
def cleanup_command(obj: dict[str, Any], table: str | None, retention: float, warehouse: str | None) -> None:
    """Remove expired snapshots and orphan files of TABLE (default: every table).

    A snapshot expires once a newer one has superseded it for longer than the
    retention; orphans are folders no catalog row references (rolled-back or crashed
    writes, failed compactions). The retention must exceed the longest run.
    """
    plane = open_control_plane(obj)
    names = [table] if table else DeltaCatalog(plane).tables()
    for name in names:
        result = cleanup(open_table(plane, name, warehouse or default_warehouse()), retention)
        click.echo(
            f"{name}: {len(result.expired_snapshots)} snapshot(s) expired"
            f"{' ' + str(result.expired_snapshots) if result.expired_snapshots else ''}, "
            f"{len(result.removed_paths)} folder(s) removed"
        )
        for path in result.removed_paths:
            click.echo(f"  removed {path}")
