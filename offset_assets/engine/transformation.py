"""What a transformation is: inputs, transform keys, outputs and a function of DataFrames."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from pyspark.sql import DataFrame

from offset_assets.control_plane.names import META_TABLE_PREFIX
from offset_assets.engine.errors import TransformationDefinitionError
from offset_assets.engine.vocabulary import (
    ChangeDetection,
    ChangeDetectionLike,
    CommitMode,
    CommitModeLike,
    change_detection_of,
    commit_mode_of,
)
from offset_assets.versioned.table import VersionedTable

TransformFunction = Callable[..., "DataFrame | Mapping[str, DataFrame]"]


_ID_PATTERN = re.compile(r"[A-Za-z][A-Za-z0-9_.\-]*")
# The id goes into String(255) control-plane columns and names the meta table
# `_meta__<id>`, which must stay within the table-name limit (a folder name).
TRANSFORMATION_ID_MAX_LENGTH = 120


@dataclass(frozen=True)
class TransformInput:
    """An input table. With `join_keys` ({primary_col: reference_col}) it is a reference
    table: read only for the join values present (filtered join), and a change in it
    re-triggers the primary records that point at it (reverse join)."""

    table: VersionedTable
    join_keys: Mapping[str, str] | None = None

    @property
    def name(self) -> str:
        return self.table.name

    @property
    def is_reference(self) -> bool:
        return bool(self.join_keys)


@dataclass(frozen=True)
class Transformation:
    """An incremental transformation.

    `func` receives one keyword argument per input (the input's table name) holding the
    actual rows of the keys being processed, and returns one DataFrame (single output) or
    a mapping output name -> DataFrame. Every output row carries the transform keys, so
    that a key's previous output can be replaced and, when it yields nothing, deleted.
    """

    transformation_id: str
    inputs: Sequence[TransformInput]
    transform_keys: Sequence[str]
    outputs: Sequence[VersionedTable]
    func: TransformFunction
    batch_size: int | None = None
    commit_mode: CommitModeLike = CommitMode.end
    change_detection: ChangeDetectionLike = ChangeDetection.v2
    description: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        tid = self.transformation_id
        if not isinstance(tid, str) or not _ID_PATTERN.fullmatch(tid):
            raise TransformationDefinitionError(
                f"transformation id {tid!r} must start with a letter and hold only letters, "
                "digits, '_', '.', '-'"
            )
        if len(tid) > TRANSFORMATION_ID_MAX_LENGTH:
            raise TransformationDefinitionError(
                f"transformation id is {len(tid)} characters long, the limit is "
                f"{TRANSFORMATION_ID_MAX_LENGTH}: {tid!r}"
            )
        if not self.transform_keys:
            raise TransformationDefinitionError(f"transformation {tid!r} declares no transform keys")
        if not self.outputs:
            raise TransformationDefinitionError(f"transformation {tid!r} declares no outputs")
        # Frozen: the strings a caller gave become the enums once, here.
        object.__setattr__(self, "commit_mode", commit_mode_of(self.commit_mode, tid))
        object.__setattr__(self, "change_detection", change_detection_of(self.change_detection, tid))
        if self.batch_size is not None and self.batch_size < 1:
            raise TransformationDefinitionError(
                f"transformation {tid!r}: batch_size must be >= 1, got {self.batch_size}"
            )
        names = [inp.name for inp in self.inputs]
        if len(set(names)) != len(names):
            raise TransformationDefinitionError(f"transformation {tid!r} lists an input twice: {names}")
        if not self.primary_inputs:
            raise TransformationDefinitionError(
                f"transformation {tid!r} needs at least one input without join_keys"
            )
        for inp in self.primary_inputs:
            missing = [k for k in self.transform_keys if k not in inp.table.data_columns]
            if missing:
                raise TransformationDefinitionError(
                    f"transformation {tid!r}: input {inp.name!r} lacks transform key column(s) {missing}"
                )
        for inp in self.reference_inputs:
            for primary_col, reference_col in inp.join_keys.items():
                if reference_col not in inp.table.data_columns:
                    raise TransformationDefinitionError(
                        f"transformation {tid!r}: reference input {inp.name!r} has no column "
                        f"{reference_col!r} (join_keys {dict(inp.join_keys)})"
                    )
                if not self.inputs_with_column(primary_col):
                    raise TransformationDefinitionError(
                        f"transformation {tid!r}: no primary input has column {primary_col!r} "
                        f"to join reference input {inp.name!r} on"
                    )
        for out in self.outputs:
            missing = [k for k in self.transform_keys if k not in out.data_columns]
            if missing:
                raise TransformationDefinitionError(
                    f"transformation {tid!r}: output {out.name!r} lacks transform key column(s) {missing}"
                )
            narrow = narrow_primary_key(self.transform_keys, out.primary_key)
            if narrow:
                raise TransformationDefinitionError(f"transformation {tid!r}: output {out.name!r}: {narrow}")
            if out.name in names:
                raise TransformationDefinitionError(
                    f"transformation {tid!r}: table {out.name!r} is both an input and an output"
                )

    @property
    def primary_inputs(self) -> list[TransformInput]:
        return [inp for inp in self.inputs if not inp.is_reference]

    @property
    def reference_inputs(self) -> list[TransformInput]:
        return [inp for inp in self.inputs if inp.is_reference]

    def inputs_with_column(self, column: str) -> list[TransformInput]:
        return [inp for inp in self.primary_inputs if column in inp.table.data_columns]

    @property
    def nullable_keys(self) -> frozenset[str]:
        """The transform keys that can be NULL: those a primary input declares nullable (a
        column declared not nullable refuses NULL at every write). A NULL key is a key,
        matched with `<=>`; the others keep `=` (`versioned/key_joins.py`)."""
        return frozenset(k for k in self.transform_keys
                         if any(inp.table.schema[k].nullable for inp in self.primary_inputs))

    @property
    def meta_table_name(self) -> str:
        return meta_table_name(self.transformation_id)


def narrow_primary_key(transform_keys: Sequence[str], primary_key: Sequence[str]) -> str | None:
    """Why an output keyed by `primary_key` cannot hold the output of `transform_keys`, or None.

    A run replaces the output rows of each key it processes, and a write holds one state
    per primary key (`outputs.py`). A primary key made of transform-key columns only, but
    not of all of them, gives the rows of two transform keys that differ in the others one
    key: two states of one row in one write, refused on every run (or, in two batches, one
    key's row overwriting the other's). A primary key holding every transform key, or a
    column beyond them (a row id, which also tells the transform key owning the row), is
    accepted."""
    pk, keys = set(primary_key), set(transform_keys)
    if not pk or not pk < keys:
        return None
    others = ", ".join(repr(k) for k in transform_keys if k not in pk)
    return (f"primary_key {list(primary_key)} is narrower than transform_keys {list(transform_keys)}: the rows "
            f"of transform keys that differ only in {others} would share a primary key (two states of one row "
            f"in one write); a run replaces each processed key's output rows, so an output's primary key must "
            f"tell which transform key a row belongs to: declare primary_key {list(transform_keys)} (or one "
            f"with a column that tells it)")


def meta_table_name(transformation_id: str) -> str:
    """The versioned table holding a transformation's per-key meta."""
    return f"{META_TABLE_PREFIX}{transformation_id}"
