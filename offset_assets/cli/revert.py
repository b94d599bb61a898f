"""`offset-assets revert TABLE --to N`: undo a bad load, as one new delta.

The table's actual state becomes its state as of delta N, written as one committed delta
(`offset_assets.versioned.revert`): the history stays, the transformations reading the
table process the keys it touched in their next incremental run, and the ingestion ranges
whose deltas it undid are marked REVERTED in job_log, to be loaded again once their source
is fixed. `--dry-run` prints what it would do and writes nothing; without `--yes` the
command prints the same and asks before it writes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import click

from offset_assets.cli.base import clear_errors, main, open_control_plane
from offset_assets.cli.maintenance import open_table, warehouse_option
from offset_assets.config import default_warehouse
from offset_assets.control_plane.job_log import JobRecord, RevertedRanges

if TYPE_CHECKING:
    from offset_assets.versioned.revert import RevertChanges, RevertPlan

SHOWN_RANGES = 10


@main.command("revert")
@click.argument("table")
@click.option("--to", "to_delta", type=int, required=True, help="The delta whose state TABLE goes back to (0: empty).")
@click.option("--dry-run", is_flag=True, help="Print what the revert would change; write nothing.")
@click.option("--yes", "-y", is_flag=True, help="Revert without asking.")
@click.option(
    "--sample", type=click.IntRange(min=0), default=5, show_default=True, help="Keys shown per kind of change."
)
@warehouse_option
@click.pass_obj
@clear_errors
def revert_command(
    obj: dict[str, Any], table: str, to_delta: int, dry_run: bool, yes: bool, sample: int, warehouse: str | None
) -> None:
    """Set TABLE's actual state back to its state as of delta --to, as one new delta.

    Only the keys changed after that delta are written: keys upserted back to their row
    then, keys added since deleted, keys deleted since restored. Every earlier delta stays
    (as-of reads answer as before); the transformations reading TABLE follow in their next
    run. Ingestion ranges whose deltas it undoes are marked REVERTED: run them again once
    their source is fixed. A transformation's output or meta table is refused.
    """
    if dry_run and yes:
        raise click.UsageError("--dry-run and --yes exclude each other")
    # Here, not at the top: the revert writes through Spark, which `show` and `sql` never import.
    from offset_assets.versioned.revert import plan_revert, revert_table

    versioned = open_table(open_control_plane(obj), table, warehouse or default_warehouse())
    if dry_run or not yes:
        plan = plan_revert(versioned, to_delta, sample=sample)
        click.echo(describe_plan(plan))
        if dry_run or plan.last_delta == to_delta:
            return
        click.confirm(f"Revert {table} to delta {to_delta}?", abort=True)
    result = revert_table(versioned, to_delta)
    if result.delta is None:
        click.echo(f"{table}: at delta {to_delta} already (its last committed delta): nothing to revert")
        return
    click.echo(
        f"{table}: reverted to delta {to_delta} as delta {result.delta.delta_num} "
        f"(undoes {_deltas(to_delta, result.last_delta)}): {_counts(result.changes)}"
    )
    click.echo(_ranges(result.ranges, done=True))


def describe_plan(plan: RevertPlan) -> str:
    """The dry run's text: what a revert would write, key samples, the ranges it marks."""
    name, to_delta = plan.table, plan.to_delta
    if plan.last_delta == to_delta:
        return f"{name}: at delta {to_delta} already (its last committed delta): nothing to revert"
    lines = [
        f"{name}: a revert to delta {to_delta} undoes {_deltas(to_delta, plan.last_delta)} "
        f"(last committed: {plan.last_delta}) as one new delta:"
    ]
    from offset_assets.versioned.revert import DELETED, RESTORED, UPSERTED_BACK

    for kind, label in ((UPSERTED_BACK, "upserted back"), (DELETED, "deleted"), (RESTORED, "restored")):
        count = getattr(plan.changes, kind)
        keys = plan.samples.get(kind, [])
        shown = f"  e.g. {', '.join(_key(k) for k in keys)}{', ...' if count > len(keys) else ''}" if keys else ""
        lines.append(f"  {label:<14}{count:>8} key(s){shown}")
    if plan.changes.unchanged:
        lines.append(
            f"  {'unchanged':<14}{plan.changes.unchanged:>8} key(s)  (changed after delta {to_delta} "
            "and back since: no version)"
        )
    lines.append(_ranges(plan.ranges, done=False))
    return "\n".join(lines)


def _deltas(to_delta: int, last: int) -> str:
    return f"delta {last}" if last == to_delta + 1 else f"deltas {to_delta + 1}..{last}"


def _counts(changes: RevertChanges) -> str:
    return f"{changes.upserted_back} upserted back, {changes.deleted} deleted, {changes.restored} restored"


def _key(key: Mapping[str, Any]) -> str:
    parts = [f"{column}={value!r}" if isinstance(value, str) else f"{column}={value}" for column, value in key.items()]
    return parts[0] if len(parts) == 1 else f"({', '.join(parts)})"


def _ranges(ranges: RevertedRanges, done: bool) -> str:
    """The ingestion ranges marked (or to be marked) REVERTED, and those SUCCESS again."""
    marked = "marked" if done else "to mark"
    lines = [f"  ingestion ranges {marked} REVERTED: {_listed(ranges.reverted)}"]
    if ranges.reverted:
        lines.append(
            "    (no plan runs them again: once their source is fixed, run their partitions, "
            "or RangeIngestion.run_range, to load them again)"
        )
    if ranges.restored:
        lines.append(f"  ingestion ranges {marked} SUCCESS again: {_listed(ranges.restored)}")
    return "\n".join(lines)


def _listed(rows: Sequence[JobRecord]) -> str:
    if not rows:
        return "none"
    shown = [f"{r.job_name} {r.data_range_start}..{r.data_range_end} (delta {r.target_delta_num})" for r in rows]
    more = len(shown) - SHOWN_RANGES
    return ", ".join(shown[:SHOWN_RANGES]) + (f" and {more} more" if more > 0 else "")
