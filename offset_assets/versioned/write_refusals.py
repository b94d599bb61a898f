"""Why a write into a hot delta is refused: the error its counts call for.

A write's classification (`writes.py`) counts its rows by kind; any refused kind refuses
the whole write, with one error that names the table, the rule broken and a few of the
keys at fault (`MAX_EXAMPLES`). Nothing of a refused write is kept (`hot_delta.py`).
"""

from __future__ import annotations

from collections.abc import Callable

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import DataType

from offset_assets.versioned import writes
from offset_assets.versioned.errors import ConflictingStatesError, InvalidSysOpError, NullKeyError, UnorderedStatesError
from offset_assets.versioned.hot_table import HotTable
from offset_assets.versioned.writes import Refusal, StateOrder

__all__ = ["refuse", "refuse_bad_rows"]

MAX_EXAMPLES = 5

# The rows of one kind, as dicts of the columns asked for (at most `MAX_EXAMPLES`).
RowsOf = Callable[..., list[dict]]


def refuse_bad_rows(table: HotTable, delta_num: int, classified: DataFrame, counts: dict[str, int],
                    refusal: Refusal | None, ordering: tuple[StateOrder, DataType] | None = None) -> None:
    """Raise the error of a write into delta `delta_num` whose `counts` (by kind, of its
    `classified` rows) hold a refused row, naming up to `MAX_EXAMPLES` keys at fault."""

    def rows_of(kind: str, *columns: str) -> list[dict]:
        found = classified.where(F.col(writes.KIND) == kind).select(*columns).distinct()
        return [row.asDict() for row in found.limit(MAX_EXAMPLES).collect()]

    refuse(table, delta_num, counts, rows_of, refusal, ordering)


def refuse(table: HotTable, delta_num: int, counts: dict[str, int], rows_of: RowsOf, refusal: Refusal | None,
           ordering: tuple[StateOrder, DataType] | None = None) -> None:
    """`refuse_bad_rows` for a write classified anywhere: `rows_of(kind, *columns)` gives
    the rows of a kind (the driver's own classification passes its rows)."""
    pk = table.primary_key
    if refusal is not None and counts.get(writes.REFUSED):
        examples = rows_of(writes.REFUSED, *refusal.example_columns)
        raise refusal.error(examples[0] if examples else {})

    if counts.get(writes.BAD_KEY):
        required = [f.name for f in table.schema.fields if f.name in pk and not f.nullable]
        raise NullKeyError(
            table.name,
            f"null in primary-key column(s) {required}, which the schema declares not nullable "
            f"(a nullable key column takes NULL as a key), for key(s) {rows_of(writes.BAD_KEY, *pk)}; "
            "nothing written",
        )
    if counts.get(writes.BAD_OP):
        values = sorted(row[writes.BAD_OP_VALUE] for row in rows_of(writes.BAD_OP, writes.BAD_OP_VALUE))
        raise InvalidSysOpError(
            table.name,
            f"sys_op must be 0 (upsert) or 1 (delete), found {', '.join(values)} "
            f"for key(s) {rows_of(writes.BAD_OP, *pk)}; nothing written",
        )
    if counts.get(writes.BAD_NULL):
        required = [f.name for f in table.schema.fields if not f.nullable and f.name not in pk]
        raise NullKeyError(
            table.name,
            f"null in non-nullable column(s) {required} for key(s) "
            f"{rows_of(writes.BAD_NULL, *pk)}; nothing written",
        )
    order = ordering[0] if ordering is not None else None
    if order is not None and order.within is not None and counts.get(writes.CONFLICT_UNORDERED):
        found = rows_of(writes.CONFLICT_UNORDERED, *pk, writes.WITHIN_LOW, writes.WITHIN_HIGH)
        keys = [{c: row[c] for c in pk} for row in found]
        spread = [(row[writes.WITHIN_LOW], row[writes.WITHIN_HIGH]) for row in found]
        shown = ", ".join(f"{key} ({order.within} {low} and {high})" for key, (low, high) in zip(keys, spread,
                                                                                               strict=True))
        raise UnorderedStatesError(
            table.name,
            f"different states of key(s) {shown} in rows of different {order.within!r}, whose "
            f"{order.order_by!r} values do not compare, in one write to delta {delta_num} "
            f"({counts[writes.CONFLICT_UNORDERED]} key(s) in all); nothing written",
            keys, order.within, spread,
        )
    if counts.get(writes.CONFLICT_IN_WRITE):
        keys = rows_of(writes.CONFLICT_IN_WRITE, *pk)
        at = f" at the same highest {order.order_by!r}" if order is not None else ""
        raise ConflictingStatesError(
            table.name,
            f"different states of key(s) {keys}{at} in one write to delta {delta_num} "
            f"({counts[writes.CONFLICT_IN_WRITE]} key(s) in all); nothing written",
            keys,
        )
    if counts.get(writes.CONFLICT_IN_DELTA):
        keys = rows_of(writes.CONFLICT_IN_DELTA, *pk)
        raise ConflictingStatesError(
            table.name,
            f"key(s) {keys} already have a different state in hot delta {delta_num} "
            f"({counts[writes.CONFLICT_IN_DELTA]} key(s) in all); nothing of this write written",
            keys,
        )
