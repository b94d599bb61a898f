"""What one write into a hot delta becomes: versions, unchanged rows, or a refusal.

Each incoming row is first reduced to its *state*: the data columns and sys_op, with the
non-key columns of a delete ignored (a delete is about a key). Then, per row:
- a row the caller flags as refused (`Refusal`: the engine's rows for a
  transform key the batch did not process)                            -> refused;
- bad input (null key, null in a non-nullable column, sys_op not 0/1)  -> refused;
- two different states of one key in this write, or a state different from the one an
  earlier write gave the key in the same hot delta                      -> refused;
- the same state as earlier in this write or hot delta                 -> collapses;
- an upsert identical to the actual version, or a delete of a key that
  is not in the actual state                                            -> no version;
- otherwise a version: the upsert itself, or a tombstone (sys_op = 1) carrying the data
  of the version it deletes, so that change readers still see the deleted values.

A write may replace the actual rows of some keys (`Replacement`: a transformation's
output for the keys its batch processed): an actual row of those keys that the write
holds no row for is deleted, as if the write held its delete.

Counts are per key: a key's rows are grouped once, and the smallest and the largest of
its states (structs, ordered as Spark orders them) tell whether it has one state or
several. That is plain min/max aggregation, where a set of states per key (collect_set)
was an object aggregation that fell back to sorting after 128 keys: a 1M-row write spent
most of its time there. Two states equal under SQL's `<=>` (0.0 and -0.0, NaN and NaN)
are one state, as they are when a state is compared with the actual version. Every
column type a table may have is ordered (maps, which are not, are refused at definition).

How a write runs the classification, and when its counts refuse it before or after its
files are written, is `hot_delta.py`'s part.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import reduce
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from offset_assets.versioned.layout import OP_DELETE, OP_UPSERT, SYS_FROM, SYS_OP

KIND = "__kind"
BAD_OP_VALUE = "__bad_op"
REFUSED, BAD_KEY, BAD_NULL, BAD_OP = "refused", "bad_key", "bad_null", "bad_op"
CONFLICT_IN_WRITE, CONFLICT_IN_DELTA = "conflict_in_write", "conflict_in_delta"
SEEN, UNCHANGED, UPSERT, DELETE = "seen", "unchanged", "upsert", "delete"
PRIOR, ACTUAL = "__prior", "__actual"
INSERTED = "__inserted"
_INCOMING, _FIRST, _LAST = "__incoming", "__first_state", "__last_state"
_BAD_NULL, _REFUSED = "__bad_null", "__refused"
# The kinds a write is counted by: each one refuses it except the last four.
KINDS = (REFUSED, BAD_KEY, BAD_OP, BAD_NULL, CONFLICT_IN_WRITE, CONFLICT_IN_DELTA, SEEN, UNCHANGED, UPSERT, DELETE)


@dataclass(frozen=True)
class WriteStats:
    """Versions one write (or a whole hot delta) created; unchanged rows made none."""

    rows_upserted: int
    rows_deleted: int
    rows_unchanged: int = 0
    # The upserts of keys without an actual row: what the write adds to the table's actual
    # rows, with the deletes taken off. None when the write did not classify its rows.
    rows_inserted: int | None = None


@dataclass(frozen=True)
class Refusal:
    """Rows the caller refuses in one write: those whose boolean column `column` is true.
    They refuse the whole write, found by the write's own classification (no Spark job of
    their own) before any file is written; `error` builds the exception from
    `example_columns` of one such row."""

    column: str
    example_columns: Sequence[str]
    error: Callable[[dict], Exception]


@dataclass(frozen=True)
class Replacement:
    """The keys whose actual rows one write replaces: a key among them that has an actual
    row and no row in the write gets a tombstone. The caller (the engine, which holds the
    keys) restricts the committed versions to them: `select(versions, in_one_partition)`
    keeps the versions of those keys, by primary-key columns only, so that every version
    of a key is kept or none (the newest kept is then its actual version);
    `in_one_partition` says the versions are read into one partition, where a join
    with the keys needs no exchange, or read in parallel."""

    select: Callable[[DataFrame, bool], DataFrame]


def state_of(df: DataFrame, schema: StructType, primary_key: Sequence[str], keep: Sequence[str] = ()) -> DataFrame:
    """Data columns and sys_op, with non-key columns nulled for deletes (and `keep`)."""
    is_delete = F.col(SYS_OP) == OP_DELETE
    columns = [
        F.col(f"`{f.name}`")
        if f.name in primary_key
        else F.when(is_delete, F.lit(None).cast(f.dataType)).otherwise(F.col(f"`{f.name}`")).alias(f.name)
        for f in schema.fields
    ]
    return df.select(*columns, F.col(SYS_OP), *[F.col(f"`{c}`") for c in keep])


def classify(
    incoming: DataFrame,
    prior: DataFrame | None,
    candidates: DataFrame | None,
    schema: StructType,
    primary_key: Sequence[str],
    refused: str | None = None,
    partitions: int | None = None,
    replacing: bool = False,
) -> DataFrame:
    """One row per incoming key: its state, a `__kind`, and the actual version (`__actual`,
    whose data a tombstone carries).

    `prior`: states written earlier into the same hot delta (None: first write);
    `candidates`: the committed versions of the incoming keys that can be actual (the
    snapshot's and those of later deltas; None: nothing committed). All three are
    grouped by key: a key's incoming states are one state when their min and max agree
    (duplicates collapse), and the actual version is the candidate with the highest
    sys_from (max of a struct that starts with sys_from). `refused`: a boolean column of
    `incoming` marking rows the caller refuses (a key with such a row is `refused`).
    `replacing`: the candidates are the versions of the keys the write replaces
    (`Replacement`): a key among them whose actual version is an upsert and that has no
    incoming row gets the state of a delete, classified like an incoming one.

    `partitions`: None, Spark plans the grouping's shuffle; 1, the rows are gathered in
    one partition first, which satisfies the grouping without an exchange (a small write:
    one Spark job, also under adaptive execution, where each shuffle is a job of its own);
    n, one shuffle into n partitions by key. With 1 or n the result is sorted by key
    within each partition (the grouping sorts), so the caller can write each partition
    as one sorted file without sorting again.
    """
    values = [f.name for f in schema.fields if f.name not in primary_key]
    state_columns = values + [SYS_OP]
    op = F.col(SYS_OP)
    required = [F.col(f"`{f.name}`").isNull() for f in schema.fields if not f.nullable and f.name in values]
    bad_op = F.when(op.isNull() | ~op.isin(OP_UPSERT, OP_DELETE), F.coalesce(op.cast("string"), F.lit("null")))
    bad_null = F.coalesce((op == OP_UPSERT) & _any(required), F.lit(False)).cast("int")
    keys = [F.col(f"`{c}`") for c in primary_key]

    def struct_of(columns: Sequence[str]) -> Column:
        return F.struct(*[F.col(f"`{c}`") for c in columns])

    flag = [F.coalesce(F.col(f"`{refused}`"), F.lit(False)).cast("int").alias(_REFUSED)] if refused else []
    parts = [
        state_of(incoming, schema, primary_key, keep=[refused] if refused else []).select(
            *keys, struct_of(state_columns).alias(_INCOMING), bad_op.alias(BAD_OP_VALUE), bad_null.alias(_BAD_NULL),
            *flag,
        )
    ]
    if prior is not None:
        parts.append(state_of(prior, schema, primary_key).select(*keys, struct_of(state_columns).alias(PRIOR)))
    if candidates is not None:
        parts.append(candidates.select(*keys, struct_of([SYS_FROM, *state_columns]).alias(ACTUAL)))
    union = reduce(lambda a, b: a.unionByName(b, allowMissingColumns=True), parts)
    if partitions == 1:
        union = union.coalesce(1)
    elif partitions is not None:
        union = union.repartition(partitions, *keys)
    aggregates = [
        F.min(_INCOMING).alias(_FIRST),
        F.max(_INCOMING).alias(_LAST),
        F.max(BAD_OP_VALUE).alias(BAD_OP_VALUE),
        F.max(_BAD_NULL).alias(_BAD_NULL),
        *([F.max(_REFUSED).alias(_REFUSED)] if refused else []),
    ]
    # The columns each step adds are named here, not asked of the frames: a Spark
    # Connect client would ask the server to analyse the plan for each.
    looked_up = [name for name, part in ((PRIOR, prior), (ACTUAL, candidates)) if part is not None]
    aggregates += [F.max(c).alias(c) for c in looked_up]
    grouped = union.groupBy(*keys).agg(*aggregates)
    first, last = F.col(_FIRST), F.col(_LAST)
    if replacing and candidates is not None:
        # A replaced key with an actual row and no incoming one: the state of its delete.
        deleted = F.when(F.col(ACTUAL)[SYS_OP] == OP_UPSERT, F.struct(
            *[F.lit(None).cast(schema[c].dataType).alias(c) for c in values], F.lit(OP_DELETE).alias(SYS_OP)))
        first, last = F.coalesce(first, deleted), F.coalesce(last, deleted)
    states = grouped.where(first.isNotNull()).select(
        *keys,
        *[first[c].alias(c) for c in state_columns],
        first.alias(_FIRST),
        last.alias(_LAST),
        BAD_OP_VALUE, _BAD_NULL, *([_REFUSED] if refused else []), *looked_up,
    )

    null_key = _any([F.col(f"`{c}`").isNull() for c in primary_key])
    kind = F.when(F.col(_REFUSED) == 1, REFUSED).when(null_key, BAD_KEY) if refused else F.when(null_key, BAD_KEY)
    kind = (
        kind.when(F.col(BAD_OP_VALUE).isNotNull(), BAD_OP)
        .when(F.col(_BAD_NULL) == 1, BAD_NULL)
        .when(~F.col(_FIRST).eqNullSafe(F.col(_LAST)), CONFLICT_IN_WRITE)
    )
    if prior is not None:
        seen = F.col(PRIOR).isNotNull()
        same = _all([F.col(f"`{c}`").eqNullSafe(F.col(PRIOR)[c]) for c in state_columns])
        kind = kind.when(seen & ~same, CONFLICT_IN_DELTA).when(seen, SEEN)
    if candidates is not None:
        exists = _has_actual_row()
        same = _all([F.col(f"`{c}`").eqNullSafe(F.col(ACTUAL)[c]) for c in values])
        kind = kind.when((op == OP_UPSERT) & exists & same, UNCHANGED)
        kind = kind.when((op == OP_DELETE) & exists, DELETE)
    kind = kind.when(op == OP_DELETE, UNCHANGED).otherwise(UPSERT)
    kept = [*primary_key, *state_columns, BAD_OP_VALUE, *([ACTUAL] if candidates is not None else [])]
    return states.select(*[F.col(f"`{c}`") for c in kept], kind.alias(KIND))


def counts_of(classified: DataFrame, committed: bool) -> list[Column]:
    """Aggregates counting `classified`'s rows per kind (one column per kind in `KINDS`),
    for a `groupBy`-free count or one observed while the rows are written; with
    `committed` (classified with candidates) also the upserts of keys without an actual
    version (`INSERTED`), which `stats_of` reads."""
    counts = [F.sum(F.when(F.col(KIND) == kind, 1).otherwise(0)).alias(kind) for kind in KINDS]
    if committed:
        counts.append(F.sum(F.when((F.col(KIND) == UPSERT) & ~_has_actual_row(), 1).otherwise(0)).alias(INSERTED))
    return counts


def _has_actual_row() -> Column:
    """The key has an actual row: its newest committed version (`__actual`) is an upsert."""
    return F.col(ACTUAL).isNotNull() & (F.col(ACTUAL)[SYS_OP] == OP_UPSERT)


def stats_of(counts: Mapping[str, Any], committed: bool) -> WriteStats:
    """The versions a write created, from the values of `counts_of`'s aggregates: with
    nothing committed every upsert is of a key without an actual row."""
    upserted = int(counts.get(UPSERT) or 0)
    inserted = int(counts.get(INSERTED) or 0) if committed else upserted
    return WriteStats(upserted, int(counts.get(DELETE) or 0), int(counts.get(UNCHANGED) or 0), inserted)


def versions_of(classified: DataFrame, schema: StructType, primary_key: Sequence[str], delta_num: int,
                committed: bool) -> DataFrame:
    """The versions to store: upserts as written, tombstones with the deleted version's data
    (`committed`: `classified` was classified with candidates, so it has their `__actual`)."""

    def value(name: str) -> Column:
        if name in primary_key or not committed:
            return F.col(f"`{name}`")
        deleted = F.col(ACTUAL)[name]
        return F.when(F.col(KIND) == DELETE, deleted).otherwise(F.col(f"`{name}`")).alias(name)

    return classified.where(F.col(KIND).isin(UPSERT, DELETE)).select(
        *[value(f.name) for f in schema.fields],
        F.col(SYS_OP),
        F.lit(delta_num).cast("long").alias(SYS_FROM),
    )


def unchanged_of(classified: DataFrame, schema: StructType) -> DataFrame:
    return classified.where(F.col(KIND) == UNCHANGED).select(*[f.name for f in schema.fields], SYS_OP)


def _any(conditions: list[Column]) -> Column:
    return reduce(lambda a, b: a | b, conditions) if conditions else F.lit(False)


def _all(conditions: list[Column]) -> Column:
    return reduce(lambda a, b: a & b, conditions) if conditions else F.lit(True)
