"""`AssetJob`: the type of what `dg.define_asset_job` returns.

An asset job as defined, before `Definitions` resolves it against the asset graph.
Dagster does not export that class from its public namespace (it lives in a private
module), so the name is taken from the public function's own return annotation: the
adapter's annotations use public API only and follow the class wherever Dagster moves it.
"""

import inspect

import dagster as dg

AssetJob = inspect.signature(dg.define_asset_job).return_annotation
