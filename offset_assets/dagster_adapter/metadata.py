"""Dagster metadata, both ways: what an incremental asset declares, and what a run did.

Declared (definition metadata): an incremental asset carries its transformation spec
(transform keys, output primary key and schema, join keys of reference inputs, batch
and commit options) under the key `offset_assets/incremental`. The IO manager, the
asset checks and the sensor read it from the asset definition, so a plain `@dg.asset`
becomes incremental by carrying it (`incremental_metadata(...)`) and the decorator is
only a shorthand. The spec is plain JSON (the schema as Spark's JSON string), so checks
and sensors read it without Spark.

Naming: an asset's versioned table, and its transformation id, are the asset key as a
Python identifier (`["sales", "orders"]` -> `sales__orders`). One rule, used
everywhere, so an input's table is always found from its upstream asset key. A
multi-asset (`incremental_multi_asset`) is one transformation with several outputs: each
output asset's spec names the shared transformation id (the multi-asset's name), and its
table is still its own key as an identifier.

Observed (materialization metadata): `run_metadata(result)` turns the engine's
`RunResult` into flat, typed entries (`rows_read.posts`, `offset_after.posts`, ...);
the Dagster UI plots the numeric ones across materializations (the Plots view of the
Metadata section on the asset's Overview).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, Literal

import dagster as dg

from offset_assets.engine.result import RunResult

SPEC_KEY = "offset_assets/incremental"
TABLE_KEY = "offset_assets/table"

FailedKeysPolicy = Literal["raise", "warn"]


def table_name_for(asset_key: dg.AssetKey) -> str:
    """The versioned table (and transformation id) of an asset."""
    return asset_key.to_python_identifier()


@dataclass(frozen=True)
class IncrementalSpec:
    """How an incremental asset is computed, as stored in its definition metadata.

    `inputs` maps the function's parameter names to upstream asset keys; when empty, the
    asset's own inputs (`AssetsDefinition.keys_by_input_name`) are used. `join_keys`
    maps a parameter name to `{primary_col: reference_col}` for reference inputs.
    `primary_key` and `schema_json` are this asset's table; `transformation_id` is set
    on the outputs of a multi-asset (None: the asset key as an identifier).
    """

    transform_keys: tuple[str, ...]
    primary_key: tuple[str, ...]
    schema_json: str
    join_keys: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    inputs: Mapping[str, dg.AssetKey] = field(default_factory=dict)
    batch_size: int | None = None
    commit_mode: Literal["end", "batch"] = "end"
    change_detection: Literal["v2", "v1"] = "v2"
    on_failed_keys: FailedKeysPolicy = "raise"
    transformation_id: str | None = None

    def __post_init__(self) -> None:
        if self.on_failed_keys not in ("raise", "warn"):
            raise ValueError(
                f"on_failed_keys must be 'raise' or 'warn', got {self.on_failed_keys!r}"
            )
        if not self.primary_key:
            raise ValueError("an incremental asset needs an output primary key")

    def to_metadata(self) -> dict[str, Any]:
        return {
            SPEC_KEY: {
                "transform_keys": list(self.transform_keys),
                "primary_key": list(self.primary_key),
                # A nested object, not JSON text, so the UI shows it unescaped.
                "schema": json.loads(self.schema_json),
                "join_keys": {name: dict(keys) for name, keys in self.join_keys.items()},
                "inputs": {name: key.path for name, key in self.inputs.items()},
                "batch_size": self.batch_size,
                "commit_mode": self.commit_mode,
                "change_detection": self.change_detection,
                "on_failed_keys": self.on_failed_keys,
                # Only on multi-asset outputs: a single asset's id is its key.
                **({"transformation_id": self.transformation_id} if self.transformation_id else {}),
            }
        }

    @classmethod
    def from_metadata(cls, metadata: Mapping[str, Any] | None) -> IncrementalSpec | None:
        """The spec in `metadata`, or None when the asset is not incremental."""
        raw = _raw((metadata or {}).get(SPEC_KEY))
        if raw is None:
            return None
        return cls(
            transform_keys=tuple(raw["transform_keys"]),
            primary_key=tuple(raw["primary_key"]),
            schema_json=schema_json(raw["schema"]),
            join_keys=raw.get("join_keys") or {},
            inputs={name: dg.AssetKey(path) for name, path in (raw.get("inputs") or {}).items()},
            batch_size=raw.get("batch_size"),
            commit_mode=raw.get("commit_mode", "end"),
            change_detection=raw.get("change_detection", "v2"),
            on_failed_keys=raw.get("on_failed_keys", "raise"),
            transformation_id=raw.get("transformation_id"),
        )


@dataclass(frozen=True)
class IncrementalInput:
    name: str  # the function's parameter
    asset_key: dg.AssetKey
    join_keys: Mapping[str, str] | None

    @property
    def table_name(self) -> str:
        return table_name_for(self.asset_key)


@dataclass(frozen=True)
class IncrementalOutput:
    """One output of a transformation: an asset and its versioned table."""

    name: str  # the Dagster output name: the key of the function's returned mapping
    asset_key: dg.AssetKey
    primary_key: tuple[str, ...]
    schema_json: str

    @property
    def table_name(self) -> str:
        return table_name_for(self.asset_key)


@dataclass(frozen=True)
class IncrementalAsset:
    """An incremental asset resolved against its definition: keys, tables and inputs.

    `outputs` are every asset its transformation commits together: the asset alone, or
    each output of a multi-asset (`asset_key` is then the one it was resolved for)."""

    asset_key: dg.AssetKey
    spec: IncrementalSpec
    inputs: tuple[IncrementalInput, ...]
    outputs: tuple[IncrementalOutput, ...]

    @property
    def transformation_id(self) -> str:
        return self.spec.transformation_id or table_name_for(self.asset_key)

    @property
    def table_name(self) -> str:
        return table_name_for(self.asset_key)

    @property
    def output_tables(self) -> list[str]:
        return [out.table_name for out in self.outputs]

    @property
    def input_tables(self) -> list[str]:
        return [inp.table_name for inp in self.inputs]

    def input_for_key(self, asset_key: dg.AssetKey) -> IncrementalInput | None:
        return next((inp for inp in self.inputs if inp.asset_key == asset_key), None)


@dataclass(frozen=True)
class TableSpecMetadata:
    """The versioned table of a plain (non-incremental) asset written by the IO manager."""

    primary_key: tuple[str, ...]
    schema_json: str

    @classmethod
    def from_metadata(cls, metadata: Mapping[str, Any] | None) -> TableSpecMetadata | None:
        raw = _raw((metadata or {}).get(TABLE_KEY))
        if raw is None:
            return None
        return cls(tuple(raw["primary_key"]), raw["schema"])


def table_metadata(*, primary_key: Sequence[str], schema: Any) -> dict[str, Any]:
    """Definition metadata declaring the versioned table a plain asset's DataFrame is
    written to (one delta per materialization). `schema` is a Spark `StructType`."""
    text = schema_json(schema)
    return {
        TABLE_KEY: {"primary_key": list(primary_key), "schema": text},
        "dagster/column_schema": column_schema(text),
    }


def incremental_metadata(
    *,
    transform_keys: Sequence[str],
    primary_key: Sequence[str],
    schema: Any,
    join_keys: Mapping[str, Mapping[str, str]] | None = None,
    change_detection: Literal["v2", "v1"] = "v2",
    on_failed_keys: FailedKeysPolicy = "raise",
) -> dict[str, Any]:
    """Definition metadata that makes a plain `@dg.asset` incremental through the
    `OffsetIOManager` (its inputs are the asset's own inputs). `schema` is a Spark
    `StructType` (or its JSON)."""
    spec = IncrementalSpec(
        transform_keys=tuple(transform_keys),
        primary_key=tuple(primary_key),
        schema_json=schema_json(schema),
        join_keys=dict(join_keys or {}),
        change_detection=change_detection,
        on_failed_keys=on_failed_keys,
    )
    return {**spec.to_metadata(), "dagster/column_schema": column_schema(spec.schema_json)}


def resolve_incremental(
    assets_def: dg.AssetsDefinition | None, asset_key: dg.AssetKey | None = None
) -> IncrementalAsset | None:
    """The incremental asset `asset_key` of `assets_def` (its first output by default:
    its only key, or a multi-asset's first), or None when it carries no spec."""
    if assets_def is None:
        return None
    key = asset_key or next(iter(assets_def.keys_by_output_name.values()))
    spec = IncrementalSpec.from_metadata(assets_def.metadata_by_key.get(key))
    if spec is None:
        return None
    by_name = dict(spec.inputs) or dict(assets_def.keys_by_input_name)
    unknown = set(spec.join_keys) - set(by_name)
    if unknown:
        raise dg.DagsterInvalidDefinitionError(
            f"incremental asset {key.to_user_string()}: join_keys name input(s) {sorted(unknown)} "
            f"that are not among its inputs {sorted(by_name)}"
        )
    inputs = tuple(
        IncrementalInput(name, upstream, spec.join_keys.get(name))
        for name, upstream in by_name.items()
    )
    return IncrementalAsset(key, spec, inputs, _outputs(assets_def, key, spec))


def _outputs(assets_def: dg.AssetsDefinition, key: dg.AssetKey,
             spec: IncrementalSpec) -> tuple[IncrementalOutput, ...]:
    """The assets of `assets_def` committed by the same transformation as `key`: itself,
    or every output of the multi-asset naming the same transformation id."""
    if spec.transformation_id is None:
        return (IncrementalOutput(assets_def.get_output_name_for_asset_key(key), key,
                                  spec.primary_key, spec.schema_json),)
    outputs = []
    for name, output_key in assets_def.keys_by_output_name.items():
        output = IncrementalSpec.from_metadata(assets_def.metadata_by_key.get(output_key))
        if output is not None and output.transformation_id == spec.transformation_id:
            outputs.append(IncrementalOutput(name, output_key, output.primary_key, output.schema_json))
    return tuple(outputs)


def schema_json(schema: Any) -> str:
    """A Spark schema as JSON text (accepts a StructType, its JSON text or its JSON object)."""
    if isinstance(schema, str):
        json.loads(schema)  # refuse anything that is not JSON now, not at run time
        return schema
    if isinstance(schema, Mapping):
        return json.dumps(schema)
    return schema.json()


def column_schema(schema_json_text: str) -> dg.TableSchema:
    """The Spark schema as a Dagster TableSchema (shown on the asset's page)."""
    fields = json.loads(schema_json_text)["fields"]
    return dg.TableSchema(
        columns=[
            dg.TableColumn(
                name=f["name"],
                type=f["type"] if isinstance(f["type"], str) else json.dumps(f["type"]),
                constraints=dg.TableColumnConstraints(nullable=bool(f.get("nullable", True))),
            )
            for f in fields
        ]
    )


def run_label(result: RunResult, reset_reason: str | None) -> str:
    """What kind of run it was, in the words of the UI: `incremental` (only what changed
    since the offsets), `reprocess` (every key, after an offset reset) or `changelist`."""
    if result.mode == "changelist":
        return "changelist"
    return "reprocess" if reset_reason is not None else "incremental"


def run_metadata(result: RunResult, output_tables: Sequence[str] = (),
                 reset_reason: str | None = None, row_count: int | None = None,
                 offset_lag_s: Mapping[str, float | None] | None = None,
                 ) -> dict[str, dg.MetadataValue]:
    """Materialization metadata of one engine run, every entry typed.

    Counts are on every run (zeros included), so the UI plots them across
    materializations. An entry without a value is left out, never shown as null or `{}`:
    no `offset_before.X` before an input's first offset (or after a reset), no
    `delta.X` when nothing was committed, `offsets_reset` only on a reset run that
    replaced offsets. Two clocks are named apart: `run_started_at`/`run_finished_at` are
    the run's wall clock; `inputs_committed_up_to` is the snapshot's commit clock (the
    keys' process_ts): the run read every input commit up to it, which on a quiet input
    is long before the run."""
    metadata: dict[str, dg.MetadataValue] = {
        "mode": dg.MetadataValue.text(run_label(result, reset_reason)),
        "change_detection": dg.MetadataValue.text(result.change_detection),
        "commit_mode": dg.MetadataValue.text(result.commit_mode),
        "changed_keys": dg.MetadataValue.int(result.changed_keys),
        "processed_keys": dg.MetadataValue.int(result.processed_keys),
        "failed_keys": dg.MetadataValue.int(result.failed_keys),
        "batches": dg.MetadataValue.int(result.batches),
        "batches_failed": dg.MetadataValue.int(result.batches_failed),
        "duration_s": dg.MetadataValue.float(round(result.duration_s, 3)),
    }
    if result.started_at is not None:
        metadata["run_started_at"] = dg.MetadataValue.timestamp(result.started_at)
    if result.finished_at is not None:
        metadata["run_finished_at"] = dg.MetadataValue.timestamp(result.finished_at)
    metadata["inputs_committed_up_to"] = dg.MetadataValue.timestamp(result.process_ts)
    metadata["engine_run_id"] = dg.MetadataValue.text(result.run_id)
    if row_count is not None:
        metadata["dagster/row_count"] = dg.MetadataValue.int(row_count)
    for name in sorted({*result.snapshot_deltas, *result.rows_read}):
        metadata[f"rows_read.{name}"] = dg.MetadataValue.int(result.rows_read.get(name, 0))
    for name in sorted({*output_tables, *result.rows_written, *result.rows_deleted}):
        metadata[f"rows_written.{name}"] = dg.MetadataValue.int(result.rows_written.get(name, 0))
        metadata[f"rows_deleted.{name}"] = dg.MetadataValue.int(result.rows_deleted.get(name, 0))
    for name in sorted({*result.snapshot_deltas, *result.offsets_before, *result.offsets_after}):
        if name in result.offsets_before:
            metadata[f"offset_before.{name}"] = dg.MetadataValue.timestamp(result.offsets_before[name])
        if name in result.offsets_after:
            metadata[f"offset_after.{name}"] = dg.MetadataValue.timestamp(result.offsets_after[name])
    for name, lag in sorted((offset_lag_s or {}).items()):
        if lag is not None:
            metadata[f"offset_lag_s.{name}"] = dg.MetadataValue.float(round(lag, 3))
    for name, delta in sorted(result.snapshot_deltas.items()):
        metadata[f"input_delta.{name}"] = dg.MetadataValue.int(delta)
    for name in sorted({*output_tables, *result.deltas}):
        deltas = result.deltas.get(name, [])
        if deltas:
            metadata[f"delta.{name}"] = dg.MetadataValue.int(max(deltas))
        metadata[f"deltas_committed.{name}"] = dg.MetadataValue.int(len(deltas))
    if reset_reason is not None:
        metadata["reset_reason"] = dg.MetadataValue.text(reset_reason)
        if result.offsets_reset:
            metadata["offsets_reset"] = dg.MetadataValue.json(
                {name: iso_utc(ts) for name, ts in sorted(result.offsets_reset.items())})
    if result.errors:
        metadata["errors"] = dg.MetadataValue.md(
            "\n".join(f"- `{error.splitlines()[0][:300]}`" for error in result.errors)
        )
    metadata["summary"] = dg.MetadataValue.md(run_summary(result, reset_reason))
    return metadata


def output_view(result: RunResult, table: str, output_tables: Sequence[str]) -> RunResult:
    """The run as the asset of output `table` reports it: the rows written and deleted
    and the deltas of its own table, none of its sibling outputs' (the meta delta stays:
    it is the transformation's)."""
    siblings = set(output_tables) - {table}
    if not siblings:
        return result

    def own(by_table: dict[str, Any]) -> dict[str, Any]:
        return {name: value for name, value in by_table.items() if name not in siblings}

    return replace(result, rows_written=own(result.rows_written),
                   rows_deleted=own(result.rows_deleted), deltas=own(result.deltas))


def run_summary(result: RunResult, reset_reason: str | None = None) -> str:
    """The run in a few Markdown lines a person reads: what was processed and why, which
    input commits it read, and how each input's offset moved (as UTC dates)."""
    label = run_label(result, reset_reason)
    lines = [
        f"**{label}** run of `{result.transformation_id}` ({result.change_detection}, "
        f"commit {result.commit_mode}): processed {result.processed_keys} of "
        f"{result.changed_keys} changed key(s) in {result.batches} batch(es), "
        f"{result.failed_keys} failed, in {result.duration_s:.1f} s.",
        f"Read the inputs as committed up to {iso_utc(result.process_ts)}.",
    ]
    if reset_reason is not None:
        lines.append(f"Offsets reset by {reset_reason}: {reset_offsets_text(result)}.")
    lines.append("")
    lines.append("| input | rows read | offset before | offset after |")
    lines.append("|---|---|---|---|")
    for name in sorted({*result.snapshot_deltas, *result.rows_read}):
        lines.append(f"| {name} | {result.rows_read.get(name, 0)} | "
                     f"{_offset_before_text(result, name)} | "
                     f"{_date(result.offsets_after.get(name))} |")
    written = ", ".join(f"{name} {result.rows_written.get(name, 0)} written, "
                        f"{result.rows_deleted.get(name, 0)} deleted"
                        for name in sorted({*result.rows_written, *result.rows_deleted}))
    if written:
        lines += ["", f"Output: {written}."]
    return "\n".join(lines)


def reset_offsets_text(result: RunResult) -> str:
    """The offsets a reset replaced, as `input (was date)`, for the summary and the log."""
    return ", ".join(f"{name} (was {iso_utc(ts)})"
                     for name, ts in sorted(result.offsets_reset.items())) or "none were set"


def iso_utc(epoch_seconds: float) -> str:
    """An epoch time as an ISO 8601 UTC date with microseconds (offsets are that precise)."""
    moment = datetime.fromtimestamp(epoch_seconds, tz=UTC)
    return moment.isoformat(timespec="microseconds").replace("+00:00", "Z")


def _date(value: float | None) -> str:
    return "none" if value is None else iso_utc(value)


def _offset_before_text(result: RunResult, name: str) -> str:
    if name in result.offsets_reset:
        return f"reset (was {iso_utc(result.offsets_reset[name])})"
    return _date(result.offsets_before.get(name))


def check_failed_keys(result: RunResult, policy: FailedKeysPolicy,
                      metadata: Mapping[str, dg.MetadataValue], log: Any) -> None:
    """Failed keys never pass silently: `raise` fails the step with `dg.Failure` (the
    run's metadata attached), `warn` logs a warning and lets the materialization stand.
    Either way the keys are recorded as failed in meta and retried by later runs."""
    if result.failed_keys == 0:
        return
    message = (
        f"{result.transformation_id}: {result.failed_keys} key(s) failed in "
        f"{result.batches_failed} batch(es); they are retried by the next run: "
        + "; ".join(error.splitlines()[0][:300] for error in result.errors)
    )
    if policy == "raise":
        raise dg.Failure(description=message, metadata=dict(metadata))
    log.warning(message)


def _raw(value: Any) -> Any:
    """Definition metadata comes back raw or wrapped in a MetadataValue, by code path."""
    return value.value if isinstance(value, dg.MetadataValue) else value
