"""Ingestion assets in Dagster: one partition = one log-driven range (`partitions.py`),
its run and events (`invocation.py`, `report.py`), and the sensor and schedule that add
and request ranges. The public names are exported by `offset_assets.dagster_adapter`."""
