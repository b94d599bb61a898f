"""`offset-assets deltas TABLE`: the delta catalog of one versioned table."""

from __future__ import annotations

import json
from typing import Any

import click

from offset_assets.cli.base import clear_errors, main, open_control_plane
from offset_assets.cli.offsets import iso_utc
from offset_assets.control_plane.delta_catalog import DeltaCatalog
from offset_assets.control_plane.delta_catalog.errors import UnknownTableError
from offset_assets.control_plane.delta_catalog.records import DeltaInfo

HEADER = ["delta", "status", "committed at (UTC)", "upserted", "deleted", "run", "holder"]


def _row(delta: DeltaInfo) -> list[str]:
    def count(value: int | None) -> str:
        return "-" if value is None else str(value)

    return [
        str(delta.delta_num),
        delta.status,
        iso_utc(delta.commit_ts) if delta.commit_ts is not None else "-",
        count(delta.rows_upserted),
        count(delta.rows_deleted),
        delta.run_id or "-",
        delta.holder or "-",
    ]


def _render(rows: list[list[str]]) -> str:
    widths = [max(len(line[i]) for line in [HEADER, *rows]) for i in range(len(HEADER))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
        for line in [HEADER, *rows]
    )


@main.command("deltas")
@click.argument("table")
@click.option(
    "--limit", "-n", type=click.IntRange(min=1), default=None, help="Newest N deltas only."
)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per delta.")
@click.pass_obj
@clear_errors
def deltas_command(obj: dict[str, Any], table: str, limit: int | None, as_json: bool) -> None:
    """Deltas of versioned table TABLE, newest first: number, status (hot/committed),
    commit time, versions upserted and deleted, the run and holder that wrote it."""
    catalog = DeltaCatalog(open_control_plane(obj))
    if catalog.table_spec(table) is None:
        known = ", ".join(catalog.tables()) or "none"
        raise UnknownTableError(
            f"no versioned table {table!r} in the delta catalog (tables: {known})"
        )
    deltas = catalog.deltas(table, limit=limit)
    if as_json:
        for delta in deltas:
            click.echo(
                json.dumps(
                    {
                        "delta_num": delta.delta_num,
                        "status": delta.status,
                        "commit_ts": delta.commit_ts,
                        "committed_at": iso_utc(delta.commit_ts) if delta.commit_ts is not None else None,
                        "rows_upserted": delta.rows_upserted,
                        "rows_deleted": delta.rows_deleted,
                        "run_id": delta.run_id,
                        "holder": delta.holder,
                        "data_path": delta.data_path,
                        "reverts_to": delta.reverts_to,
                    }
                )
            )
        return
    if not deltas:
        click.echo(f"table {table!r} has no deltas yet")
        return
    click.echo(_render([_row(d) for d in deltas]))
