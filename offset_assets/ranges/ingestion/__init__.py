"""Ingesting one data range into a versioned table, exactly once.

claim the range (ordered, atomic) -> read the source rows of the range -> write them
into the target table's hot delta -> commit that delta in the control-plane transaction
that also writes job_log SUCCESS and the step_log rows. Either the data and SUCCESS
are both committed or neither is: a crash anywhere before leaves the range RUNNING
(taken over once its holder is found dead) or FAILURE, and the retry writes it again.

Rows equal to the table's actual state create no version (versioned-table rule), so a
re-run or refresh of a range that changed nothing at the source commits no delta.

A range is a fixed slice once it has run: an end left to the run (a Kafka range's, an id
range's max id) is decided once the range is claimed and recorded in job_log before a row
is read, and every later run of the range (retry, takeover, refresh, a Dagster partition
launched again) reads exactly to it. A run that died holding the target's hot delta
(killed during the write or inside the commit) blocks nothing: the next writer finds the
delta's holder dead in job_log and discards it (`RangeWrites.open_target_delta`).

A time window that has not ended yet (today's, for daily windows) can be ingested too:
always as a refresh, and its job_log row records end = start, the mark of a range that
holds nothing. Its rows are committed, but the pointer does not move past the window,
and once the window has closed the planner runs it again, whole: rows that changed after
the early run are ingested then, the others create no version.

What a range's rows become (`rows.py`, `malformed_policy.py`, `writes.py`):
- several rows of one key are reduced to the last by the source's own order
  (`SourceBatch.order`: a Kafka partition's offsets, a declared `order_by` column) in the
  write's own grouping (`versioned.writes.StateOrder`): no Spark job of its own. The
  order's columns go through a `transform` as columns of its output; a transform that
  drops them leaves the rows unordered, and a key's different states then refuse the
  range, saying which columns to keep;
- a row with `sys_op` 1 deletes its key (a Kafka tombstone);
- a record whose values do not fit (`SourceBatch.malformed`) fails the range naming it
  (`on_malformed="fail"`), or goes with its raw value and the reason to the job's
  quarantine table (`"quarantine"`), committed in the range's transaction; a range whose
  share of such records passes `max_malformed_share` fails all the same (a wrong
  declaration would otherwise set everything aside and log SUCCESS).
"""

from __future__ import annotations

from offset_assets.ranges.ingestion.job import (
    DEFAULT_MAX_MALFORMED_SHARE,
    MALFORMED_SHARE_MIN_RECORDS,
    QUARANTINE_KEY,
    QUARANTINE_SCHEMA,
    IngestionJob,
    OnMalformed,
    TargetTable,
    is_open_window,
    plan_inputs,
    plan_ranges,
)
from offset_assets.ranges.ingestion.run import RangeIngestion, RangeResult

__all__ = ["DEFAULT_MAX_MALFORMED_SHARE", "MALFORMED_SHARE_MIN_RECORDS", "QUARANTINE_KEY", "QUARANTINE_SCHEMA",
           "IngestionJob", "OnMalformed", "RangeIngestion", "RangeResult", "TargetTable", "is_open_window",
           "plan_inputs", "plan_ranges"]
