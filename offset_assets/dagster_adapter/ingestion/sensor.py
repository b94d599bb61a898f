"""The sensor of an ingestion asset with dynamic range partitions (ids, Kafka offsets,
upstream ranges): it plans the job's next ranges from job_log, adds them as partitions
and requests a run of the first due one; control plane and source only, never Spark.

`plan_range_partitions` does the same planning for a shell (`offset-assets ranges plan`):
it adds the due ranges' partitions to the Dagster instance and returns their keys, for
`dagster asset materialize` to run in order."""

# No `from __future__ import annotations`: Dagster inspects the decorated functions'
# annotations (the context type) at definition time, so they must not be strings.

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import dagster as dg

from offset_assets.control_plane.database import ControlPlane
from offset_assets.control_plane.delta_catalog import DeltaCatalog
from offset_assets.control_plane.job_log import JobLog
from offset_assets.control_plane.job_log.records import JobStatus
from offset_assets.dagster_adapter.ingestion.assets import ingestion_job, ingestion_job_of
from offset_assets.dagster_adapter.ingestion.invocation import dagster_run_is_dead
from offset_assets.dagster_adapter.ingestion.partitions import range_partition_key, time_partition_key
from offset_assets.dagster_adapter.offset_store import OffsetStore
from offset_assets.ranges.ingestion import IngestionJob, plan_ranges
from offset_assets.ranges.planners import DataRange, RangeKind


def build_ingestion_sensor(
    job: IngestionJob,
    assets_def: dg.AssetsDefinition,
    *,
    name: str | None = None,
    minimum_interval_seconds: int = 60,
    default_status: dg.DefaultSensorStatus = dg.DefaultSensorStatus.STOPPED,
) -> dg.SensorDefinition:
    """A sensor that plans `job`'s next ranges from job_log, adds them as dynamic
    partitions of `assets_def` and requests a run of the first one (ranges run in
    order), as the job `ingestion_job(assets_def)` so the run names its target. Reads the
    control plane (the `OffsetStore` resource under the key `offset_store`) and the
    source's max id or offsets; never Spark.

    A backlog is planned as bounded ranges (the planner's `max_range_size`): each gets its
    partition at the first tick (a partial last one once it is next: its end follows the
    source until then), and a tick requests the next range only once the one before has
    committed, so a backlog advances one range per tick at most
    (`minimum_interval_seconds`)."""
    partitions_def = assets_def.partitions_def
    if not isinstance(partitions_def, dg.DynamicPartitionsDefinition):
        raise dg.DagsterInvalidDefinitionError(
            f"asset {assets_def.key.to_user_string()} has no dynamic range partitions "
            "(time-window ingestion is scheduled with build_ingestion_schedule)"
        )

    @dg.sensor(
        name=name or f"{job.name}_ranges_sensor",
        job=ingestion_job(assets_def),
        minimum_interval_seconds=minimum_interval_seconds,
        default_status=default_status,
        description=f"Plans the next {job.planner.kind} ranges of {job.name} from job_log "
                    "and materializes them in order.",
    )
    def _sensor(context: dg.SensorEvaluationContext,
                offset_store: OffsetStore) -> dg.SensorResult | dg.SkipReason:
        return evaluate_ingestion_sensor(job, partitions_def, offset_store.control_plane(),
                                         context.instance)

    return _sensor


def evaluate_ingestion_sensor(
    job: IngestionJob,
    partitions_def: dg.DynamicPartitionsDefinition,
    plane: ControlPlane,
    instance: dg.DagsterInstance,
) -> dg.SensorResult | dg.SkipReason:
    """One tick of `build_ingestion_sensor`, callable without the daemon (a script, a
    test, a first load): plans `job`'s due ranges from job_log and the source, asks for
    the dynamic partitions `instance` lacks, and requests a run of the first range
    (the retry of a failed one first: ranges run in order). A range RUNNING under a live
    run is waited for. Apply the result's `dynamic_partitions_requests` with
    `instance.add_dynamic_partitions` before launching its run request, or use
    `plan_range_partitions` (`offset-assets ranges plan`), which does both."""
    log = JobLog(plane)
    pending = plan_ranges(job, log)
    if not pending:
        return dg.SkipReason(f"{job.name}: no new range at the source")
    keys = _range_keys(job, log, pending)
    row = log.get_range(job.name, pending[0].start)
    new_keys = _missing_keys(keys[:-1] if _tail_moves(pending) else keys, partitions_def, instance)
    requests = [partitions_def.build_add_request(new_keys)] if new_keys else []
    policy = job.claim_policy
    is_dead = policy.is_run_dead or dagster_run_is_dead(instance)
    if row is not None and row.status == JobStatus.RUNNING and not log.is_stale(
        row, policy.stale_after_s, is_dead
    ):
        return dg.SensorResult(
            dynamic_partitions_requests=requests,
            skip_reason=f"{job.name}: range {keys[0]} is running under run {row.run_id}",
        )
    attempt = (row.attempt if row is not None else 0) + 1
    run = dg.RunRequest(run_key=f"{keys[0]}#{attempt}@{_state_stamp(job, plane)}",
                        partition_key=keys[0])
    return dg.SensorResult(run_requests=[run], dynamic_partitions_requests=requests)


def plan_range_partitions(
    job: IngestionJob,
    partitions_def: dg.PartitionsDefinition,
    plane: ControlPlane,
    instance: dg.DagsterInstance,
) -> list[str]:
    """The partition keys of `job`'s due ranges, in run order, planned as its sensor or
    schedule plans them (job_log and the source, never Spark). Dynamic range partitions
    missing from `instance` are added to it; time windows are partitions already."""
    log = JobLog(plane)
    pending = plan_ranges(job, log)
    if not pending:
        return []
    if isinstance(partitions_def, dg.TimeWindowPartitionsDefinition):
        return [time_partition_key(partitions_def, r) for r in pending]
    if not isinstance(partitions_def, dg.DynamicPartitionsDefinition) or partitions_def.name is None:
        raise dg.DagsterInvalidDefinitionError(
            f"{job.name}: partitions {partitions_def} are neither time windows nor named dynamic ranges"
        )
    keys = _range_keys(job, log, pending)
    new_keys = _missing_keys(keys, partitions_def, instance)
    if new_keys:
        instance.add_dynamic_partitions(partitions_def.name, new_keys)
    return keys


def _range_keys(job: IngestionJob, log: JobLog, pending: list[DataRange]) -> list[str]:
    keys = [range_partition_key(r) for r in pending]
    row = log.get_range(job.name, pending[0].start)
    if row is not None and row.status != JobStatus.SUCCESS:
        # Retry exactly the range that failed (or whose run died), under its own key.
        keys[0] = row.runtime_args_dict.get("partition_key", keys[0])
    return keys


def _tail_moves(pending: list[DataRange]) -> bool:
    """Whether the last range of an id backlog is a partial one waiting behind others: it
    ends at the max id read now, so its end (and key) moves with every row the source
    receives until it runs. The sensor adds its partition once it is next, so a growing
    source leaves no stale partition per tick."""
    if len(pending) < 2 or pending[-1].kind != RangeKind.AUTO_INC_ID:
        return False
    last, before = pending[-1], pending[-2]
    return _id_span(last) < _id_span(before)


def _id_span(data_range: DataRange) -> int:
    return int(data_range.end or data_range.start) - int(data_range.start)


def _missing_keys(keys: list[str], partitions_def: dg.DynamicPartitionsDefinition,
                  instance: dg.DagsterInstance) -> list[str]:
    known = set(instance.get_dynamic_partitions(partitions_def.name))
    return list(dict.fromkeys(k for k in keys if k not in known))


def _state_stamp(job: IngestionJob, plane: ControlPlane) -> str:
    """When the job's target table was registered in this control plane.

    Dagster never launches a run key twice, while a control plane deleted and created
    again (a demo reset) plans the same ranges with the same attempts: the stamp keeps
    their run keys new. The table is registered here when needed (control plane only,
    the same spec the first write registers), so even the first range carries it."""
    target = job.target
    spec = DeltaCatalog(plane).register_table(target.name, list(target.primary_key),
                                              target.schema.json())
    return datetime.fromtimestamp(spec.created_at, UTC).strftime("%Y%m%dT%H%M%S.%fZ")


class IngestedRange(str):
    """A range `ingest_due_ranges` ingested: its partition key (this string itself, so a
    caller that took the keys, compared them or printed them, sees the keys it saw
    before) and what its run did, as its materialization reported it.

    `rows_read`: the records read from the source (malformed ones included);
    `rows_upserted`, `rows_deleted`, `rows_unchanged`: what became of the keys written;
    `keys_written`: keys given a state; `superseded_in_range`: rows that gave their key no
    state (a later row of the key won); `rows_quarantined`: malformed records set aside;
    `delta_num`, `quarantine_delta_num`: the deltas committed (None: none); `job_id`,
    `attempt`: its job_log row; `run_id`: the Dagster run."""

    partition_key: str
    run_id: str
    job_id: int
    attempt: int
    rows_read: int
    rows_upserted: int
    rows_deleted: int
    rows_unchanged: int
    rows_quarantined: int
    keys_written: int
    superseded_in_range: int
    delta_num: int | None
    quarantine_delta_num: int | None

    def __new__(cls, partition_key: str, run_id: str, metadata: Mapping[str, Any]) -> "IngestedRange":
        ingested = super().__new__(cls, partition_key)
        values = {name: value.value if isinstance(value, dg.MetadataValue) else value
                  for name, value in metadata.items()}
        ingested.partition_key = partition_key
        ingested.run_id = run_id
        for name in _COUNTS:
            setattr(ingested, name, int(values.get(name, 0)))
        for name in ("delta_num", "quarantine_delta_num"):
            setattr(ingested, name, values.get(name))
        return ingested

    def __reduce__(self) -> tuple[Any, ...]:
        return _restored_range, (str(self), dict(vars(self)))


def _restored_range(partition_key: str, fields: dict[str, Any]) -> IngestedRange:
    """An `IngestedRange` as it was pickled or copied."""
    ingested = str.__new__(IngestedRange, partition_key)
    ingested.__dict__.update(fields)
    return ingested


_COUNTS = ("job_id", "attempt", "rows_read", "rows_upserted", "rows_deleted", "rows_unchanged",
           "rows_quarantined", "keys_written", "superseded_in_range")


def ingest_due_ranges(defs: dg.Definitions, asset: str | dg.AssetKey,
                      instance: dg.DagsterInstance) -> list[IngestedRange]:
    """Ingest every due range of the ingestion asset `asset`, one after the other, as its
    sensor and the daemon would: what a script, a notebook or a test does without the
    daemon (a first load, a catch-up). Each round plans the due ranges
    (`plan_range_partitions`: job_log and the source, adding the partitions the instance
    lacks) and materializes the first, so a failed range is retried first and a range's
    end is read when it runs. Returns the ranges ingested, in order, each its partition
    key with what its run did (`IngestedRange`: rows read, upserted, quarantined, ...); a
    failed range raises (it is logged FAILURE and retried by the next call). The control
    plane is the one of the Definitions' `offset_store` resource."""
    assets_def = defs.get_assets_def(asset)
    job = ingestion_job_of(assets_def)
    if job is None:
        raise dg.DagsterInvalidDefinitionError(f"{assets_def.key.to_user_string()} is not an ingestion asset")
    offset_store = defs.resources.get("offset_store")
    if not isinstance(offset_store, OffsetStore):
        raise dg.DagsterInvalidDefinitionError("the Definitions have no OffsetStore under the key offset_store")
    plane = offset_store.control_plane()
    ingested: list[IngestedRange] = []
    # A window still open stays due after its run (it is ingested whole once closed): once
    # it comes round again, what is due now has been ingested.
    while (keys := plan_range_partitions(job, assets_def.partitions_def, plane, instance)) \
            and keys[0] not in ingested:
        result = dg.materialize([assets_def], partition_key=keys[0], instance=instance, resources=defs.resources)
        [materialization] = result.asset_materializations_for_node(assets_def.node_def.name)
        ingested.append(IngestedRange(keys[0], result.run_id, materialization.metadata))
    return ingested
