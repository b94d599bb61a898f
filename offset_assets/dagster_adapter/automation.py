"""Declarative automation for incremental assets: run when an input has committed.

An incremental run processes only what its inputs committed since its offsets, so the
natural trigger is "an upstream asset materialized". `on_input_commits()` is Dagster's
`eager()` without the two clauses that do not fit incremental assets fed by partitioned
ingestion:

- `any_deps_missing`: an ingestion asset always has partitions not run yet (the next
  id range, today's window); eager() would wait for them forever, while the offsets
  already tell the run what is new;
- `in_latest_time_window`: incremental assets are not partitioned.

It still waits while an input or the asset itself is being materialized, so a burst of
ingestion ranges becomes one incremental run once they are done. Attach it with
`incremental_asset(..., automation_condition=on_input_commits())`; Dagster's
`default_automation_condition_sensor` evaluates it (Automation page of the UI).
Inputs written outside Dagster need the offset sensor (`sensors.build_offset_sensor`).
"""

from __future__ import annotations

import dagster as dg


def on_input_commits() -> dg.AutomationCondition:
    """Materialize once any upstream asset updated since the last request, when nothing
    upstream (or the asset itself) is in progress."""
    return (
        dg.AutomationCondition.any_deps_updated().since_last_handled()
        & ~dg.AutomationCondition.any_deps_in_progress()
        & ~dg.AutomationCondition.in_progress()
    ).with_label("on input commits")
