"""`offset-assets deltas TABLE`."""

from __future__ import annotations

import json

from click.testing import CliRunner

from offset_assets.cli import main
from offset_assets.control_plane import connect
from offset_assets.control_plane.delta_catalog import DeltaCatalog


def test_deltas_lists_committed_and_hot_deltas_newest_first(sqlite_url):
    catalog = DeltaCatalog(connect(sqlite_url))
    catalog.register_table("orders", ["id"], '{"type": "struct", "fields": []}')
    catalog.open_hot("orders", "ingest@host:1", "run-1", "/wh/orders/deltas/1")
    commit_ts = catalog.commit([("orders", 1, 120, 3)])
    catalog.open_hot("orders", "ingest@host:2", "run-2", "/wh/orders/deltas/2")
    runner = CliRunner()

    result = runner.invoke(main, ["--db-url", sqlite_url, "deltas", "orders"])

    assert result.exit_code == 0, result.output
    header, hot, committed = result.output.splitlines()
    assert header.split() == ["delta", "status", "committed", "at", "(UTC)", "upserted", "deleted", "run", "holder"]
    assert hot.split() == ["2", "hot", "-", "-", "-", "run-2", "ingest@host:2"]
    fields = committed.split()
    assert fields[:2] == ["1", "committed"] and fields[3:] == ["120", "3", "run-1", "ingest@host:1"]
    assert fields[2].endswith("Z")

    limited = runner.invoke(main, ["--db-url", sqlite_url, "deltas", "orders", "--limit", "1", "--json"])
    assert limited.exit_code == 0
    (line,) = limited.output.splitlines()
    assert json.loads(line)["status"] == "hot"
    as_json = runner.invoke(main, ["--db-url", sqlite_url, "deltas", "orders", "--json"])
    assert json.loads(as_json.output.splitlines()[1])["commit_ts"] == commit_ts


def test_deltas_of_an_unknown_table_is_one_clear_error(sqlite_url):
    DeltaCatalog(connect(sqlite_url)).register_table("orders", ["id"], "{}")
    result = CliRunner().invoke(main, ["--db-url", sqlite_url, "deltas", "ordres"])
    assert result.exit_code == 1
    assert "error: no versioned table 'ordres' in the delta catalog (tables: orders)" in result.output
    assert "Traceback" not in result.output


def test_deltas_of_a_table_without_deltas(sqlite_url):
    DeltaCatalog(connect(sqlite_url)).register_table("orders", ["id"], "{}")
    result = CliRunner().invoke(main, ["--db-url", sqlite_url, "deltas", "orders"])
    assert result.exit_code == 0 and "has no deltas yet" in result.output
