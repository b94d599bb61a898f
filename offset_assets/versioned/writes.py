"""What one write into a hot delta becomes: versions, unchanged rows, or a refusal.

Each incoming row is first reduced to its *state*: the data columns and sys_op, with the
non-key columns of a delete ignored (a delete is about a key). Then, per row:
- a row the caller flags as refused (`Refusal`: the engine's rows for a
  transform key the batch did not process)                            -> refused;
- bad input (null in a non-nullable column, key columns included,
  sys_op not 0/1)                                                       -> refused;
- two different states of one key in this write (unless the write is ordered, below), or
  a state different from the one an earlier write gave the key in the same hot delta
                                                                        -> refused;
- the same state as earlier in this write or hot delta                 -> collapses;
- an upsert identical to the actual version, or a delete of a key that
  is not in the actual state                                            -> no version;
- otherwise a version: the upsert itself, or a tombstone (sys_op = 1) carrying the data
  of the version it deletes, so that change readers still see the deleted values.

A NULL in a key column the schema declares nullable is a key value like any other: the
rows whose key holds it are grouped as one key (SQL's GROUP BY does the same), so the
table keeps at most one actual row for it. A key column declared not nullable refuses
it, as any non-nullable column does.

A write may replace the actual rows of some keys (`Replacement`: a transformation's
output for the keys its batch processed): an actual row of those keys that the write
holds no row for is deleted, as if the write held its delete.

An ordered write (`StateOrder`: a source's own order, a Kafka partition's offsets or a
change log's sequence column) keeps, of several rows of one key, the state of the row
with the highest order value: the earlier rows are superseded (counted, never stored).
Two different states at that highest value are still refused, and so are different
states of a key in rows whose order values do not compare (`within`: offsets order the
messages of one partition only). The order is found by the same grouping: the largest
(order, state) pair gives the last state and, unless the order's values are unique
(offsets, a primary key), the smallest (mirrored order, state) pair the smallest state at
that order.

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
from pyspark.sql.types import (
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegralType,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from offset_assets.versioned.layout import OP_DELETE, OP_UPSERT, SYS_FROM, SYS_OP
from offset_assets.versioned.sql_text import all_of, any_of, case_when, null_of, quoted, string_literal

KIND = "__kind"
BAD_OP_VALUE = "__bad_op"
REFUSED, BAD_KEY, BAD_NULL, BAD_OP = "refused", "bad_key", "bad_null", "bad_op"
CONFLICT_IN_WRITE, CONFLICT_IN_DELTA = "conflict_in_write", "conflict_in_delta"
CONFLICT_UNORDERED = "conflict_unordered"
SEEN, UNCHANGED, UPSERT, DELETE = "seen", "unchanged", "upsert", "delete"
PRIOR, ACTUAL = "__prior", "__actual"
INSERTED = "__inserted"
_INCOMING, _FIRST, _LAST = "__incoming", "__first_state", "__last_state"
_BAD_NULL, _REFUSED = "__bad_null", "__refused"
# An ordered write's incoming rows: the order value, (order, state) and (descending
# order, state) pairs, the `within` value, and per key the lowest and highest of it.
_ORDER, _LAST_ORDERED, _FIRST_ORDERED = "__order", "__last_ordered", "__first_ordered"
_WITHIN, WITHIN_LOW, WITHIN_HIGH = "__within", "__within_low", "__within_high"
_ANY_FIRST, _ANY_LAST = "__any_first_state", "__any_last_state"
# A key's incoming rows, and the rows a write superseded (all of a key's but one).
_ROWS, SUPERSEDED = "__rows", "__superseded"
# The kinds a write is counted by: each one refuses it except the last four.
KINDS = (REFUSED, BAD_KEY, BAD_OP, BAD_NULL, CONFLICT_UNORDERED, CONFLICT_IN_WRITE, CONFLICT_IN_DELTA,
         SEEN, UNCHANGED, UPSERT, DELETE)


@dataclass(frozen=True)
class WriteStats:
    """Versions one write (or a whole hot delta) created; unchanged rows made none."""

    rows_upserted: int
    rows_deleted: int
    rows_unchanged: int = 0
    # The upserts of keys without an actual row: what the write adds to the table's actual
    # rows, with the deletes taken off. None when the write did not classify its rows.
    rows_inserted: int | None = None
    # Rows that gave their key no state: an exact duplicate, or an earlier row of an
    # ordered write (`StateOrder`) whose key has a later one.
    rows_superseded: int = 0

    @property
    def keys_written(self) -> int:
        """The keys the write gave a state: a version, or none for an unchanged row."""
        return self.rows_upserted + self.rows_deleted + self.rows_unchanged

    def plus(self, other: WriteStats) -> WriteStats:
        """The versions of both writes (the inserts unknown when either's are)."""
        inserted = None if self.rows_inserted is None or other.rows_inserted is None \
            else self.rows_inserted + other.rows_inserted
        return WriteStats(self.rows_upserted + other.rows_upserted, self.rows_deleted + other.rows_deleted,
                          self.rows_unchanged + other.rows_unchanged, inserted,
                          self.rows_superseded + other.rows_superseded)


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


@dataclass(frozen=True)
class StateOrder:
    """How several rows of one key in one write are ordered: the row with the highest
    `order_by` value gives the key's state (a number, a date or a timestamp; a null is
    lower than any value). `within`: a column whose value the order holds within only
    (a Kafka partition, for its offsets): rows of one key with different states and
    different `within` values refuse the write. `unique`: no two rows of one `within`
    value hold one `order_by` value (offsets, a primary key): the write then looks for
    no tie at a key's highest order, an aggregate less (a tie would otherwise refuse it).
    Neither column is stored unless it is one of the table's."""

    order_by: str
    within: str | None = None
    unique: bool = False

    @property
    def columns(self) -> list[str]:
        return [self.order_by, *([self.within] if self.within else [])]


def descending(column: str, data_type: DataType) -> str:
    """SQL text of the fields of a struct (`'name', value, ...`, for `named_struct`) that
    orders the rows of `column` (of `data_type`) the other way round: nulls last, then the
    values from the highest down (for doubles, NaN, which Spark orders above every number,
    first). No arithmetic that can overflow: the bitwise complement of an integer is its
    mirror image."""
    value = quoted(column)
    if isinstance(data_type, IntegralType):
        mirrored = f"'v', ~{value}"
    elif isinstance(data_type, DecimalType):
        mirrored = f"'v', -{value}"
    elif isinstance(data_type, FloatType | DoubleType):
        mirrored = f"'number', NOT isnan({value}), 'v', -{value}"
    elif isinstance(data_type, DateType):
        mirrored = f"'v', ~unix_date({value})"
    elif isinstance(data_type, TimestampType):
        mirrored = f"'v', ~unix_micros({value})"
    elif isinstance(data_type, TimestampNTZType):
        mirrored = f"'v', ~timestampdiff(MICROSECOND, TIMESTAMP_NTZ'1970-01-01 00:00:00', {value})"
    else:
        raise TypeError(f"an order column must be a number, a date or a timestamp, {column!r} is "
                        f"{data_type.simpleString()}")
    return f"'null', {value} IS NULL, {mirrored}"


# The key has an actual row: its newest committed version (`__actual`) is an upsert.
_HAS_ACTUAL_ROW = f"({ACTUAL} IS NOT NULL AND {ACTUAL}.{quoted(SYS_OP)} = {OP_UPSERT})"


def state_of(df: DataFrame, schema: StructType, primary_key: Sequence[str], keep: Sequence[str] = (),
             extra: Sequence[str] = ()) -> DataFrame:
    """Data columns and sys_op, with non-key columns nulled for deletes (and `keep`, and
    the SQL expressions `extra` of `df`'s columns as they are)."""
    is_delete = f"{quoted(SYS_OP)} = {OP_DELETE}"
    columns = [
        quoted(f.name) if f.name in primary_key
        else f"{case_when([(is_delete, 'NULL')], quoted(f.name))} AS {quoted(f.name)}"
        for f in schema.fields
    ]
    return df.selectExpr(*columns, quoted(SYS_OP), *[quoted(c) for c in keep], *extra)


def classify(
    incoming: DataFrame,
    prior: DataFrame | None,
    candidates: DataFrame | None,
    schema: StructType,
    primary_key: Sequence[str],
    refused: str | None = None,
    partitions: int | None = None,
    replacing: bool = False,
    order: StateOrder | None = None,
    order_type: DataType | None = None,
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
    `order`: the key's state is its last row's (`StateOrder`; the order column is of
    `order_type`): its min and max are taken among the rows at the key's highest order.

    `partitions`: None, Spark plans the grouping's shuffle; 1, the rows are gathered in
    one partition first, which satisfies the grouping without an exchange (a small write:
    one Spark job, also under adaptive execution, where each shuffle is a job of its own);
    n, one shuffle into n partitions by key. With 1 or n the result is sorted by key
    within each partition (the grouping sorts), so the caller can write each partition
    as one sorted file without sorting again.

    The expressions are SQL text (`sql_text.py`): built with Column calls they were most
    of a small write's round trips to the JVM.
    """
    values = [f.name for f in schema.fields if f.name not in primary_key]
    state_columns = values + [SYS_OP]
    op = quoted(SYS_OP)
    required = [f"{quoted(f.name)} IS NULL" for f in schema.fields if not f.nullable and f.name in values]
    bad_op = case_when([(f"{op} IS NULL OR {op} NOT IN ({OP_UPSERT}, {OP_DELETE})",
                         f"coalesce(CAST({op} AS STRING), 'null')")])
    bad_null = f"CAST(coalesce({op} = {OP_UPSERT} AND ({any_of(required)}), false) AS INT)"
    keys = [quoted(c) for c in primary_key]

    def struct_of(columns: Sequence[str]) -> str:
        return "struct({})".format(", ".join(quoted(c) for c in columns))

    state = struct_of(state_columns)
    within = order is not None and order.within is not None
    # Per incoming row, what the grouping takes the key's first and last state from.
    if order is None:
        ordered, extra = [f"{state} AS {_INCOMING}"], []
        first_state, last_state, rows = f"min({_INCOMING})", f"max({_INCOMING})", f"count({_INCOMING})"
    else:
        if order_type is None:
            raise ValueError("an ordered write needs its order column's type")
        extra = [f"{quoted(order.order_by)} AS {_ORDER}",
                 *([f"{quoted(order.within)} AS {_WITHIN}"] if order.within else [])]
        ordered = [f"named_struct('o', {_ORDER}, 's', {state}) AS {_LAST_ORDERED}",
                   *([] if order.unique else
                     [f"named_struct({descending(_ORDER, order_type)}, 's', {state}) AS {_FIRST_ORDERED}"]),
                   *([f"{state} AS {_INCOMING}", _WITHIN] if within else [])]
        last_state = f"max({_LAST_ORDERED}).s"
        # Unique order values cannot tie: the last state is the first one at the top.
        first_state = last_state if order.unique else f"min({_FIRST_ORDERED}).s"
        rows = f"count({_LAST_ORDERED})"
    flag = [f"CAST(coalesce({quoted(refused)}, false) AS INT) AS {_REFUSED}"] if refused else []
    parts = [
        state_of(incoming, schema, primary_key, keep=[refused] if refused else [], extra=extra).selectExpr(
            *keys, *ordered, f"{bad_op} AS {BAD_OP_VALUE}", f"{bad_null} AS {_BAD_NULL}", *flag,
        )
    ]
    if prior is not None:
        parts.append(state_of(prior, schema, primary_key).selectExpr(*keys, f"{state} AS {PRIOR}"))
    if candidates is not None:
        parts.append(candidates.selectExpr(*keys, f"{struct_of([SYS_FROM, *state_columns])} AS {ACTUAL}"))
    union = reduce(lambda a, b: a.unionByName(b, allowMissingColumns=True), parts)
    if partitions == 1:
        union = union.coalesce(1)
    elif partitions is not None:
        union = union.repartition(partitions, *[F.col(k) for k in keys])
    # The columns each step adds are named here, not asked of the frames: a Spark
    # Connect client would ask the server to analyse the plan for each.
    looked_up = [name for name, part in ((PRIOR, prior), (ACTUAL, candidates)) if part is not None]
    spread = [_ANY_FIRST, _ANY_LAST, WITHIN_LOW, WITHIN_HIGH] if within else []
    aggregates = [
        f"{first_state} AS {_FIRST}",
        f"{last_state} AS {_LAST}",
        f"{rows} AS {_ROWS}",
        f"max({BAD_OP_VALUE}) AS {BAD_OP_VALUE}",
        f"max({_BAD_NULL}) AS {_BAD_NULL}",
        *([f"max({_REFUSED}) AS {_REFUSED}"] if refused else []),
        *([f"min({_INCOMING}) AS {_ANY_FIRST}", f"max({_INCOMING}) AS {_ANY_LAST}",
           f"min({_WITHIN}) AS {WITHIN_LOW}", f"max({_WITHIN}) AS {WITHIN_HIGH}"] if within else []),
        *[f"max({c}) AS {c}" for c in looked_up],
    ]
    grouped = union.groupBy(*[F.col(k) for k in keys]).agg(*[F.expr(a) for a in aggregates])
    first, last = _FIRST, _LAST
    if replacing and candidates is not None:
        # A replaced key with an actual row and no incoming one: the state of its delete.
        deleted = case_when([(f"{ACTUAL}.{op} = {OP_UPSERT}", "named_struct({})".format(", ".join(
            [*[f"{string_literal(c)}, {null_of(schema[c].dataType)}" for c in values],
             f"{string_literal(SYS_OP)}, {OP_DELETE}"])))])
        first, last = f"coalesce({_FIRST}, {deleted})", f"coalesce({_LAST}, {deleted})"
    states = grouped.where(f"{first} IS NOT NULL").selectExpr(
        *keys,
        *[f"({first}).{quoted(c)} AS {quoted(c)}" for c in state_columns],
        f"{first} AS {_FIRST}",
        f"{last} AS {_LAST}",
        _ROWS, BAD_OP_VALUE, _BAD_NULL, *([_REFUSED] if refused else []), *spread, *looked_up,
    )

    null_key = any_of(f"{quoted(f.name)} IS NULL" for f in schema.fields if f.name in primary_key and not f.nullable)
    branches = [(f"{_REFUSED} = 1", REFUSED)] if refused else []
    branches += [
        (null_key, BAD_KEY),
        (f"{BAD_OP_VALUE} IS NOT NULL", BAD_OP),
        (f"{_BAD_NULL} = 1", BAD_NULL),
    ]
    if within:
        branches.append((f"NOT ({WITHIN_LOW} <=> {WITHIN_HIGH}) AND NOT ({_ANY_FIRST} <=> {_ANY_LAST})",
                         CONFLICT_UNORDERED))
    branches.append((f"NOT ({_FIRST} <=> {_LAST})", CONFLICT_IN_WRITE))
    if prior is not None:
        same = all_of(f"{quoted(c)} <=> {PRIOR}.{quoted(c)}" for c in state_columns)
        branches += [(f"{PRIOR} IS NOT NULL AND NOT ({same})", CONFLICT_IN_DELTA), (f"{PRIOR} IS NOT NULL", SEEN)]
    if candidates is not None:
        same = all_of(f"{quoted(c)} <=> {ACTUAL}.{quoted(c)}" for c in values)
        branches += [(f"{op} = {OP_UPSERT} AND {_HAS_ACTUAL_ROW} AND {same}", UNCHANGED),
                     (f"{op} = {OP_DELETE} AND {_HAS_ACTUAL_ROW}", DELETE)]
    branches.append((f"{op} = {OP_DELETE}", UNCHANGED))
    kind = case_when([(condition, string_literal(k)) for condition, k in branches], string_literal(UPSERT))
    kept = [*primary_key, *state_columns, BAD_OP_VALUE, _ROWS, *([WITHIN_LOW, WITHIN_HIGH] if within else []),
            *([ACTUAL] if candidates is not None else [])]
    return states.selectExpr(*[quoted(c) for c in kept], f"{kind} AS {KIND}")


def counts_of(classified: DataFrame, committed: bool) -> list[Column]:
    """Aggregates counting `classified`'s rows per kind (one column per kind in `KINDS`),
    for a `groupBy`-free count or one observed while the rows are written; with
    `committed` (classified with candidates) also the upserts of keys without an actual
    version (`INSERTED`), which `stats_of` reads."""
    conditions = [(f"{KIND} = {string_literal(kind)}", kind) for kind in KINDS]
    if committed:
        conditions.append((f"{KIND} = {string_literal(UPSERT)} AND NOT {_HAS_ACTUAL_ROW}", INSERTED))
    counts = [F.expr(f"sum({case_when([(condition, '1')], '0')}) AS {name}") for condition, name in conditions]
    return [*counts, F.expr(f"sum({case_when([(f'{_ROWS} > 1', f'{_ROWS} - 1')], '0')}) AS {SUPERSEDED}")]


def stats_of(counts: Mapping[str, Any], committed: bool) -> WriteStats:
    """The versions a write created, from the values of `counts_of`'s aggregates: with
    nothing committed every upsert is of a key without an actual row."""
    upserted = int(counts.get(UPSERT) or 0)
    inserted = int(counts.get(INSERTED) or 0) if committed else upserted
    return WriteStats(upserted, int(counts.get(DELETE) or 0), int(counts.get(UNCHANGED) or 0), inserted,
                      int(counts.get(SUPERSEDED) or 0))


def versions_of(classified: DataFrame, schema: StructType, primary_key: Sequence[str], delta_num: int,
                committed: bool) -> DataFrame:
    """The versions to store: upserts as written, tombstones with the deleted version's data
    (`committed`: `classified` was classified with candidates, so it has their `__actual`)."""

    def value(name: str) -> str:
        if name in primary_key or not committed:
            return quoted(name)
        deleted = f"{ACTUAL}.{quoted(name)}"
        return f"{case_when([(f'{KIND} = {string_literal(DELETE)}', deleted)], quoted(name))} AS {quoted(name)}"

    return classified.where(f"{KIND} IN ({string_literal(UPSERT)}, {string_literal(DELETE)})").selectExpr(
        *[value(f.name) for f in schema.fields],
        quoted(SYS_OP),
        f"CAST({int(delta_num)} AS BIGINT) AS {SYS_FROM}",
    )


def unchanged_of(classified: DataFrame, schema: StructType) -> DataFrame:
    return classified.where(f"{KIND} = {string_literal(UNCHANGED)}").selectExpr(
        *[quoted(f.name) for f in schema.fields], quoted(SYS_OP))
