"""A commit time as the command line prints it names its own delta: typed back into
`show --as-of`, a SQL `AS OF '<time>'`, `VersionedTables.read(as_of=...)` or
`read_arrow(as_of=...)`, it selects that delta, never the one before
(`offset_assets/control_plane/delta_catalog/commit_times.py`)."""

from __future__ import annotations

import json

from pyspark.sql.types import LongType, StringType, StructField, StructType

from offset_assets.control_plane import connect
from offset_assets.local_frames import local_frame
from offset_assets.reading.arrow import read_arrow
from offset_assets.reading.tables import VersionedTables
from offset_assets.versioned.table import VersionedTable
from tests.test_cli_reading import installed

ROWS = StructType([StructField("k", LongType(), False), StructField("v", StringType())])
ROWS_OP = StructType([*ROWS.fields, StructField("sys_op", LongType())])
DELTAS = 8


def test_each_printed_commit_time_selects_its_own_delta_in_every_read(spark, sqlite_url, warehouse):
    # Eight deltas back to back, delta n inserting key n: the state as of delta n holds keys 1..n.
    table = VersionedTable(spark, connect(sqlite_url), "t", ["k"], ROWS, warehouse=warehouse)
    for n in range(1, DELTAS + 1):
        table.write_delta(local_frame(spark, [(n, f"v{n}", 0)], ROWS_OP))
    listed = installed("--db-url", sqlite_url, "deltas", "t")
    as_json = installed("--db-url", sqlite_url, "deltas", "t", "--json")
    assert listed.returncode == 0 and as_json.returncode == 0, listed.stderr + as_json.stderr
    printed = {int(line.split()[0]): line.split()[2] for line in listed.stdout.splitlines()[1:]}
    objects = {row["delta_num"]: row for row in map(json.loads, as_json.stdout.splitlines())}
    assert sorted(printed) == sorted(objects) == list(range(1, DELTAS + 1))

    def keys(rows) -> list[int]:
        return sorted(row["k"] for row in rows)

    expected = {n: list(range(1, n + 1)) for n in printed}

    def shown_as_of(time: str) -> list[int]:
        shown = installed("--db-url", sqlite_url, "show", "t", "--as-of", time, "--format", "json")
        return keys(map(json.loads, shown.stdout.splitlines()))

    shown = {n: shown_as_of(printed[n]) for n in printed}
    union = " UNION ALL ".join(f"SELECT {n} AS delta, k FROM t FOR SYSTEM_TIME AS OF '{printed[n]}'" for n in printed)
    through_sql = installed("--db-url", sqlite_url, "sql", union, "--format", "json", "--limit", "0")
    assert through_sql.returncode == 0, through_sql.stderr
    by_sql: dict[int, list[int]] = {n: [] for n in printed}
    for row in map(json.loads, through_sql.stdout.splitlines()):
        by_sql[row["delta"]].append(row["k"])
    tables = VersionedTables(spark, sqlite_url)
    read = {n: keys(row.asDict() for row in tables.read("t", as_of=printed[n]).collect()) for n in printed}
    read_epoch = {
        n: keys(row.asDict() for row in tables.read("t", as_of=objects[n]["commit_ts"]).collect()) for n in printed
    }
    arrow = {n: keys(read_arrow(sqlite_url, "t", as_of=printed[n]).to_pylist()) for n in printed}
    arrow_epoch = {n: keys(read_arrow(sqlite_url, "t", as_of=objects[n]["commit_ts"]).to_pylist()) for n in printed}

    assert shown == expected
    assert {n: sorted(k) for n, k in by_sql.items()} == expected
    assert read == read_epoch == expected
    assert arrow == arrow_epoch == expected
    # `--json` prints the same time as text beside the epoch seconds.
    assert {n: objects[n]["committed_at"] for n in printed} == printed
