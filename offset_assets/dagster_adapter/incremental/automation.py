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

What it cannot see, the offset sensor (`sensors.build_offset_sensor`) does:
- commits made outside Dagster (engine API, CLI): no materialization at all;
- a materialization of a partition key that the upstream asset's partitions definition
  does not hold: Dagster keeps only valid keys when it computes what updated, so such a
  run never counts. Time-window ingestion therefore lists the current window as a
  partition (`ingestion_asset(end_offset=1)`): today's edits are a valid partition.

It differs from eager() in one more point: an upstream update is pending until the
asset is *requested*, not until it materializes. A run of the asset that was already
under way when an input committed took its snapshot before that commit; with eager()'s
`since_last_handled()` its materialization would clear the update, and the commit
would wait, unprocessed, for the next one. Here it is requested once that run ends. The
price: a run launched by hand after an update is followed by one more, which finds
nothing new (the changed index is empty: cheap).
"""

from __future__ import annotations

import dagster as dg


def on_input_commits() -> dg.AutomationCondition:
    """Materialize once any upstream asset updated since the last request, when nothing
    upstream (or the asset itself) is in progress."""
    # Not `since_last_handled()`: its reset includes the asset's own materialization,
    # which also ends a run that took its snapshot before the upstream update.
    since_requested = (
        dg.AutomationCondition.newly_requested() | dg.AutomationCondition.initial_evaluation()
    ).with_label("requested")
    return (
        dg.AutomationCondition.any_deps_updated().since(since_requested)
        & ~dg.AutomationCondition.any_deps_in_progress()
        & ~dg.AutomationCondition.in_progress()
    ).with_label("on input commits")
