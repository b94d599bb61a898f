"""The changed index held by the driver (`keys.local_from_rows`): however it was
collected (Arrow columns for keys of strings and integers, tuples for other types or a
Spark Connect client), the keys are batched as a plain Python model batches them: each
key once, keys without a change timestamp first, then by their oldest change, then by
key (a NULL, None, before every value of its column, as Spark's ascending sort with nulls
first orders it); each batch's oldest change per input; and, per input, the keys its
changes marked."""

from __future__ import annotations

import datetime

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from offset_assets.engine.changed_keys.held_keys import local_from_rows


def model(width: int, rows: list[tuple], batch_size: int | None) -> tuple[list, dict, list]:
    """(batches, per input the keys it marked, per batch input -> oldest change)."""
    first: dict[tuple, float | None] = {}
    for row in rows:
        key, ts = row[:width], row[width]
        if key not in first:
            first[key] = ts
        elif ts is not None and (first[key] is None or ts < first[key]):
            first[key] = ts
    ordered = sorted(first, key=lambda k: (first[k] is not None, first[k] or 0.0,
                                           tuple((v is not None, v) for v in k)))
    size = batch_size or max(1, len(ordered))
    batches = [ordered[i:i + size] for i in range(0, len(ordered), size)]
    changes = [(row[:width], row[width], row[width + 1]) for row in rows
               if row[width] is not None and row[width + 1] is not None]
    marked: dict[str, set] = {}
    for key, _, name in changes:
        marked.setdefault(name, set()).add(key)
    oldest = []
    for batch in batches:
        members = set(batch)
        per_input: dict[str, float] = {}
        for key, ts, name in changes:
            if key in members:
                per_input[name] = min(ts, per_input.get(name, ts))
        oldest.append(per_input)
    return batches, {name: frozenset(keys) for name, keys in marked.items()}, oldest


def as_arrow(rows: list[tuple], types: list[pa.DataType]) -> pa.Table:
    width = len(types)
    columns = [pa.array([row[i] for row in rows], t) for i, t in enumerate(types)]
    columns += [pa.array([row[width] for row in rows], pa.float64()),
                pa.array([row[width + 1] for row in rows], pa.string())]
    return pa.table(columns, names=[*[f"k{i}" for i in range(width)], "update_ts", "_input_name"])


TIMES = st.sampled_from([None, 0.0, 1.0, 2.5, 1_700_000_000.25])
NAMES = st.sampled_from([None, "posts", "profiles"])
TEXT = st.text(alphabet="aAzé€ 0", max_size=3)


@settings(max_examples=200, deadline=None)
@given(data=st.data(), batch_size=st.sampled_from([None, 1, 2, 5]), two_columns=st.booleans())
def test_the_index_collected_as_arrow_or_as_tuples_is_batched_as_the_python_model_batches_it(
        data, batch_size, two_columns):
    types = [pa.string(), pa.int64()] if two_columns else [pa.string()]
    text, number = TEXT | st.none(), st.integers(-3, 3) | st.none()  # None: the NULL key
    key = st.tuples(text, number) if two_columns else st.tuples(text)
    rows = [(*k, ts, name) for k, ts, name in data.draw(st.lists(st.tuples(key, TIMES, NAMES), max_size=30))]
    width = len(types)
    expected = model(width, rows, batch_size)

    for collected in (as_arrow(rows, types), rows):
        local = local_from_rows([f"k{i}" for i in range(width)], collected, batch_size)
        assert (local.batches, local.marked_by, local.min_ts) == expected
        values = [value for batch in local.batches for key in batch for value in key]
        assert [type(value) for value in values] == [type(value) for batch in expected[0] for key in batch
                                                     for value in key]


def test_keys_of_dates_collected_as_tuples_keep_their_values_and_python_order():
    day = datetime.date(2024, 1, 1)
    rows = [(day + datetime.timedelta(days=3), 5.0, "posts"), (day, 5.0, "posts"),
            (day + datetime.timedelta(days=1), None, None), (day, 7.0, "profiles")]

    local = local_from_rows(["day"], rows, 2)

    assert local.batches == [[(day + datetime.timedelta(days=1),), (day,)], [(day + datetime.timedelta(days=3),)]]
    assert local.min_ts == [{"posts": 5.0, "profiles": 7.0}, {"posts": 5.0}]
    assert local.marked_by == {"posts": frozenset({(day,), (day + datetime.timedelta(days=3),)}),
                               "profiles": frozenset({(day,)})}
