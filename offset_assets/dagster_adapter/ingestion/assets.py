"""Ingestion assets: one partition = one log-driven data range, ingested exactly once.

`ingestion_asset(job)` builds a partitioned Dagster asset from an `IngestionJob`
(source, planner, target table). Materializing a partition runs `RangeIngestion.run_range`
for its range under the Dagster run id (`invocation.py`): the range's rows and
its job_log SUCCESS commit together. Which run it is:
- the next range of the job (pointer, or the failed range to retry): a plain run;
  a later range fails with "waits for earlier range ..." (ranges run in order);
- the current time window, not ended yet (today's, for daily windows): what the source
  holds so far, re-ingested at every run while the window grows; the window stays due
  and is ingested again, whole, once it has closed;
- a range already ingested (or ingested and undone by a revert of the target since:
  REVERTED in job_log, a missing partition once the revert job ran), a backfill (tag
  `dagster/backfill`) or a run tagged `offset_assets/refresh`: a refresh, re-ingesting the
  range without moving the pointer past a gap; rows that did not change create no version.

Time-window jobs get `TimeWindowPartitionsDefinition`s whose last partition is the
current window (`end_offset=1`): a partition Dagster does not list cannot be launched
from the UI, and a materialization of a key outside the partitions definition is
dropped by declarative automation (it never counts as an update of the asset). A
schedule (`schedule.py`) runs each window as it closes. Id, Kafka and upstream
jobs get dynamic partitions, added by their sensor (`sensor.py`), which plans
the next ranges from job_log and requests a run for the first one: a backlog (a first
load) is one partition per bounded range (`AutoIncrementIdPlanner.max_range_size`), run
in order, each committed on its own. What a run reports
is built in `report.py`.

A job that quarantines malformed records (`on_malformed="quarantine"`) gets the asset
check `malformed_records`: it warns when a run set records aside, naming the quarantine
table and the partitions.

Like `incremental_asset`'s, the body drives one invocation opened on the typed
`IncrementalEngineResource` (resource key `incremental_engine`:
`IngestionInvocation.open(context, job, incremental_engine)`), which holds the Spark
session, control plane and warehouse; the `OffsetIOManager` under `io_manager_key` serves the ingested table to
downstream assets.
"""

# No `from __future__ import annotations`: Dagster inspects the decorated functions'
# annotations (the context type) at definition time, so they must not be strings.

import weakref
from collections.abc import Iterator, Mapping
from typing import Any

import dagster as dg

from offset_assets.dagster_adapter.asset_job import AssetJob
from offset_assets.dagster_adapter.asset_spec import (
    COLUMN_SCHEMA_KEY,
    TABLE_KEY,
    column_schema,
    schema_json,
    table_name_for,
)
from offset_assets.dagster_adapter.engine_resource import IncrementalEngineResource
from offset_assets.dagster_adapter.ingestion.invocation import QUARANTINE_CHECK, IngestionInvocation
from offset_assets.dagster_adapter.ingestion.partitions import time_window_partitions
from offset_assets.dagster_adapter.offset_store import OffsetStore
from offset_assets.ranges.ingestion import IngestionJob, OnMalformed
from offset_assets.ranges.planners import TimeWindowPlanner

# The job each ingestion asset was built from, by the asset's op: `Definitions` copies an
# asset to bind its resources but keeps its op, so a loaded code location still leads
# from an asset key to its job (`ingestion_job_of`, for `offset-assets ranges plan`).
_JOBS_BY_OP: weakref.WeakKeyDictionary[dg.OpDefinition, IngestionJob] = weakref.WeakKeyDictionary()


def ingestion_partitions(job: IngestionJob, end_offset: int = 1) -> dg.PartitionsDefinition:
    """Time windows for a time-window job (with `end_offset=1`, the last one is the current
    window), else dynamic partitions named after the job."""
    if isinstance(job.planner, TimeWindowPlanner):
        return time_window_partitions(job.planner, end_offset=end_offset)
    return dg.DynamicPartitionsDefinition(name=f"{job.name}_ranges")


def ingestion_asset(
    job: IngestionJob,
    *,
    key_prefix: str | list[str] | None = None,
    io_manager_key: str = "io_manager",
    end_offset: int = 1,
    metadata: Mapping[str, Any] | None = None,
    feeds: dg.AssetKey | str | None = None,
    **asset_kwargs: Any,
) -> dg.AssetsDefinition:
    """A partitioned asset ingesting `job`'s ranges into its target versioned table.

    The asset key is `key_prefix` + `job.name`; its versioned table must be the one the
    IO manager serves for that key (`job.target.name`), unless `feeds` names another
    asset whose table the job writes into (a second ingestion path of one table, like
    edits by time window beside inserts by id range). Downstream assets then read that
    asset's table, and list this one in their `deps` for lineage. Other keyword
    arguments (group_name, description, owners, tags, deps, retry_policy, ...) go to
    `dg.asset`. The body runs on the `IncrementalEngineResource` under the resource key
    `incremental_engine`; the asset also needs the `OffsetStore` under `offset_store`,
    which its sensor reads.

    `end_offset` (time windows only): how many windows past the last closed one are
    partitions. The default 1 lists the current window, so that what arrived today can
    be ingested from the UI (as it grows; see the module docstring); 0 lists closed
    windows only.
    """
    asset_key = dg.AssetKey([*_as_list(key_prefix), job.name])
    read_as = dg.AssetKey.from_coercible(feeds) if feeds is not None else asset_key
    if table_name_for(read_as) != job.target.name:
        raise dg.DagsterInvalidDefinitionError(
            f"ingestion asset {asset_key.to_user_string()} writes table {job.target.name!r}, "
            f"but asset {read_as.to_user_string()} is read downstream as table "
            f"{table_name_for(read_as)!r}: name the target table after the asset key, or "
            "pass feeds=<the asset whose table it writes>"
        )
    partitions_def = ingestion_partitions(job, end_offset)
    quarantines = job.on_malformed == OnMalformed.QUARANTINE
    check_specs = [*asset_kwargs.pop("check_specs", [])]
    if quarantines:
        check_specs.append(dg.AssetCheckSpec(
            QUARANTINE_CHECK, asset=asset_key,
            description=f"Warns when a range set malformed records aside in {job.quarantine_name!r}."))
    writes = (f"the versioned table {job.target.name!r}" if feeds is None else
              f"the versioned table {job.target.name!r} of asset {read_as.to_user_string()}")

    @dg.asset(
        key=asset_key,
        partitions_def=partitions_def,
        io_manager_key=io_manager_key,
        kinds=asset_kwargs.pop("kinds", {"spark"}),
        description=asset_kwargs.pop(
            "description",
            f"Ingests {job.source.source_type} data by {job.planner.kind} ranges into "
            f"{writes}, one partition per job_log range.",
        ),
        metadata={
            TABLE_KEY: job.target.name,
            # The target's columns, for the UI and for the checks of the assets reading it.
            COLUMN_SCHEMA_KEY: column_schema(schema_json(job.target.schema)),
            "offset_assets/log_driven_type": str(job.planner.kind),
            "offset_assets/source_type": job.source.source_type,
            **(metadata or {}),
        },
        check_specs=check_specs or None,
        **asset_kwargs,
    )
    # `offset_store` is not used here: the asset's sensor or schedule and the command line
    # read the control plane through it, so asking for it refuses definitions without it
    # when they load (`Definitions.validate_loadable`), not at a sensor's first tick.
    def _ingest(context: dg.AssetExecutionContext, incremental_engine: IncrementalEngineResource,
                offset_store: OffsetStore) -> Iterator[dg.MaterializeResult]:
        yield from IngestionInvocation.open(context, job, incremental_engine).stream()

    _JOBS_BY_OP[_ingest.op] = job
    return _ingest


def ingestion_job_of(assets_def: dg.AssetsDefinition) -> IngestionJob | None:
    """The `IngestionJob` `assets_def` was built from by `ingestion_asset`, else None."""
    return _JOBS_BY_OP.get(assets_def.op) if assets_def.is_executable else None


def _as_list(prefix: str | list[str] | None) -> list[str]:
    if prefix is None:
        return []
    return [prefix] if isinstance(prefix, str) else list(prefix)


def ingestion_job(assets_def: dg.AssetsDefinition) -> AssetJob:
    """The job that ingests ranges of `assets_def` (`<asset>_ingestion`): what its
    schedule or sensor launches, so every run shows the job it belongs to. Its partitions
    are the asset's (Dagster infers them from the selection)."""
    return dg.define_asset_job(f"{assets_def.key.to_python_identifier()}_ingestion",
                               selection=[assets_def.key])
