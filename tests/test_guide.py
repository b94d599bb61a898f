"""The guide "Your first incremental pipeline" (`docs/guide.md`) holds: the code it shows is
the example package `examples/first_pipeline/` itself, and the story it tells runs, in real
Dagster runs on real Spark: a first run, a change at the source, a second run that
processes only the affected keys, a reset, and the command-line tool reading it all."""

from __future__ import annotations

import json
import re
import sqlite3
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path

import dagster as dg
import pytest
from click.testing import CliRunner

from examples.first_pipeline import definitions as example
from examples.first_pipeline.run import ingest_customers, run_transformations
from examples.first_pipeline.source import change_source, create_source
from offset_assets.cli import main as cli
from offset_assets.config import ENV_DB_URL, ENV_HOME, ENV_WAREHOUSE, default_db_url
from offset_assets.control_plane import database
from offset_assets.dagster_adapter import RESET_TAG, ingest_due_ranges

ROOT = Path(__file__).resolve().parent.parent
GUIDE = ROOT / "docs" / "guide.md"
EXAMPLE = ROOT / "examples" / "first_pipeline"
# The examples whose files the guide shows whole: its pipeline and, in section 11, Kafka.
SHOWN_EXAMPLES = [EXAMPLE, ROOT / "examples" / "kafka_events"]
# A code block the guide takes from a file: the marker line, then the fenced block.
FILE_BLOCK = re.compile(r"^<!-- file: (\S+) -->\n```python\n(.*?)^```$", re.MULTILINE | re.DOTALL)


def guide_files() -> dict[str, str]:
    """Per file the guide shows, its blocks in the guide's order, joined by the two blank
    lines that separate top-level definitions (where the guide cuts a file)."""
    blocks: dict[str, list[str]] = defaultdict(list)
    for path, code in FILE_BLOCK.findall(GUIDE.read_text()):
        blocks[path].append(code)
    return {path: "\n\n".join(parts) for path, parts in blocks.items()}


def test_the_guide_shows_every_file_of_the_example_exactly_as_it_is():
    shown = guide_files()
    example_files = {str(p.relative_to(ROOT)) for example in SHOWN_EXAMPLES
                     for p in example.glob("*.py") if p.name != "__init__.py"}
    assert set(shown) == example_files
    for path, code in shown.items():
        assert code == (ROOT / path).read_text(), f"docs/guide.md shows {path} differently from the file"


def source_rows(url: str) -> tuple[dict[int, str], list[tuple[int, int, int]]]:
    """The source as it is now, read without Spark or the pipeline: customer -> country,
    and (order_id, customer_id, amount_cents) per order."""
    with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
        countries = dict(conn.execute("SELECT customer_id, country FROM customers"))
        orders = list(conn.execute("SELECT order_id, customer_id, amount_cents FROM orders"))
    return countries, orders


def revenue_from_scratch(url: str) -> dict[str, tuple[int, int]]:
    """Orders and revenue per country, computed in plain Python over the source rows."""
    countries, orders = source_rows(url)
    totals: dict[str, tuple[int, int]] = {}
    for _, customer_id, amount in orders:
        count, revenue = totals.get(countries[customer_id], (0, 0))
        totals[countries[customer_id]] = (count + 1, revenue + amount)
    return totals


def table_rows(defs: dg.Definitions, asset: str) -> list[dict]:
    table = defs.resources["incremental_engine"].table(dg.AssetKey(asset))
    return [row.asDict() for row in table.read_actual().collect()]


def revenue_table(defs: dg.Definitions) -> dict[str, tuple[int, int]]:
    return {r["country"]: (r["orders"], r["revenue_cents"]) for r in table_rows(defs, "revenue_by_country")}


def counts(report: dict[str, dict], *names: str) -> dict[str, tuple]:
    return {asset: tuple(metadata[name] for name in names) for asset, metadata in sorted(report.items())}


@pytest.fixture
def state(tmp_path, monkeypatch):
    """The guide's folder: control plane and warehouse under ./state (the defaults the
    example's resources use), the shop's database beside it."""
    monkeypatch.setenv(ENV_HOME, str(tmp_path / "state"))
    monkeypatch.delenv(ENV_DB_URL, raising=False)
    monkeypatch.delenv(ENV_WAREHOUSE, raising=False)
    yield tmp_path
    database.forget(default_db_url())


def test_the_guides_story_recomputes_only_the_affected_keys_and_equals_a_recompute_from_scratch(
        spark, state):
    today = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0, tzinfo=None)
    day = today.strftime("%Y-%m-%d")
    url = f"sqlite:///{state / 'shop.db'}"
    defs = example.build_definitions(url, today)
    with dg.instance_for_test() as instance:
        # Rows stamped in today's window whenever the test runs (past midnight too).
        create_source(url, at=today.replace(tzinfo=UTC).timestamp())
        assert ingest_due_ranges(defs, "orders", instance) == ["id:0-6"]
        assert ingest_customers(defs, instance, day)["rows_upserted"] == 4
        first = run_transformations(defs, instance)
        assert revenue_table(defs) == revenue_from_scratch(url) == {
            "DE": (2, 14_500), "FR": (3, 19_900), "IT": (1, 7_000)}
        assert counts(first, "mode", "processed_keys") == {
            "enriched_orders": ("incremental", 6), "large_orders": ("incremental", 6),
            "revenue_by_country": ("incremental", 3), "small_orders": ("incremental", 6)}
        italy = next(r for r in table_rows(defs, "revenue_by_country") if r["country"] == "IT")

        # Bob moves from FR to DE, Eve (ES) joins; Eve's first order and one more of Ann's.
        change_source(url, at=today.replace(tzinfo=UTC).timestamp() + 60)
        assert ingest_due_ranges(defs, "orders", instance) == ["id:6-8"]
        # Bob's new row and Eve's; the three customers that did not change create no version.
        ingested = ingest_customers(defs, instance, day)
        assert (ingested["rows_read"], ingested["rows_upserted"], ingested["rows_unchanged"]) == (5, 2, 3)
        second = run_transformations(defs, instance)
        large, small = second["large_orders"], second["small_orders"]
        assert (large["rows_read.orders"], large["rows_written.large_orders"], small["rows_written.small_orders"]) == (
            2, 1, 1)
        assert revenue_table(defs) == revenue_from_scratch(url) == {
            "DE": (4, 19_500), "ES": (1, 30_000), "FR": (2, 15_900), "IT": (1, 7_000)}
        # Orders 7 and 8 are new, order 3 is Bob's (its country changed); the countries of
        # those orders, FR included (order 3 left it), are recomputed; IT is not. The split's
        # two outputs report the keys of their one transformation (orders 7 and 8).
        assert counts(second, "mode", "changed_keys", "processed_keys") == {
            "enriched_orders": ("incremental", 3, 3), "large_orders": ("incremental", 2, 2),
            "revenue_by_country": ("incremental", 3, 3), "small_orders": ("incremental", 2, 2)}
        # Filtered join: the customers of the three orders only (Ann, Bob, Eve), not all five.
        enriched = second["enriched_orders"]
        assert (enriched["rows_read.orders"], enriched["rows_read.customers"]) == (3, 3)
        assert second["revenue_by_country"]["rows_read.enriched_orders"] == 7  # DE, ES, FR orders
        assert next(r for r in table_rows(defs, "revenue_by_country") if r["country"] == "IT") == italy
        assert {r["order_id"]: r["country"] for r in table_rows(defs, "enriched_orders")} == {
            1: "DE", 2: "DE", 3: "DE", 4: "FR", 5: "FR", 6: "IT", 7: "ES", 8: "DE"}

        # The reset of the UI (tag offset_assets/reset): every country again, same result.
        reset = dg.materialize([example.revenue_by_country], instance=instance, resources=defs.resources,
                               tags={RESET_TAG: "true"})
        [event] = reset.asset_materializations_for_node("revenue_by_country")
        assert (event.metadata["mode"].value, event.metadata["processed_keys"].value) == ("reprocess", 4)
        assert revenue_table(defs) == revenue_from_scratch(url)

    # The command line of the guide, on the control plane the runs wrote (./state).
    runner = CliRunner()
    offsets = runner.invoke(cli, ["offsets"])
    assert offsets.exit_code == 0, offsets.output
    assert {tuple(line.split()[:2]) for line in offsets.output.splitlines()[1:]} == {
        ("enriched_orders", "customers"), ("enriched_orders", "orders"), ("order_sizes", "orders"),
        ("revenue_by_country", "enriched_orders")}
    jobs = runner.invoke(cli, ["jobs", "orders", "--json"])
    assert jobs.exit_code == 0, jobs.output
    assert [(r["data_range_start"], r["data_range_end"], r["status"])
            for r in map(json.loads, jobs.output.splitlines())] == [("6", "8", "SUCCESS"), ("0", "6", "SUCCESS")]
    deltas = runner.invoke(cli, ["deltas", "revenue_by_country", "--json"])
    assert deltas.exit_code == 0, deltas.output
    # One delta per run; the reset's changed no row (every country kept its values).
    assert [(d["delta_num"], d["status"], d["rows_upserted"]) for d in map(json.loads, deltas.output.splitlines())] == [
        (3, "committed", 0), (2, "committed", 3), (1, "committed", 3)]
