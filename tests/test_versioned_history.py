"""Every read of a versioned table against a plain Python model of versioned tables, over
histories of upserts and deletes, before and after compaction."""

from __future__ import annotations

import random
import uuid
from collections import defaultdict
from functools import reduce

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType

from offset_assets.control_plane import connect
from offset_assets.versioned import VersionedTable
from offset_assets.versioned.compaction import compact

SCHEMA = StructType([StructField("id", LongType(), False), StructField("v", StringType())])
INPUT = StructType([*SCHEMA.fields, StructField("sys_op", LongType())])
VERSION = ["id", "v", "sys_from", "sys_to", "sys_op"]


class VersionsModel:
    """Versions of each key (hot, actual, archive; deltas and tombstones), in plain Python."""

    def __init__(self) -> None:
        self.versions: list[tuple[int, str | None, int, int]] = []  # (id, v, sys_from, sys_op)

    def commit(self, delta: int, writes: dict[int, tuple[int, str | None]]) -> None:
        before = self.actual(delta - 1)
        for key, (op, value) in writes.items():
            if op == 0 and (key not in before or before[key] != value):
                self.versions.append((key, value, delta, 0))
            elif op == 1 and key in before:
                self.versions.append((key, before[key], delta, 1))  # tombstone: last data

    def actual(self, n: int) -> dict[int, str | None]:
        latest = {}
        for key, value, delta, op in sorted(self.versions, key=lambda v: v[2]):
            if delta <= n:
                latest[key] = (value, op)
        return {key: value for key, (value, op) in latest.items() if op == 0}

    def actual_rows(self, n: int) -> list[tuple]:
        froms = {(k, d) for k, _, d, _ in self.versions}
        rows = []
        for key, value in self.actual(n).items():
            since = max(d for k, d in froms if k == key and d <= n)
            rows.append((key, value, since, None, 0))
        return sorted(rows, key=repr)

    def history(self, d1: int, d2: int, op: int | None = None) -> list[tuple]:
        """Versions created in d1..d2; sys_to as seen at d2."""
        inside = sorted((v for v in self.versions if d1 <= v[2] <= d2), key=lambda v: v[2])
        rows = []
        for i, (key, value, delta, version_op) in enumerate(inside):
            later = [v[2] for v in inside[i + 1 :] if v[0] == key]
            rows.append((key, value, delta, later[0] - 1 if later else None, version_op))
        return sorted((r for r in rows if op is None or r[4] == op), key=repr)


def collect_many(frames: dict[str, DataFrame], commit_ts: dict[int, float]) -> dict[str, list]:
    """Collect many reads in one Spark job; checks update_ts = commit_ts of sys_from."""
    tagged = [df.select(*VERSION, "update_ts", F.lit(name).alias("_check")) for name, df in frames.items()]
    found: dict[str, list] = defaultdict(list)
    for row in reduce(DataFrame.unionByName, tagged).collect():
        assert row.update_ts == commit_ts[row.sys_from], row
        found[row._check].append(tuple(row)[:5])
    return {name: sorted(found[name], key=repr) for name in frames}


def write_history(
    spark, table: VersionedTable, model: VersionsModel, deltas: list[list[tuple]], compact_after: set[int] = frozenset()
) -> dict[int, float]:
    commit_ts = {}
    for rows in deltas:
        info = table.write_delta(spark.createDataFrame(rows, INPUT))
        writes = {key: (op, value) for key, value, op in rows}
        model.commit(info.delta_num, writes)
        commit_ts[info.delta_num] = info.commit_ts
        # The catalog counts the actual rows at each commit: the model's, without a Spark job.
        assert info.actual_rows == len(model.actual(info.delta_num))
        assert table.catalog.actual_rows([table.name]) == {table.name: info.actual_rows}
        if info.delta_num in compact_after:
            assert compact(table) == info.delta_num
    return commit_ts


def check_all_reads(table: VersionedTable, model: VersionsModel, commit_ts: dict[int, float]) -> None:
    last = max(commit_ts)
    expected: dict[str, list] = {}
    frames: dict[str, DataFrame] = {}
    for n in range(0, last + 1):
        frames[f"actual@{n}"] = table.read_actual(as_of_delta=n)
        expected[f"actual@{n}"] = model.actual_rows(n)
    for n, ts in commit_ts.items():
        frames[f"ts@{n}"] = table.read_as_of_timestamp(ts)
        expected[f"ts@{n}"] = model.actual_rows(n)
        frames[f"ts-before@{n}"] = table.read_as_of_timestamp(ts - 1e-4)
        expected[f"ts-before@{n}"] = model.actual_rows(n - 1)
        frames[f"changes-since@{n}"] = table.read_changes_since(ts)
        expected[f"changes-since@{n}"] = model.history(n, last)
        frames[f"changes-since@{n}-up-to-{n}"] = table.read_changes_since(ts, up_to_delta=n)
        expected[f"changes-since@{n}-up-to-{n}"] = model.history(n, n)
    ranges = {(k, k) for k in commit_ts} | {(1, last), (2, max(2, last - 1))}
    for d1, d2 in ranges:
        frames[f"started{d1}-{d2}"] = table.read_started_in(d1, d2)
        expected[f"started{d1}-{d2}"] = model.history(d1, d2, op=0)
        frames[f"finished{d1}-{d2}"] = table.read_finished_in(d1, d2)
        expected[f"finished{d1}-{d2}"] = model.history(d1, d2, op=1)
    assert collect_many(frames, commit_ts) == expected


def random_history(seed: int, deltas: int, keys: int = 8) -> list[list[tuple]]:
    rng = random.Random(seed)
    history = []
    for _ in range(deltas):
        rows = []
        for key in rng.sample(range(keys), rng.randint(1, keys - 2)):
            op = 1 if rng.random() < 0.3 else 0
            rows.append((key, rng.choice(["a", "b", None]), op))
        rows += rows[: rng.randint(0, 2)]  # exact duplicates collapse
        history.append(rows)
    return history


@pytest.fixture
def table(spark, sqlite_url, warehouse) -> VersionedTable:
    return VersionedTable(spark, connect(sqlite_url), "events", ["id"], SCHEMA, warehouse=warehouse)


def test_every_read_matches_the_plain_python_model_before_and_after_compaction(spark, table):
    model = VersionsModel()
    commit_ts = write_history(spark, table, model, random_history(seed=3, deltas=6), {3})
    check_all_reads(table, model, commit_ts)

    assert compact(table) == 6
    check_all_reads(table, model, commit_ts)


@pytest.fixture(scope="module")
def shared_plane(tmp_path_factory):
    root = tmp_path_factory.mktemp("history")
    return connect(f"sqlite:///{root / 'cp.db'}"), str(root / "warehouse")


delta_strategy = st.lists(
    st.tuples(st.integers(0, 4), st.sampled_from(["a", "b", None]), st.sampled_from([0, 0, 1])),
    min_size=1,
    max_size=5,
    unique_by=lambda row: row[0],
)


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(history=st.lists(delta_strategy, min_size=1, max_size=3))
def test_property_actual_and_history_reads_match_the_model(spark, shared_plane, history):
    plane, warehouse = shared_plane
    name = f"prop_{uuid.uuid4().hex[:8]}"
    table = VersionedTable(spark, plane, name, ["id"], SCHEMA, warehouse=warehouse)
    model = VersionsModel()
    commit_ts = write_history(spark, table, model, history)
    last = max(commit_ts)
    frames = {f"actual@{n}": table.read_actual(as_of_delta=n) for n in range(last + 1)}
    frames["all"] = table.read_changes_since(0)
    expected = {f"actual@{n}": model.actual_rows(n) for n in range(last + 1)}
    expected["all"] = model.history(1, last)
    assert collect_many(frames, commit_ts) == expected
