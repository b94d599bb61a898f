"""`incremental_asset`: a plain function of Spark DataFrames as an incremental Dagster asset.

    @incremental_asset(transform_keys=["post_id"], primary_key=["post_id"], schema=ENRICHED,
                       join_keys={"profiles": {"user_id": "id"}})
    def enriched_posts(posts: DataFrame, profiles: DataFrame) -> DataFrame:
        return posts.join(...)

Each parameter is an upstream asset (its name, or `ins={"posts": "raw/posts"}`), read as
a versioned table; the asset's own table is its key as a Python identifier.

Design: the generated asset runs the engine in its body. The upstream assets are
`deps` (ordering and lineage only, nothing loaded by an IO manager) and the body calls
`IncrementalEngine.run_full` (or `run_changelist`), which calls the user's function once
per batch. Why not the IO manager's load_input/handle_output here: Dagster calls an
asset body exactly once, so per-batch commit, batch sizes, failed-batch recording and
explicit key lists, which all need the function called per batch, cannot be expressed
through it. The IO manager path stays for hand-written `@dg.asset`s (single batch,
commit at the end; see `io_manager.py`), and both paths share one configuration: the
body takes its Spark session, control plane and warehouse from the `OffsetIOManager`
under the asset's `io_manager_key`, which also serves the table to downstream consumers
(their inputs load its actual state).

Run controls, all visible in the Dagster UI:
- run config `{"keys": [{"post_id": 1}]}`: process exactly those keys; offsets untouched;
- run config `{"change_detection": "v1"}`: compute the changed index by full comparison;
- tag `dagster/backfill` (every backfill run) or `offset_assets/reset`: reset the offsets
  and reprocess every key (see `backfill.py`).
Every materialization carries the run's metadata (`metadata.run_metadata`); failed keys
fail the step (`on_failed_keys="raise"`, default) or log a warning (`"warn"`).
"""

# No `from __future__ import annotations`: Dagster inspects the decorated functions'
# annotations (the context type) at definition time, so they must not be strings.

import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

import dagster as dg
from pyspark.sql import DataFrame

from offset_assets.dagster_adapter.backfill import is_reset_run, reset_reason
from offset_assets.dagster_adapter.io_manager import OffsetIOManager, report_run
from offset_assets.dagster_adapter.metadata import (
    FailedKeysPolicy,
    IncrementalAsset,
    IncrementalSpec,
    column_schema,
    resolve_incremental,
    schema_json,
)
from offset_assets.engine.result import RunResult

RUN_CONFIG_SCHEMA = {
    "keys": dg.Field(
        [dg.Permissive()],
        is_required=False,
        description="Process exactly these transform-key values (run_changelist); "
        "offsets are not touched.",
    ),
    "change_detection": dg.Field(
        dg.Enum("ChangeDetection", [dg.EnumValue("v2"), dg.EnumValue("v1")]),
        is_required=False,
        description="v2 (offsets, default of the asset) or v1 (full comparison).",
    ),
}

_RESERVED = {"deps", "ins", "config_schema", "required_resource_keys", "io_manager_key",
             "metadata", "name", "key_prefix"}


def incremental_asset(
    *,
    transform_keys: Sequence[str],
    primary_key: Sequence[str],
    schema: Any,
    ins: Mapping[str, str | Sequence[str] | dg.AssetKey] | None = None,
    join_keys: Mapping[str, Mapping[str, str]] | None = None,
    batch_size: int | None = None,
    commit_mode: Literal["end", "batch"] = "end",
    change_detection: Literal["v2", "v1"] = "v2",
    on_failed_keys: FailedKeysPolicy = "raise",
    name: str | None = None,
    key_prefix: str | Sequence[str] | None = None,
    metadata: Mapping[str, Any] | None = None,
    io_manager_key: str = "io_manager",
    **asset_kwargs: Any,
) -> Callable[[Callable[..., DataFrame]], dg.AssetsDefinition]:
    """Declare an incremental asset computed by a function of Spark DataFrames.

    transform_keys: columns identifying what is recomputed together (every input
        without join_keys and the output carry them).
    primary_key, schema: the output table's primary key and Spark StructType.
    ins: parameter name -> upstream asset key, when they differ (default: the name).
    join_keys: parameter name -> {primary_col: reference_col} for reference inputs.
    batch_size, commit_mode ("end" | "batch"), change_detection ("v2" | "v1"): engine
        options; on_failed_keys: "raise" (fail the step) or "warn".
    io_manager_key: the `OffsetIOManager` the asset runs with and is read through.
    Other keyword arguments (group_name, description, owners, tags, retry_policy,
    automation_condition, ...) go to `dg.asset`.
    """
    clash = _RESERVED & set(asset_kwargs)
    if clash:
        raise dg.DagsterInvalidDefinitionError(
            f"incremental_asset sets {sorted(clash)} itself; use its own parameters instead"
        )
    kinds = asset_kwargs.pop("kinds", {"spark"})
    description = asset_kwargs.pop("description", None)

    def decorate(fn: Callable[..., DataFrame]) -> dg.AssetsDefinition:
        params = _parameters(fn)
        unknown = (set(ins or {}) | set(join_keys or {})) - set(params)
        if unknown:
            raise dg.DagsterInvalidDefinitionError(
                f"incremental asset {fn.__name__!r}: ins/join_keys name {sorted(unknown)}, "
                f"which are not parameters of the function {params}"
            )
        upstream = {p: dg.AssetKey.from_coercible((ins or {}).get(p, p)) for p in params}
        spec = IncrementalSpec(
            transform_keys=tuple(transform_keys),
            primary_key=tuple(primary_key),
            schema_json=schema_json(schema),
            join_keys={p: dict(keys) for p, keys in (join_keys or {}).items()},
            inputs=upstream,
            batch_size=batch_size,
            commit_mode=commit_mode,
            change_detection=change_detection,
            on_failed_keys=on_failed_keys,
        )

        @dg.asset(
            name=name or fn.__name__,
            key_prefix=key_prefix,
            deps=list(upstream.values()),
            metadata={
                **spec.to_metadata(),
                "dagster/column_schema": column_schema(spec.schema_json),
                **(metadata or {}),
            },
            config_schema=RUN_CONFIG_SCHEMA,
            required_resource_keys={io_manager_key},
            io_manager_key=io_manager_key,
            kinds=kinds,
            description=description or inspect.getdoc(fn),
            **asset_kwargs,
        )
        def _incremental(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
            io_manager = getattr(context.resources, io_manager_key)
            asset = resolve_incremental(context.assets_def, context.asset_key)
            return materialize_incremental(context, io_manager, asset, fn)

        return _incremental

    return decorate


def materialize_incremental(context: dg.AssetExecutionContext, io_manager: OffsetIOManager,
                            asset: IncrementalAsset,
                            fn: Callable[..., DataFrame]) -> dg.MaterializeResult:
    """Run the engine for `asset` as the Dagster run asks: changelist, reset or regular."""
    config = context.op_execution_context.op_config or {}
    tags = context.run.tags
    reset = reset_reason(tags) if is_reset_run(tags) else None
    keys = config.get("keys")
    if keys is not None and reset is not None:
        raise dg.Failure(
            f"{asset.asset_key.to_user_string()}: a run cannot both reset the offsets "
            f"({reset}) and process an explicit key list"
        )
    engine = io_manager.engine()
    transformation = io_manager.transformation(asset, _by_parameter(asset, fn))
    result: RunResult
    if keys is not None:
        result = engine.run_changelist(transformation, keys, run_id=context.run_id)
    else:
        result = engine.run_full(transformation, run_id=context.run_id,
                                 change_detection=config.get("change_detection"),
                                 reprocess_all=reset is not None)
    return dg.MaterializeResult(metadata=report_run(context, asset, result, reset))


def _parameters(fn: Callable[..., DataFrame]) -> list[str]:
    params = inspect.signature(fn).parameters.values()
    bad = [p.name for p in params if p.kind not in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    if bad or not params:
        raise dg.DagsterInvalidDefinitionError(
            f"incremental asset {fn.__name__!r} must take one named parameter per input "
            f"DataFrame (got {bad or 'none'})"
        )
    return [p.name for p in params]


def _by_parameter(asset: IncrementalAsset,
                  fn: Callable[..., DataFrame]) -> Callable[..., DataFrame]:
    """The engine passes frames by table name; the function takes them by parameter."""
    tables = {inp.name: inp.table_name for inp in asset.inputs}

    def call(**frames: DataFrame) -> DataFrame:
        return fn(**{param: frames[table] for param, table in tables.items()})

    return call
