"""`offset-assets offsets`, `rescan` (alias `reset`), `reprocess` and `metrics`: offsets
from the shell.

Two verbs undo work on purpose, named for what the next run then does:
- `rescan`: offsets only. The next run reads the inputs' whole history and processes
  the keys whose meta is older than their versions; processed keys stay processed.
- `reprocess`: a reprocess request (offsets deleted in the same transaction); the next
  run processes every key again, like a Dagster backfill.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import click
from prometheus_client import CollectorRegistry, Gauge, generate_latest

from offset_assets.cli.base import clear_errors, main, open_control_plane
from offset_assets.control_plane.database import ControlPlane
from offset_assets.control_plane.delta_catalog import DeltaCatalog
from offset_assets.control_plane.offsets import OffsetRepository
from offset_assets.control_plane.reprocess import ReprocessRequests
from offset_assets.errors import OffsetAssetsError


class UnknownTransformationError(OffsetAssetsError):
    """A transformation (or input) name the control plane does not know."""


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


def known_transformations(plane: ControlPlane) -> list[str]:
    """Transformations this control plane knows: those with offsets or with a meta table
    (a transformation that ran, even if it has no offset now)."""
    with_offsets = {s["transformation_id"] for s in OffsetRepository(plane).get_statistics()}
    # Imported here: the engine imports PySpark, which a reading command must not pay for.
    from offset_assets.engine.transformation import meta_table_name

    meta_prefix = meta_table_name("")
    with_meta = {name.removeprefix(meta_prefix) for name in DeltaCatalog(plane).tables()
                 if name.startswith(meta_prefix)}
    return sorted(with_offsets | with_meta)


def require_known(plane: ControlPlane, transformation: str) -> None:
    """Refuse a name the control plane has never seen (a typo), naming the known ones."""
    known = known_transformations(plane)
    if transformation not in known:
        raise UnknownTransformationError(
            f"no transformation {transformation!r} in the control plane "
            f"(transformations: {', '.join(known) or 'none'})"
        )


@main.command("offsets")
@click.argument("transformation", required=False)
@click.pass_obj
@clear_errors
def offsets_command(obj: dict[str, Any], transformation: str | None) -> None:
    """Committed offsets and how long since each last advanced."""
    plane = open_control_plane(obj)
    if transformation is not None:
        require_known(plane, transformation)
    stats = OffsetRepository(plane).get_statistics(transformation_id=transformation)
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


def _rescan(obj: dict[str, Any], transformation: str, input_name: str | None, yes: bool) -> None:
    plane = open_control_plane(obj)
    require_known(plane, transformation)
    repository = OffsetRepository(plane)
    target = _describe(transformation, input_name)
    current = [
        s
        for s in repository.get_statistics(transformation_id=transformation)
        if input_name is None or s["input_table_name"] == input_name
    ]
    if not current:
        inputs = ", ".join(s["input_table_name"]
                           for s in repository.get_statistics(transformation_id=transformation))
        raise UnknownTransformationError(
            f"no offset to reset for {target} (inputs with offsets: {inputs or 'none'})")
    if not yes:
        for s in current:
            click.echo(f"  {s['input_table_name']}: {iso_utc(s['update_ts_offset'])}")
        click.confirm(f"Reset {len(current)} offset(s) of {target}?", abort=True)
    deleted = repository.reset_offset(transformation, input_name)
    if deleted == 0:
        raise UnknownTransformationError(f"no offset to reset for {target} (reset meanwhile?)")
    for s in current:
        click.echo(f"reset {transformation} / {s['input_table_name']} (was {iso_utc(s['update_ts_offset'])})")
    click.echo(
        f"{deleted} offset(s) reset. The next run re-scans these inputs' whole history and "
        "processes the keys whose meta is older than their versions (changes not processed "
        f"yet); keys already processed stay as they are. To process every key again: "
        f"offset-assets reprocess {transformation}"
    )


_RESCAN_HELP = """Delete offsets (all of TRANSFORMATION's, or one input's) so the next run
re-scans those inputs from the beginning.

A re-scan finds what the offsets may have skipped: keys whose meta is older than their
versions come back. Keys already processed at their current version are not processed
again; for that, use `reprocess`."""


@main.command("rescan", help=_RESCAN_HELP)
@click.argument("transformation")
@click.option("--input", "input_name", default=None, help="Reset only this input's offset.")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@click.pass_obj
@clear_errors
def rescan_command(obj: dict[str, Any], transformation: str, input_name: str | None, yes: bool) -> None:
    _rescan(obj, transformation, input_name, yes)


@main.command("reset", help="The former name of `rescan`, kept for scripts. " + _RESCAN_HELP)
@click.argument("transformation")
@click.option("--input", "input_name", default=None, help="Reset only this input's offset.")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@click.pass_obj
@clear_errors
def reset_command(obj: dict[str, Any], transformation: str, input_name: str | None, yes: bool) -> None:
    _rescan(obj, transformation, input_name, yes)


@main.command("reprocess")
@click.argument("transformation")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@click.pass_obj
@clear_errors
def reprocess_command(obj: dict[str, Any], transformation: str, yes: bool) -> None:
    """Make the next run of TRANSFORMATION process every key again, like a backfill.

    One control-plane transaction records a reprocess request and deletes the
    transformation's offsets. The next run processes every key whose meta is older than
    the request (all of them); a run that dies half-way leaves the request in place and
    the following run goes on with the keys still left."""
    plane = open_control_plane(obj)
    require_known(plane, transformation)
    requests = ReprocessRequests(plane)
    pending = requests.pending(transformation)
    if pending is not None:
        click.echo(f"{transformation}: a reprocess request is already pending since {iso_utc(pending)}; "
                   "it covers every key, offsets are deleted again")
    offsets = OffsetRepository(plane).get_offsets_for_transformation(transformation)
    if not yes:
        for name, value in sorted(offsets.items()):
            click.echo(f"  {name}: {iso_utc(value)}")
        click.confirm(f"Reprocess every key of {transformation!r} on its next run"
                      f"{' and delete these offsets' if offsets else ''}?", abort=True)
    requested = requests.request(transformation)
    for name, value in sorted(offsets.items()):
        click.echo(f"reset {transformation} / {name} (was {iso_utc(value)})")
    click.echo(f"reprocess requested at {iso_utc(requested)}: the next run of {transformation} "
               "processes every key again")


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
    for s in OffsetRepository(open_control_plane(obj)).get_statistics():
        key = (s["transformation_id"], s["input_table_name"])
        age.labels(*key).set(s["offset_age_seconds"])
        value.labels(*key).set(s["update_ts_offset"])
    click.echo(generate_latest(registry).decode(), nl=False)
