"""`offset-assets offsets`, `reset` and `metrics`: committed offsets from the shell."""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from typing import Any

import click
from prometheus_client import CollectorRegistry, Gauge, generate_latest

from offset_assets.cli.base import clear_errors, main
from offset_assets.control_plane.database import connect
from offset_assets.control_plane.offsets import OffsetRepository


def _repository(obj: dict[str, Any]) -> OffsetRepository:
    return OffsetRepository(connect(obj["db_url"]))


def human_age(seconds: float) -> str:
    """`12s`, `3m12s`, `2h05m`, `3d04h`: precise enough to read, short enough to scan."""
    # A small negative age is clock skew between writer and reader: show it as 0s.
    total = max(0, int(seconds))
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d{hours:02d}h"
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"


def iso_utc(epoch_seconds: float) -> str:
    try:
        moment = datetime.fromtimestamp(epoch_seconds, tz=UTC)
    except (OverflowError, OSError, ValueError):
        return "out of range"
    return moment.isoformat(timespec="microseconds").replace("+00:00", "Z")


def _table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(cell) for cell in column) for column in zip(header, *rows, strict=True)]
    lines = [header, *rows]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
        for line in lines
    )


def _describe(transformation: str, input_name: str | None) -> str:
    if input_name is None:
        return f"transformation {transformation!r}"
    return f"transformation {transformation!r}, input {input_name!r}"


@main.command("offsets")
@click.argument("transformation", required=False)
@click.pass_obj
@clear_errors
def offsets_command(obj: dict[str, Any], transformation: str | None) -> None:
    """Committed offsets and how long since each last advanced."""
    stats = _repository(obj).get_statistics(transformation_id=transformation)
    if not stats:
        where = f" for {_describe(transformation, None)}" if transformation else ""
        click.echo(f"no offsets{where}")
        return
    rows = [
        [
            s["transformation_id"],
            s["input_table_name"],
            repr(s["update_ts_offset"]),
            iso_utc(s["update_ts_offset"]),
            human_age(s["offset_age_seconds"]),
        ]
        for s in stats
    ]
    click.echo(_table(["TRANSFORMATION", "INPUT", "OFFSET", "OFFSET (UTC)", "AGE"], rows))


@main.command("reset")
@click.argument("transformation")
@click.option("--input", "input_name", default=None, help="Reset only this input's offset.")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@click.pass_obj
@clear_errors
def reset_command(
    obj: dict[str, Any], transformation: str, input_name: str | None, yes: bool
) -> None:
    """Delete offsets so the next run reprocesses those inputs from the beginning."""
    repository = _repository(obj)
    target = _describe(transformation, input_name)
    current = [
        s
        for s in repository.get_statistics(transformation_id=transformation)
        if input_name is None or s["input_table_name"] == input_name
    ]
    if not current:
        click.echo(f"error: no offset to reset for {target}", err=True)
        sys.exit(1)
    if not yes:
        for s in current:
            click.echo(f"  {s['input_table_name']}: {s['update_ts_offset']!r}")
        click.confirm(f"Reset {len(current)} offset(s) of {target}?", abort=True)
    deleted = repository.reset_offset(transformation, input_name)
    if deleted == 0:
        click.echo(f"error: no offset to reset for {target} (reset meanwhile?)", err=True)
        sys.exit(1)
    for s in current:
        click.echo(
            f"reset {transformation} / {s['input_table_name']} "
            f"(was {s['update_ts_offset']!r}, {iso_utc(s['update_ts_offset'])})"
        )
    click.echo(f"{deleted} offset(s) reset; the next run reads these inputs from the beginning")


@main.command("metrics")
@click.pass_obj
@clear_errors
def metrics_command(obj: dict[str, Any]) -> None:
    """Offsets and their age in the Prometheus text exposition format."""
    registry = CollectorRegistry()
    labels = ["transformation_id", "input_table_name"]
    age = Gauge(
        "offset_assets_offset_age_seconds",
        "Seconds since the offset of this input last advanced.",
        labels,
        registry=registry,
    )
    value = Gauge(
        "offset_assets_offset_value",
        "Committed offset (epoch seconds of the last processed update_ts).",
        labels,
        registry=registry,
    )
    for s in _repository(obj).get_statistics():
        key = (s["transformation_id"], s["input_table_name"])
        age.labels(*key).set(s["offset_age_seconds"])
        value.labels(*key).set(s["update_ts_offset"])
    click.echo(generate_latest(registry).decode(), nl=False)
