"""`incremental_asset`: a plain function of Spark DataFrames as an incremental Dagster asset.

    @incremental_asset(transform_keys=["post_id"], primary_key=["post_id"], schema=ENRICHED,
                       join_keys={"profiles": {"user_id": "id"}})
    def enriched_posts(posts: DataFrame, profiles: DataFrame) -> DataFrame:
        return posts.join(...)

Each parameter is an upstream asset (its name, or `ins={"posts": "raw/posts"}`), read as
a versioned table; the asset's own table is its key as a Python identifier.

`incremental_multi_asset` is the same for a function returning several outputs (a
DataFrame per output name): one transformation committing them together, each output
its own asset and table.

Design: the generated asset runs the engine in its body. The upstream assets are
`deps` (ordering and lineage only, nothing loaded by an IO manager) and the body starts
one `IncrementalInvocation` (`invocation.py`) made by its typed resource
`incremental_engine: IncrementalEngineResource` and streams its events; the engine
calls the user's function once per batch. Why not the IO manager's load_input/handle_output here: Dagster calls an
asset body exactly once, so per-batch commit, batch sizes, failed-batch recording and
explicit key lists, which all need the function called per batch, cannot be expressed
through it. The IO manager path stays for hand-written `@dg.asset`s (single batch,
commit at the end; see `io_manager.py`), and both paths share one configuration: the
`OffsetIOManager` under the asset's `io_manager_key`, which serves the table to
downstream consumers (their inputs load its actual state), is built on the same
`IncrementalEngineResource`.

Run controls, all visible in the Dagster UI:
- run config (`IncrementalRunConfig`) `{"changelist": [{"post_id": 1}]}`: process exactly
  those keys; offsets untouched;
- run config `{"change_detection": "v1"}`: compute the changed index by full comparison;
- tag `dagster/backfill` (every backfill run) or `offset_assets/reset`: reset the offsets
  and reprocess every key (see `backfill.py`);
- a reprocess request made outside Dagster (`offset-assets reprocess`): the next regular
  run reprocesses every key and is reported as a `reprocess` naming the request.
Every materialization carries the run's metadata (`run_report.run_metadata`); failed keys
fail the step (`on_failed_keys="raise"`, default) or log a warning (`"warn"`; `OnFailedKeys`).
"""

# No `from __future__ import annotations`: Dagster inspects the decorated functions'
# annotations (the context type) at definition time, so they must not be strings.

import inspect
from collections.abc import Callable, Iterator, Mapping, Sequence, Set
from dataclasses import dataclass
from typing import Any

import dagster as dg
from pydantic import Field
from pyspark.sql import DataFrame

from offset_assets.dagster_adapter.asset_spec import (
    IncrementalAsset,
    IncrementalSpec,
    resolve_incremental,
    schema_json,
    spec_metadata,
)
from offset_assets.dagster_adapter.engine_resource import IncrementalEngineResource
from offset_assets.dagster_adapter.incremental.invocation import IncrementalInvocation
from offset_assets.dagster_adapter.offset_store import OffsetStore
from offset_assets.engine.transformation import TransformFunction
from offset_assets.engine.vocabulary import (
    ChangeDetection,
    ChangeDetectionLike,
    CommitMode,
    CommitModeLike,
    OnFailedKeys,
    OnFailedKeysLike,
)


class IncrementalRunConfig(dg.Config):
    """Run config of an incremental asset (the launchpad shows these fields)."""

    # Not named `keys`: a pydantic model with a field `keys` cannot be turned into a dict.
    changelist: list[dict[str, Any]] | None = Field(
        default=None,
        description="Process exactly these transform-key values, e.g. [{post_id: 7}] "
        "(run_changelist); offsets are not touched.",
    )
    # The engine's type (`engine/vocabulary.py`), re-exported by the adapter; the
    # launchpad offers v2 and v1.
    change_detection: ChangeDetection | None = Field(
        default=None,
        description="v2 (by offsets; the asset's default) or v1 (full comparison, to verify).",
    )


_RESERVED = {"ins", "config_schema", "required_resource_keys", "io_manager_key",
             "metadata", "name", "key_prefix"}


@dataclass(frozen=True)
class IncrementalOut:
    """One output of `incremental_multi_asset`: its table's primary key and Spark schema,
    and optionally its asset key (default: the output name), description and metadata."""

    primary_key: Sequence[str]
    schema: Any
    key: str | Sequence[str] | dg.AssetKey | None = None
    description: str | None = None
    metadata: Mapping[str, Any] | None = None


def incremental_asset(
    *,
    transform_keys: Sequence[str],
    primary_key: Sequence[str],
    schema: Any,
    ins: Mapping[str, str | Sequence[str] | dg.AssetKey] | None = None,
    join_keys: Mapping[str, Mapping[str, str]] | None = None,
    batch_size: int | None = None,
    commit_mode: CommitModeLike = CommitMode.end,
    change_detection: ChangeDetectionLike = ChangeDetection.v2,
    on_failed_keys: OnFailedKeysLike = OnFailedKeys.RAISE,
    name: str | None = None,
    key_prefix: str | Sequence[str] | None = None,
    metadata: Mapping[str, Any] | None = None,
    io_manager_key: str = "io_manager",
    deps: Sequence[dg.AssetKey | str | dg.AssetsDefinition] = (),
    **asset_kwargs: Any,
) -> Callable[[Callable[..., DataFrame]], dg.AssetsDefinition]:
    """Declare an incremental asset computed by a function of Spark DataFrames.

    transform_keys: columns identifying what is recomputed together (every input
        without join_keys and the output carry them).
    primary_key, schema: the output table's primary key and Spark StructType.
    ins: parameter name -> upstream asset key, when they differ (default: the name).
    join_keys: parameter name -> {primary_col: reference_col} for reference inputs.
    batch_size, commit_mode ("end" | "batch"), change_detection ("v2" | "v1"): engine
        options; on_failed_keys: "raise" (fail the step) or "warn" (`OnFailedKeys`).
    io_manager_key: the `OffsetIOManager` serving the asset's table to downstream assets.
    deps: more upstream assets, for lineage and automation only: an asset that writes
        into an input's table under another name (the reference project's
        `post_updates` writes `posts`).
    The body runs the engine of the `IncrementalEngineResource` under the resource key
    `incremental_engine`; the asset also needs the `OffsetStore` under `offset_store`,
    which its checks and sensors read.
    Other keyword arguments (group_name, description, owners, tags, retry_policy,
    automation_condition, ...) go to `dg.asset`.
    """
    _refuse_reserved("incremental_asset", asset_kwargs)
    kinds = asset_kwargs.pop("kinds", {"spark"})
    description = asset_kwargs.pop("description", None)

    def decorate(fn: Callable[..., DataFrame]) -> dg.AssetsDefinition:
        spec = IncrementalSpec(
            transform_keys=tuple(transform_keys), primary_key=tuple(primary_key),
            schema_json=schema_json(schema), inputs=_upstream(fn, ins, join_keys),
            join_keys={p: dict(keys) for p, keys in (join_keys or {}).items()},
            batch_size=batch_size, commit_mode=commit_mode, change_detection=change_detection,
            on_failed_keys=on_failed_keys, asset=name or fn.__name__,
        )
        return dg.asset(
            name=name or fn.__name__,
            key_prefix=key_prefix,
            deps=[*spec.inputs.values(), *deps],
            metadata={**spec_metadata(spec), **(metadata or {})},
            io_manager_key=io_manager_key,
            # A run that commits no output delta yields no materialization (see
            # `_engine_body`): downstream steps of the run are skipped.
            output_required=False,
            kinds=kinds,
            description=description or inspect.getdoc(fn),
            **asset_kwargs,
        )(_engine_body(fn))

    return decorate


def incremental_multi_asset(
    *,
    outs: Mapping[str, IncrementalOut],
    transform_keys: Sequence[str],
    ins: Mapping[str, str | Sequence[str] | dg.AssetKey] | None = None,
    join_keys: Mapping[str, Mapping[str, str]] | None = None,
    batch_size: int | None = None,
    commit_mode: CommitModeLike = CommitMode.end,
    change_detection: ChangeDetectionLike = ChangeDetection.v2,
    on_failed_keys: OnFailedKeysLike = OnFailedKeys.RAISE,
    name: str | None = None,
    io_manager_key: str = "io_manager",
    deps: Sequence[dg.AssetKey | str | dg.AssetsDefinition] = (),
    automation_condition: dg.AutomationCondition | None = None,
    **multi_asset_kwargs: Any,
) -> Callable[[Callable[..., Mapping[str, DataFrame]]], dg.AssetsDefinition]:
    """Declare one incremental transformation with several outputs, each an asset.

        @incremental_multi_asset(outs={"accepted_posts": IncrementalOut(["post_id"], POSTS),
                                       "rejected_posts": IncrementalOut(["post_id"], POSTS)},
                                 transform_keys=["post_id"])
        def moderated_posts(posts: DataFrame) -> dict[str, DataFrame]:
            return {"accepted_posts": ..., "rejected_posts": ...}

    The function returns a DataFrame per output name. It is one transformation (id:
    `name`, default the function's name): one lease, one meta table, one set of offsets,
    and every output's delta committed in the same control-plane transaction as the
    meta and offsets. Each output is a versioned table named after its asset key, and
    is materialized on its own: with its rows written and deleted, its delta and its
    row count, only when the run committed a version of it (explicit requests: always);
    otherwise its metadata is an observation. The outputs cannot be subset: a run
    computes and commits them all. `automation_condition` applies to every output.
    The other parameters are `incremental_asset`'s; remaining keyword arguments
    (group_name, description, tags, retry_policy, ...) go to `dg.multi_asset`.
    """
    _refuse_reserved("incremental_multi_asset", multi_asset_kwargs, {"can_subset", "specs"})
    if not outs:
        raise dg.DagsterInvalidDefinitionError("incremental_multi_asset needs at least one output")
    kinds = multi_asset_kwargs.pop("kinds", {"spark"})

    def decorate(fn: Callable[..., Mapping[str, DataFrame]]) -> dg.AssetsDefinition:
        transformation_id = name or fn.__name__
        upstream = _upstream(fn, ins, join_keys)
        asset_outs = {}
        for output_name, out in outs.items():
            # The outputs' specs differ only in their table; each names the shared id.
            spec = IncrementalSpec(
                transform_keys=tuple(transform_keys), primary_key=tuple(out.primary_key),
                schema_json=schema_json(out.schema), inputs=upstream,
                join_keys={p: dict(keys) for p, keys in (join_keys or {}).items()},
                batch_size=batch_size, commit_mode=commit_mode, change_detection=change_detection,
                on_failed_keys=on_failed_keys, transformation_id=transformation_id,
                asset=dg.AssetKey.from_coercible(out.key or output_name).to_user_string(),
            )
            asset_outs[output_name] = dg.AssetOut(
                key=out.key,
                description=out.description,
                metadata={**spec_metadata(spec), **(out.metadata or {})},
                io_manager_key=io_manager_key,
                # See incremental_asset: an output without a committed version yields nothing.
                is_required=False,
                automation_condition=automation_condition,
                kinds=kinds,
            )
        return dg.multi_asset(
            name=transformation_id,
            outs=asset_outs,
            deps=[*upstream.values(), *deps],
            can_subset=False,
            description=multi_asset_kwargs.pop("description", None) or inspect.getdoc(fn),
            **multi_asset_kwargs,
        )(_engine_body(fn))

    return decorate


def _refuse_reserved(decorator: str, kwargs: Mapping[str, Any], more: Set[str] = frozenset()) -> None:
    clash = (_RESERVED | more) & set(kwargs)
    if clash:
        raise dg.DagsterInvalidDefinitionError(
            f"{decorator} sets {sorted(clash)} itself; use its own parameters instead"
        )


def _upstream(fn: Callable[..., Any], ins: Mapping[str, str | Sequence[str] | dg.AssetKey] | None,
              join_keys: Mapping[str, Mapping[str, str]] | None) -> dict[str, dg.AssetKey]:
    """The function's parameters -> their upstream asset keys."""
    params = _parameters(fn)
    unknown = (set(ins or {}) | set(join_keys or {})) - set(params)
    if unknown:
        raise dg.DagsterInvalidDefinitionError(
            f"incremental asset {fn.__name__!r}: ins/join_keys name {sorted(unknown)}, "
            f"which are not parameters of the function {params}"
        )
    return {p: dg.AssetKey.from_coercible((ins or {}).get(p, p)) for p in params}


def _engine_body(fn: Callable[..., Any]) -> Callable[..., Iterator[dg.MaterializeResult]]:
    """The asset body both decorators share: one invocation of the engine, its events.

    A materialization is what wakes downstream automation and the downstream steps of
    the run, so a regular run yields one per output that committed a version; otherwise
    (nothing to do, or every processed key left that output as it was) the output's
    metadata is an observation. Explicit requests (a reset, a key list, a reprocess
    request) materialize every output (`invocation.py`, `run_report.py`)."""

    # `offset_store` is not used here: the asset's checks, sensors and the command line read
    # the control plane through it, so asking for it refuses definitions without it when
    # they load (`Definitions.validate_loadable`), not at a sensor's first tick.
    def _incremental(context: dg.AssetExecutionContext, config: IncrementalRunConfig,
                     incremental_engine: IncrementalEngineResource,
                     offset_store: OffsetStore) -> Iterator[dg.MaterializeResult]:
        asset = resolve_incremental(context.assets_def)
        runner = incremental_engine.transformation_runner(asset, _by_parameter(asset, fn), context.run.run_id)
        invocation = IncrementalInvocation.start(context, asset, incremental_engine.control_plane(), runner,
                                                 config.changelist, config.change_detection)
        yield from invocation.stream()

    return _incremental


def _parameters(fn: Callable[..., Any]) -> list[str]:
    params = inspect.signature(fn).parameters.values()
    bad = [p.name for p in params if p.kind not in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    if bad or not params:
        raise dg.DagsterInvalidDefinitionError(
            f"incremental asset {fn.__name__!r} must take one named parameter per input "
            f"DataFrame (got {bad or 'none'})"
        )
    return [p.name for p in params]


def _by_parameter(asset: IncrementalAsset, fn: Callable[..., Any]) -> TransformFunction:
    """The engine passes frames by table name and takes outputs by table name; the
    function takes its inputs by parameter and returns its outputs by output name."""
    tables = {inp.name: inp.table_name for inp in asset.inputs}
    outputs = {out.name: out.table_name for out in asset.outputs}

    def call(**frames: DataFrame) -> DataFrame | Mapping[str, DataFrame]:
        produced = fn(**{param: frames[table] for param, table in tables.items()})
        if not isinstance(produced, Mapping):
            return produced  # a single output's DataFrame (the engine checks the rest)
        if set(produced) != set(outputs):
            raise TypeError(
                f"{asset.transformation_id}: the function must return a DataFrame for each "
                f"output {sorted(outputs)}, got {sorted(produced)}"
            )
        return {outputs[name]: frame for name, frame in produced.items()}

    return call
