"""What an ingestion run reports: the Dagster metadata of the ranges it ingested, typed
so that counts plot and time bounds show as dates."""

from __future__ import annotations

import json
from typing import Any

import dagster as dg

from offset_assets.ranges.ingestion import RangeResult
from offset_assets.ranges.planners import RangeKind, parse_time


def range_bound_text(kind: RangeKind | str, bound: Any) -> str | None:
    """A range bound as a person reads it: time-window bounds (stored as job_log
    stores them, `YYYYMMDDHHMMSS`) as ISO 8601 UTC, ids and Kafka offsets as they are."""
    if bound is None:
        return None
    if str(kind) == str(RangeKind.TIME_WINDOW):
        return parse_time(str(bound)).isoformat() + "Z"
    return bound if isinstance(bound, str) else json.dumps(bound, sort_keys=True)


def quarantine_check_result(results: list[tuple[str, RangeResult]], quarantine_table: str,
                            check_name: str) -> dg.AssetCheckResult:
    """The quarantine check of a run: a warning when its ranges set malformed records aside."""
    quarantined = sum(r.rows_quarantined for _, r in results)
    return dg.AssetCheckResult(
        check_name=check_name, passed=quarantined == 0, severity=dg.AssetCheckSeverity.WARN,
        description=(f"{quarantined} malformed record(s) set aside in {quarantine_table!r}" if quarantined
                     else "no malformed record"),
        metadata={"rows_quarantined": dg.MetadataValue.int(quarantined),
                  "quarantine_table": dg.MetadataValue.text(quarantine_table),
                  "partition_keys": [key for key, r in results if r.rows_quarantined]},
    )


def ingestion_metadata(results: list[tuple[str, RangeResult]], row_count: int | None) -> dict[str, Any]:
    """Typed metadata (ints plot, timestamps show as dates) of the ranges one run ingested."""
    metadata: dict[str, Any] = {}
    if row_count is not None:
        metadata["dagster/row_count"] = dg.MetadataValue.int(row_count)
    if len(results) == 1:
        key, result = results[0]
        kind = result.data_range.kind
        fields = {
            "partition_key": dg.MetadataValue.text(key),
            "job_id": dg.MetadataValue.int(result.job_id),
            "attempt": dg.MetadataValue.int(result.attempt),
            "log_driven_type": dg.MetadataValue.text(str(kind)),
            "data_range_start": range_bound_text(kind, result.data_range.start),
            "data_range_end": range_bound_text(kind, result.data_range.end),
            "refresh": dg.MetadataValue.bool(result.data_range.refresh),
            "open_window": dg.MetadataValue.bool(result.open_window),
            "rows_read": dg.MetadataValue.int(result.rows_read),
            "keys_written": dg.MetadataValue.int(result.keys_written),
            "superseded_in_range": dg.MetadataValue.int(result.superseded_in_range),
            "rows_quarantined": dg.MetadataValue.int(result.rows_quarantined),
            "rows_upserted": dg.MetadataValue.int(result.rows_upserted),
            "rows_deleted": dg.MetadataValue.int(result.rows_deleted),
            "rows_unchanged": dg.MetadataValue.int(result.rows_unchanged),
            "delta_num": (dg.MetadataValue.int(result.delta_num) if result.delta_num is not None
                          else None),
            "quarantine_delta_num": (dg.MetadataValue.int(result.quarantine_delta_num)
                                     if result.quarantine_delta_num is not None else None),
            "commit_ts": (dg.MetadataValue.timestamp(result.commit_ts) if result.commit_ts is not None
                          else None),
            "took_over_run_id": result.took_over_run_id,
            "profile": dg.MetadataValue.md(result.profile.markdown()) if result.profile is not None else None,
            "profile.spark_jobs": (dg.MetadataValue.int(result.profile.job_count)
                                   if result.profile is not None and result.profile.jobs_counted else None),
        }
        return {**metadata, **{k: v for k, v in fields.items() if v is not None}}
    profiles = [r.profile for _, r in results]
    if profiles and all(p is not None and p.jobs_counted for p in profiles):
        metadata["profile.spark_jobs"] = dg.MetadataValue.int(sum(p.job_count for p in profiles))
    return {
        **metadata,
        "partition_keys": [key for key, _ in results],
        "rows_read": dg.MetadataValue.int(sum(r.rows_read for _, r in results)),
        "keys_written": dg.MetadataValue.int(sum(r.keys_written for _, r in results)),
        "superseded_in_range": dg.MetadataValue.int(sum(r.superseded_in_range for _, r in results)),
        "rows_quarantined": dg.MetadataValue.int(sum(r.rows_quarantined for _, r in results)),
        "rows_upserted": dg.MetadataValue.int(sum(r.rows_upserted for _, r in results)),
        "rows_deleted": dg.MetadataValue.int(sum(r.rows_deleted for _, r in results)),
        "rows_unchanged": dg.MetadataValue.int(sum(r.rows_unchanged for _, r in results)),
        "delta_nums": [r.delta_num for _, r in results if r.delta_num is not None],
    }
