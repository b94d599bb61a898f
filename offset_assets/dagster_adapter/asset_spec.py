"""What an asset declares before any run: the incremental spec, the table of a plain
asset, column schema and naming, as Dagster definition metadata.

An incremental asset carries its transformation spec (transform keys, output primary
key and schema, join keys of reference inputs, batch and commit options) under the key
`offset_assets/incremental`. The IO manager, the asset checks and the sensor read it
from the asset definition, so a plain `@dg.asset` becomes incremental by carrying it
(`incremental_metadata(...)`) and the decorator is only a shorthand. The spec is plain
JSON (the schema as Spark's JSON string), so checks and sensors read it without Spark.
A plain asset written by the IO manager declares its table with `table_metadata(...)`.

Naming: an asset's versioned table, and its transformation id, are the asset key as a
Python identifier (`["sales", "orders"]` -> `sales__orders`). One rule, used
everywhere, so an input's table is always found from its upstream asset key. A
multi-asset (`incremental_multi_asset`) is one transformation with several outputs: each
output asset's spec names the shared transformation id (the multi-asset's name), and its
table is still its own key as an identifier.

Mistakes that need no Spark are refused when the spec is built (the module defining
the asset loads), not ~45 s later when a run's Spark session has started
(`IncrementalSpec.definition_problems`).

What a run did (materialization metadata, summary, events) is `run_report.py`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import dagster as dg

from offset_assets.engine.transformation import narrow_primary_key
from offset_assets.engine.vocabulary import (
    ChangeDetection,
    ChangeDetectionLike,
    CommitMode,
    CommitModeLike,
    OnFailedKeys,
    OnFailedKeysLike,
)
from offset_assets.versioned.table_schema import column_name_problems

SPEC_KEY = "offset_assets/incremental"
TABLE_KEY = "offset_assets/table"
COLUMN_SCHEMA_KEY = "dagster/column_schema"  # Dagster's own key: the UI shows the columns


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
    on the outputs of a multi-asset (None: the asset key as an identifier). `asset`
    names the asset in the errors of a refused definition (not stored).
    """

    transform_keys: tuple[str, ...]
    primary_key: tuple[str, ...]
    schema_json: str
    join_keys: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    inputs: Mapping[str, dg.AssetKey] = field(default_factory=dict)
    batch_size: int | None = None
    commit_mode: CommitModeLike = CommitMode.end
    change_detection: ChangeDetectionLike = ChangeDetection.v2
    on_failed_keys: OnFailedKeysLike = OnFailedKeys.RAISE
    transformation_id: str | None = None
    asset: str | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        problems = self.definition_problems()
        if problems:
            where = self.asset or self.transformation_id
            named = f"incremental asset {where!r}" if where else "incremental asset"
            if self.asset and self.transformation_id and self.asset != self.transformation_id:
                named += f" (an output of {self.transformation_id!r})"
            raise dg.DagsterInvalidDefinitionError(f"{named}: {'; '.join(problems)}")
        # Frozen: the strings a caller gave become the enums once, here.
        object.__setattr__(self, "commit_mode", CommitMode(self.commit_mode))
        object.__setattr__(self, "change_detection", ChangeDetection(self.change_detection))

    def definition_problems(self) -> list[str]:
        """What is wrong with this definition, each naming the key and the schema's
        columns, from what the engine would refuse only once Spark has started: the
        schema (a Spark StructType's JSON; no duplicate, reserved or map column), the
        primary key and the transform keys (present, columns of the schema, and a primary
        key that tells the output rows of different transform keys apart:
        `engine.transformation.narrow_primary_key`), the engine options. A nullable
        primary-key column is accepted, as the table accepts it: NULL is a key there, like
        any other value."""
        problems = [f"{option} must be one of {allowed}, got {value!r}" for option, value, allowed in (
            ("on_failed_keys", self.on_failed_keys, tuple(m.value for m in OnFailedKeys)),
            ("commit_mode", self.commit_mode, tuple(m.value for m in CommitMode)),
            ("change_detection", self.change_detection, tuple(m.value for m in ChangeDetection)),
        ) if value not in allowed]
        if self.batch_size is not None and (not isinstance(self.batch_size, int) or self.batch_size < 1):
            problems.append(f"batch_size must be an integer >= 1, got {self.batch_size!r}")
        fields = _schema_fields(self.schema_json)
        if fields is None:
            return [*problems, f"the schema is not a Spark StructType: {self.schema_json[:200]}"]
        names = [f["name"] for f in fields]
        problems += column_name_problems(names)
        maps = [f["name"] for f in fields if _contains_map(f["type"])]
        if maps:
            problems.append(f"column(s) {maps} hold maps, which cannot be compared: use an array of structs")
        for what, keys in (("primary key", self.primary_key), ("transform key", self.transform_keys)):
            if not keys:
                problems.append(f"the output {what} names no column")
            missing = [k for k in keys if k not in names]
            if missing:
                problems.append(f"{what} column(s) {missing} not in the output schema's columns {names}")
        if set(self.transform_keys) <= set(names):
            narrow = narrow_primary_key(self.transform_keys, self.primary_key)
            problems += [narrow] if narrow else []
        return problems

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
                "commit_mode": str(self.commit_mode),
                "change_detection": str(self.change_detection),
                "on_failed_keys": str(self.on_failed_keys),
                # Only on multi-asset outputs: a single asset's id is its key.
                **({"transformation_id": self.transformation_id} if self.transformation_id else {}),
            }
        }

    @classmethod
    def from_metadata(cls, metadata: Mapping[str, Any] | None, asset: str | None = None) -> IncrementalSpec | None:
        """The spec in `metadata` (of the asset named `asset`, for errors), or None when
        the asset is not incremental."""
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
            commit_mode=raw.get("commit_mode", CommitMode.end),
            change_detection=raw.get("change_detection", ChangeDetection.v2),
            on_failed_keys=raw.get("on_failed_keys", OnFailedKeys.RAISE),
            transformation_id=raw.get("transformation_id"),
            asset=asset,
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
        COLUMN_SCHEMA_KEY: column_schema(text),
    }


def incremental_metadata(
    *,
    transform_keys: Sequence[str],
    primary_key: Sequence[str],
    schema: Any,
    join_keys: Mapping[str, Mapping[str, str]] | None = None,
    change_detection: ChangeDetectionLike = ChangeDetection.v2,
    on_failed_keys: OnFailedKeysLike = OnFailedKeys.RAISE,
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
    return spec_metadata(spec)


def spec_metadata(spec: IncrementalSpec) -> dict[str, Any]:
    """The definition metadata of an incremental asset: its spec and its column schema."""
    return {**spec.to_metadata(), COLUMN_SCHEMA_KEY: column_schema(spec.schema_json)}


def resolve_incremental(
    assets_def: dg.AssetsDefinition | None, asset_key: dg.AssetKey | None = None
) -> IncrementalAsset | None:
    """The incremental asset `asset_key` of `assets_def` (its first output by default:
    its only key, or a multi-asset's first), or None when it carries no spec."""
    if assets_def is None:
        return None
    key = asset_key or next(iter(assets_def.keys_by_output_name.values()))
    spec = IncrementalSpec.from_metadata(assets_def.metadata_by_key.get(key), key.to_user_string())
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
        output = IncrementalSpec.from_metadata(assets_def.metadata_by_key.get(output_key),
                                               output_key.to_user_string())
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


def _schema_fields(text: str) -> list[dict[str, Any]] | None:
    """The fields of a StructType's JSON text, or None when it is not one."""
    try:
        parsed = json.loads(text)
    except ValueError:
        return None
    if not isinstance(parsed, dict) or parsed.get("type") != "struct" or not isinstance(parsed.get("fields"), list):
        return None
    fields = parsed["fields"]
    if not all(isinstance(f, dict) and isinstance(f.get("name"), str) and "type" in f for f in fields):
        return None
    return fields


def _contains_map(data_type: Any) -> bool:
    """True when a field's JSON type is, or nests, a map (arrays, structs)."""
    if not isinstance(data_type, dict):
        return False
    if data_type.get("type") == "map":
        return True
    if data_type.get("type") == "array":
        return _contains_map(data_type.get("elementType"))
    return any(_contains_map(f.get("type")) for f in data_type.get("fields") or [] if isinstance(f, dict))


def _raw(value: Any) -> Any:
    """Definition metadata comes back raw or wrapped in a MetadataValue, by code path."""
    return value.value if isinstance(value, dg.MetadataValue) else value
