"""`offset-assets revert TABLE --to N`: the dry run, the revert, the question in between,
and its refusals in one line."""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from pyspark.sql.types import LongType, StringType, StructField, StructType

from offset_assets.cli import main
from offset_assets.control_plane import connect
from offset_assets.local_frames import local_frame
from offset_assets.versioned import VersionedTable

SCHEMA = StructType([StructField("id", LongType(), False), StructField("v", StringType())])


@pytest.fixture
def orders(spark, sqlite_url, warehouse) -> VersionedTable:
    """Delta 1: keys 1-3; delta 2, the bad load: 1 and 2 changed, 3 deleted, 4 and 5 added."""
    table = VersionedTable(spark, connect(sqlite_url), "orders", ["id"], SCHEMA, warehouse=warehouse)
    table.write_delta(local_frame(spark, [(1, "a"), (2, "b"), (3, "c")], SCHEMA))
    hot = table.open_delta(holder="partner")
    hot.write(local_frame(spark, [(1, "A"), (2, "B"), (4, "d"), (5, "e")], SCHEMA))
    hot.delete(local_frame(spark, [(3,)], "id long"))
    hot.commit()
    return table


def revert(sqlite_url: str, warehouse: str, *args: str, answer: str | None = None):
    command = ["--db-url", sqlite_url, "revert", "orders", *args, "--warehouse", warehouse]
    return CliRunner().invoke(main, command, input=answer)


def state(table: VersionedTable) -> dict:
    return {r.id: r.v for r in table.read_actual().collect()}


def test_the_dry_run_prints_the_keys_upserted_back_deleted_and_restored_and_writes_nothing(
    orders, sqlite_url, warehouse
):
    result = revert(sqlite_url, warehouse, "--to", "1", "--dry-run", "--sample", "1")

    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == [
        "orders: a revert to delta 1 undoes delta 2 (last committed: 2) as one new delta:",
        "  upserted back        2 key(s)  e.g. id=1, ...",
        "  deleted              2 key(s)  e.g. id=4, ...",
        "  restored             1 key(s)  e.g. id=3",
        "  ingestion ranges to mark REVERTED: none",
    ]
    assert orders.last_committed().delta_num == 2 and orders.hot() is None


def test_yes_reverts_and_without_it_the_command_asks_first(orders, sqlite_url, warehouse):
    declined = revert(sqlite_url, warehouse, "--to", "1", answer="n\n")
    assert declined.exit_code == 1 and "Revert orders to delta 1? [y/N]: n" in declined.output
    assert orders.last_committed().delta_num == 2

    result = revert(sqlite_url, warehouse, "--to", "1", "--yes")

    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == [
        "orders: reverted to delta 1 as delta 3 (undoes delta 2): 2 upserted back, 2 deleted, 1 restored",
        "  ingestion ranges marked REVERTED: none",
    ]
    assert state(orders) == {1: "a", 2: "b", 3: "c"}
    again = revert(sqlite_url, warehouse, "--to", "3", "--dry-run")
    assert again.output == "orders: at delta 3 already (its last committed delta): nothing to revert\n"


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (
            ["--to", "7", "--yes"],
            "error: table 'orders': cannot revert to delta 7: it does not exist (last committed: 2)",
        ),
        (["--to", "1", "--yes", "--dry-run"], "Error: --dry-run and --yes exclude each other"),
    ],
)
def test_a_revert_that_cannot_be_done_is_one_line_and_changes_nothing(orders, sqlite_url, warehouse, args, error):
    result = revert(sqlite_url, warehouse, *args)

    assert result.exit_code != 0
    assert result.output.strip().splitlines()[-1] == error and "Traceback" not in result.output
    assert orders.last_committed().delta_num == 2 and orders.hot() is None
