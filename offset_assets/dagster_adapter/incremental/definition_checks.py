"""Mistakes in how incremental assets fit together, refused before any Spark session.

An incremental asset alone is checked when it is declared (`asset_spec.py`: its own
keys against its own schema). What it says about its inputs can only be checked against
the other assets of the code location: that each input (a function parameter, or its
`ins=` entry) names an asset, that the transform keys are columns of every input without
`join_keys`, and that each `join_keys` pair names a column of the reference input and of
a primary input. `validate_definitions(defs)` checks every incremental asset of a
`Definitions` when the module defining it loads (`dagster dev`, `dg check defs`, a
test's import) and refuses the mistakes, one line each:

    defs = validate_definitions(dg.Definitions(assets=[...], resources=...))

An input's columns are known when its asset declares them: an incremental asset, an
ingestion asset, a plain asset with `table_metadata`, or any asset (an `AssetSpec` of a
table written outside Dagster) carrying `dagster/column_schema`. An input whose columns
are not declared is checked for its name only; its columns are checked when a run builds
the transformation.

The resources are checked too: every key an asset, an asset check, a sensor or a
schedule needs must be among the definitions' resources. Dagster's own
`Definitions.validate_loadable` checks the assets' and checks' (every incremental and
ingestion asset needs `offset_store` as well as `incremental_engine`, so a project
without the control plane its checks, sensors and command line read is refused there
too), but a sensor's or a schedule's only at its first tick, in the daemon.

A run checks its own asset again at its start, still before any Spark session
(`run_start_problems`), so definitions built without `validate_definitions` get the same
words there, and an input that names neither an asset nor a table in the delta catalog
is said to be a name that matches nothing, not a table to materialize first.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import dagster as dg

from offset_assets.control_plane.delta_catalog import DeltaCatalog
from offset_assets.dagster_adapter.asset_spec import (
    COLUMN_SCHEMA_KEY,
    IncrementalAsset,
    IncrementalInput,
    resolve_incremental,
)

# Asset key -> the names of its table's columns, or None when it declares none.
DeclaredColumns = Mapping[dg.AssetKey, Sequence[str] | None]

# What Dagster provides when the definitions do not: a pickling IO manager.
_DAGSTER_DEFAULT_RESOURCES = frozenset({"io_manager"})
_RESOURCE_HINTS = {
    "offset_store": "; pass the engine's control plane: resources={'offset_store': engine.offset_store, ...}",
    "incremental_engine": "; pass resources={'incremental_engine': IncrementalEngineResource(offset_store=..., "
                          "spark=...), ...}",
}


def validate_definitions(defs: dg.Definitions) -> dg.Definitions:
    """Refuse `defs` when an incremental asset names an input that is no asset of it, or
    a transform key or join key that is not a column of its input, or when a resource
    something needs is missing: one line per mistake (`dg.DagsterInvalidDefinitionError`).
    Returns `defs` unchanged otherwise. No Spark, no control plane: only what the
    definitions declare."""
    problems = [*definitions_problems(defs.assets or []), *resource_problems(defs)]
    if problems:
        raise dg.DagsterInvalidDefinitionError("\n".join(problems))
    return defs


def definitions_problems(assets: Iterable[Any]) -> list[str]:
    """The mistakes of every incremental asset among `assets` (what `Definitions` takes:
    assets definitions, asset specs, source assets), one line each."""
    assets = list(assets)
    declared = declared_columns(assets)
    problems = []
    for assets_def in assets:
        if not isinstance(assets_def, dg.AssetsDefinition):
            continue
        seen = set()
        for key in assets_def.keys:
            asset = resolve_incremental(assets_def, key)
            if asset is not None and asset.transformation_id not in seen:
                seen.add(asset.transformation_id)  # a multi-asset's outputs share their inputs
                problems += asset_problems(asset, declared)
    return problems


def resource_problems(defs: dg.Definitions) -> list[str]:
    """The resource keys something in `defs` needs and `defs` does not provide, one line
    per key naming what needs it (Dagster provides `io_manager` itself)."""
    provided = {*(defs.resources or {}), *_DAGSTER_DEFAULT_RESOURCES}
    needed: dict[str, list[str]] = {}
    for what, needs in _resource_needs(defs):
        for key in sorted(needs - provided):
            needed.setdefault(key, []).append(what)
    problems = []
    for key, needers in needed.items():
        named = [*needers[:3], f"{len(needers) - 3} more"] if len(needers) > 4 else needers
        shown = " and ".join([", ".join(named[:-1]), named[-1]]) if len(named) > 1 else named[0]
        problems.append(f"resource {key!r} is needed by {shown}; these definitions provide none "
                        f"(they provide {sorted(defs.resources or {})}){_RESOURCE_HINTS.get(key, '')}")
    return problems


def _resource_needs(defs: dg.Definitions) -> Iterable[tuple[str, set[str]]]:
    """(what, the resource keys it needs) for every asset, check, sensor and schedule."""
    for item in defs.assets or []:
        if isinstance(item, dg.AssetsDefinition) and item.is_executable:
            keys = ", ".join(repr(key.to_user_string()) for key in item.keys)
            yield f"asset {keys}" if len(item.keys) == 1 else f"assets {keys}", set(item.required_resource_keys)
    for check in defs.asset_checks or []:
        names = ", ".join(repr(key.to_user_string()) for key in check.check_keys)
        yield f"asset check {names}", set(check.required_resource_keys)
    for sensor in defs.sensors or []:
        yield f"sensor {sensor.name!r}", set(getattr(sensor, "required_resource_keys", set()))
    for schedule in defs.schedules or []:
        yield f"schedule {schedule.name!r}", set(getattr(schedule, "required_resource_keys", set()))


def declared_columns(assets: Iterable[Any]) -> dict[dg.AssetKey, Sequence[str] | None]:
    """Every asset key `assets` declare, with its columns where its metadata says them."""
    declared: dict[dg.AssetKey, Sequence[str] | None] = {}
    for item in assets:
        if isinstance(item, dg.AssetsDefinition):
            for key in item.keys:
                declared[key] = _columns(item.metadata_by_key.get(key))
        elif isinstance(item, dg.AssetSpec | dg.SourceAsset):
            declared[item.key] = _columns(item.metadata)
    return declared


def asset_problems(asset: IncrementalAsset, declared: DeclaredColumns) -> list[str]:
    """What `asset` says of its inputs that `declared` contradicts, one line each."""
    named = f"incremental asset {asset.asset_key.to_user_string()!r}"
    problems = []
    for inp in asset.inputs:
        if inp.asset_key not in declared:
            problems.append(f"{named}: {_input_text(inp)} names no asset of these definitions"
                            f"{_did_you_mean(inp.asset_key, declared)}; declare a table written outside "
                            f"Dagster as dg.AssetSpec({inp.asset_key.to_user_string()!r})")
    primary = [inp for inp in asset.inputs if not inp.join_keys]
    for inp in primary:
        columns = declared.get(inp.asset_key)
        missing = [k for k in asset.spec.transform_keys if columns is not None and k not in columns]
        if missing:
            problems.append(f"{named}: transform key(s) {missing} not among the columns of "
                            f"{_input_text(inp)}: {list(columns)}")
    primary_columns = [declared.get(inp.asset_key) for inp in primary]
    for inp in asset.inputs:
        for primary_col, reference_col in (inp.join_keys or {}).items():
            columns = declared.get(inp.asset_key)
            if columns is not None and reference_col not in columns:
                problems.append(f"{named}: join_keys of {inp.name!r} name column {reference_col!r}, "
                                f"not among the columns of {_input_text(inp)}: {list(columns)}")
            if primary_columns and None not in primary_columns and not any(
                    primary_col in columns for columns in primary_columns):
                problems.append(f"{named}: join_keys of {inp.name!r} name column {primary_col!r}, "
                                f"which no input without join_keys has "
                                f"({', '.join(_input_text(p) for p in primary)})")
    return problems


def run_start_problems(context: dg.AssetExecutionContext, catalog: DeltaCatalog,
                       asset: IncrementalAsset) -> list[str]:
    """`asset_problems` against the run's asset graph, and the inputs whose table is not
    in the delta catalog: materialize the asset first, or, when no asset of the code
    location materializes that key, a name that matches nothing (or a table written
    outside Dagster that is not there yet)."""
    graph = context.job_def.asset_layer.asset_graph
    # A job's graph makes the assets it does not run unexecutable: the code location's
    # own graph says which assets exist to be materialized.
    graph = getattr(graph, "source_asset_graph", graph)
    # Every key of the graph, the stubs Dagster adds for keys no asset declares included:
    # a table written outside Dagster needs no asset, so the catalog decides below.
    declared = {key: _columns(graph.get(key).assets_def.metadata_by_key.get(key))
                for key in graph.get_all_asset_keys()}
    problems = asset_problems(asset, declared)
    named = f"incremental asset {asset.asset_key.to_user_string()!r}"
    executable = set(graph.executable_asset_keys)
    for inp in asset.inputs:
        if catalog.table_spec(inp.table_name) is not None:
            continue
        if inp.asset_key in executable:
            problems.append(f"{named}: {_input_text(inp)} has no versioned table {inp.table_name!r} in the "
                            f"delta catalog yet: materialize {inp.asset_key.to_user_string()} first")
        else:
            problems.append(f"{named}: {_input_text(inp)} names {inp.asset_key.to_user_string()!r}, which no "
                            f"asset of this code location materializes{_did_you_mean(inp.asset_key, executable)}, "
                            f"and the delta catalog has no table {inp.table_name!r}")
    return problems


def _input_text(inp: IncrementalInput) -> str:
    key = inp.asset_key.to_user_string()
    return f"input {inp.name!r}" if key == inp.name else f"input {inp.name!r} (asset {key})"


def _did_you_mean(key: dg.AssetKey, declared: Iterable[dg.AssetKey]) -> str:
    names = {other.to_user_string(): other for other in declared}
    close = difflib.get_close_matches(key.to_user_string(), list(names), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _columns(metadata: Mapping[str, Any] | None) -> list[str] | None:
    value = (metadata or {}).get(COLUMN_SCHEMA_KEY)
    if isinstance(value, dg.TableSchemaMetadataValue):
        value = value.schema
    if not isinstance(value, dg.TableSchema):
        return None
    return [column.name for column in value.columns]
