"""A revert from the Dagster UI: `revert_job()`, whose op sets a versioned table back to its
state as of an earlier delta (`offset_assets.versioned.revert`), configured in the
launchpad (`RevertConfig`: table, to_delta, dry_run).

What the run shows: the revert's counts, key samples and the ingestion ranges it marked
REVERTED, in its output's metadata, and an observation of each of their partitions (in
the ingestion assets the job was built with): `job_log_status` REVERTED, with which delta
of which table the range had committed; a launch of such a partition, once its source is
fixed, loads the range again (`range_to_run`) and its materialization follows the
observation. A revert of a revert observes the partitions it ingests again as SUCCESS.
(Dagster's open-source event storages cannot wipe one partition's materializations, so a
reverted partition keeps its last materialization, the observation after it says why it
no longer holds.)

Downstream, nothing is asked of Dagster: the revert's delta is a commit like any other,
which the offset sensors and the next incremental runs follow.
"""

# No `from __future__ import annotations`: Dagster reads the op's annotations (the config
# and resource types) at definition time.

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import dagster as dg
from pydantic import Field

from offset_assets.control_plane.job_log import JobRecord
from offset_assets.dagster_adapter.engine_resource import IncrementalEngineResource
from offset_assets.dagster_adapter.ingestion.assets import ingestion_job_of
from offset_assets.dagster_adapter.ingestion.partitions import range_partition_key, time_partition_key
from offset_assets.errors import OffsetAssetsError
from offset_assets.ranges.planners import DataRange, RangeKind
from offset_assets.versioned.revert import (
    DELETED,
    RESTORED,
    UPSERTED_BACK,
    RevertChanges,
    plan_revert,
    revert_table,
)

REVERT_JOB = "revert_table"
# The op's name (the launchpad's `ops: {revert: ...}`): a job's graph and its op cannot share one.
REVERT_OP = "revert"


class RevertConfig(dg.Config):
    """What one run of the revert job reverts."""

    table: str = Field(description="The versioned table to revert (its name in the delta catalog).")
    to_delta: int = Field(description="The delta whose state the table goes back to (0: empty).")
    dry_run: bool = Field(default=False, description="Report what the revert would change; write nothing.")


def revert_job(ingestion_assets: "Sequence[dg.AssetsDefinition]" = (), name: str = REVERT_JOB) -> "dg.JobDefinition":
    """A job of one op that reverts a versioned table: launched with a `RevertConfig`
    (`ops: {revert: {config: {table: posts, to_delta: 1, dry_run: true}}}`), on the
    `IncrementalEngineResource` of the Definitions (resource key `incremental_engine`).

    `ingestion_assets`: the `ingestion_asset`s on whose partitions the run observes the
    ranges a revert undoes (REVERTED) or ingests again (SUCCESS); the ranges of other jobs
    are marked in job_log only."""
    strays = [asset.key.to_user_string() for asset in ingestion_assets if ingestion_job_of(asset) is None]
    if strays:
        raise dg.DagsterInvalidDefinitionError(f"revert_job: {strays} were not built by ingestion_asset")
    by_job = {ingestion_job_of(asset).name: asset for asset in ingestion_assets}

    @dg.op(
        name=REVERT_OP,
        # What it did is the output's metadata; nothing is stored by an IO manager.
        out=dg.Out(dg.Nothing),
        description="Set a versioned table back to its state as of an earlier delta, as one new delta; "
        "mark the ingestion ranges it undoes REVERTED.",
    )
    def revert_table_op(
        context: dg.OpExecutionContext, config: RevertConfig, incremental_engine: IncrementalEngineResource
    ) -> Iterator[Any]:
        yield from _revert(context, config, incremental_engine, by_job)

    @dg.job(
        name=name,
        description="Revert a versioned table to an earlier delta, as one new delta (a dry run first: "
        "config dry_run true).",
    )
    def _revert_job() -> None:
        revert_table_op()

    return _revert_job


def _revert(
    context: dg.OpExecutionContext,
    config: RevertConfig,
    incremental_engine: IncrementalEngineResource,
    by_job: Mapping[str, dg.AssetsDefinition],
) -> Iterator[Any]:
    """The op's body: the dry run's or the revert's events, then its output."""
    table = incremental_engine.registered_table(config.table)
    if table is None:
        raise dg.Failure(description=f"no versioned table {config.table!r} in the delta catalog")
    try:
        if config.dry_run:
            plan = plan_revert(table, config.to_delta)
            context.log.info(f"{config.table}: a revert to delta {config.to_delta} would write {plan.changes}")
            yield dg.Output(
                None,
                metadata={
                    **_changes_metadata(plan.changes),
                    "dry_run": True,
                    "last_delta": plan.last_delta,
                    "samples": dg.MetadataValue.json(dict(plan.samples)),
                    "ranges_to_revert": dg.MetadataValue.json(_ranges(plan.ranges.reverted)),
                },
            )
            return
        result = revert_table(table, config.to_delta, run_id=context.run_id)
    except OffsetAssetsError as exc:
        raise dg.Failure(description=str(exc)) from exc
    if result.delta is None:
        context.log.info(f"{config.table}: at delta {config.to_delta} already: nothing to revert")
    else:
        context.log.info(f"{config.table}: reverted to delta {config.to_delta} as delta {result.delta.delta_num}")
        yield from _observed_partitions(by_job, result.delta.delta_num, result.ranges.reverted, result.ranges.restored)
    yield dg.Output(
        None,
        metadata={
            **_changes_metadata(result.changes),
            "dry_run": False,
            "last_delta": result.last_delta,
            **({"delta": result.delta.delta_num} if result.delta is not None else {}),
            "ranges_reverted": dg.MetadataValue.json(_ranges(result.ranges.reverted)),
            "ranges_restored": dg.MetadataValue.json(_ranges(result.ranges.restored)),
        },
    )


def _changes_metadata(changes: RevertChanges) -> dict[str, int]:
    return {
        f"keys_{UPSERTED_BACK}": changes.upserted_back,
        f"keys_{DELETED}": changes.deleted,
        f"keys_{RESTORED}": changes.restored,
        "keys_unchanged": changes.unchanged,
    }


def _ranges(rows: Sequence[JobRecord]) -> list[dict[str, Any]]:
    return [
        {"job": r.job_name, "start": r.data_range_start, "end": r.data_range_end, "delta": r.target_delta_num}
        for r in rows
    ]


def _observed_partitions(
    by_job: Mapping[str, dg.AssetsDefinition],
    revert_delta: int,
    reverted: Sequence[JobRecord],
    restored: Sequence[JobRecord],
) -> Iterator[dg.AssetObservation]:
    """An observation of each partition whose range revert delta `revert_delta` undid
    (REVERTED) or ingested again (SUCCESS: a revert of a revert), in the ingestion assets
    the job knows."""
    for rows, status in ((reverted, "REVERTED"), (restored, "SUCCESS")):
        for row in rows:
            assets_def = by_job.get(row.job_name)
            if assets_def is None:
                continue
            what = (
                "undone: launch this partition again once its source is fixed"
                if status == "REVERTED"
                else "ingested again (a revert to a delta after it)"
            )
            yield dg.AssetObservation(
                assets_def.key,
                partition=_partition_key(assets_def, row),
                description=f"revert delta {revert_delta} of {row.target_table!r}: range {what}",
                metadata={
                    "job_log_status": status,
                    "table": row.target_table,
                    "range_delta": row.target_delta_num,
                    "revert_delta": revert_delta,
                },
            )


def _partition_key(assets_def: dg.AssetsDefinition, row: JobRecord) -> str:
    """The partition a range ran as: the one its run recorded, else the one it stands for."""
    recorded = row.runtime_args_dict.get("partition_key")
    if recorded:
        return recorded
    data_range = DataRange(RangeKind(row.log_driven_type), row.data_range_start, row.data_range_end)
    if isinstance(assets_def.partitions_def, dg.TimeWindowPartitionsDefinition):
        return time_partition_key(assets_def.partitions_def, data_range)
    return range_partition_key(data_range)
