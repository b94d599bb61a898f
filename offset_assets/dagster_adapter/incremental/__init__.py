"""Incremental assets in Dagster: the decorators and their one engine body (`assets.py`),
one materialization's run and events (`invocation.py`, `run_report.py`), the IO manager,
and what watches or starts their runs: checks, sensors, schedules, automation, backfills.
The public names are exported by `offset_assets.dagster_adapter`."""
