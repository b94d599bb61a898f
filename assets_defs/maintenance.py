"""Table maintenance of the reference project: a job and its hourly schedule.

`table_maintenance` compacts, by a `MaintenancePolicy`, every versioned table of the
project (the transformations' inputs, their outputs and their meta tables
`_meta__<transformation>`), then cleans each up: snapshots superseded longer ago than
the retention and files no catalog row references are removed. Deciding costs a
catalog query per table, so the hourly cadence is cheap when nothing is due; it runs
beside the transformations without pausing them (a compaction changes nothing of a
run in flight, `tests/test_maintenance.py`).
"""

import dagster as dg
from pydantic import Field

from assets_defs.assets.transformations import TRANSFORMATIONS
from offset_assets.dagster_adapter import IncrementalEngineResource, resolve_incremental
from offset_assets.engine.transformation import meta_table_name
from offset_assets.versioned.maintenance import (
    DEFAULT_RETENTION_S,
    MaintenancePolicy,
    cleanup,
    maintain,
)

DEFAULT_POLICY = MaintenancePolicy()


def project_tables() -> list[str]:
    """Every versioned table the project's transformations read or write, in order."""
    names: list[str] = []
    for assets_def in TRANSFORMATIONS:
        asset = resolve_incremental(assets_def)
        names += [*asset.input_tables, *asset.output_tables, meta_table_name(asset.transformation_id)]
    return list(dict.fromkeys(names))


class MaintenanceConfig(dg.Config):
    """The compaction policy and the cleanup retention of one maintenance run."""

    max_deltas_since_snapshot: int = Field(
        default=DEFAULT_POLICY.max_deltas_since_snapshot,
        description="Compact once this many deltas with versions follow the latest snapshot.",
    )
    max_rows_ratio: float | None = Field(
        default=DEFAULT_POLICY.max_rows_ratio,
        description="...or once those deltas hold this many times the snapshot's rows (null: off).",
    )
    retention_hours: float = Field(
        default=DEFAULT_RETENTION_S / 3600,
        description="Superseded snapshots and unreferenced files younger than this are kept; "
        "must exceed the longest run.",
    )


@dg.op(description="Compact the project's versioned tables by the policy, then clean them up.")
def maintain_tables(
    context: dg.OpExecutionContext, config: MaintenanceConfig, incremental_engine: IncrementalEngineResource
) -> dg.Output[None]:
    policy = MaintenancePolicy(config.max_deltas_since_snapshot, config.max_rows_ratio)
    summary: dict[str, str] = {}
    for name in project_tables():
        table = incremental_engine.registered_table(name)
        if table is None:
            summary[name] = "not materialized yet"
            continue
        done = maintain(table, policy)
        cleaned = cleanup(table, config.retention_hours * 3600)
        summary[name] = (
            f"{'compacted at delta ' + str(done.snapshot_delta) if done.compacted else 'not compacted'} "
            f"({done.reason}); {len(cleaned.expired_snapshots)} snapshot(s) expired, "
            f"{len(cleaned.removed_paths)} folder(s) removed"
        )
        context.log.info(f"{name}: {summary[name]}")
    return dg.Output(None, metadata={name: dg.MetadataValue.text(text) for name, text in summary.items()})


@dg.job(description="Compaction and cleanup of every versioned table of the project.")
def table_maintenance() -> None:
    maintain_tables()


table_maintenance_hourly = dg.ScheduleDefinition(
    name="table_maintenance_hourly",
    job=table_maintenance,
    cron_schedule="45 * * * *",
    description="Compaction by the policy and cleanup, hourly (cheap when nothing is due).",
)
