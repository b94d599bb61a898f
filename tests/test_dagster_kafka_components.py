"""The Kafka pipeline of the guide's section 11 written entirely as Dagster components
(`examples/components/kafka_events/`): a topic ingested by an `IngestionJobComponent`
(its `value_columns`, `message_key`, `on_malformed` and `max_malformed_share`), the totals
by an `IncrementalAssetComponent`. It builds what the Python form builds
(`examples/kafka_events/`), runs on Spark against the test broker, and `dg list defs` and
`dg check defs` load it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest

from examples.kafka_events.definitions import build_definitions
from offset_assets.config import ENV_DB_URL, ENV_HOME, ENV_WAREHOUSE, default_db_url
from offset_assets.control_plane import database
from offset_assets.dagster_adapter import ingest_due_ranges, load_defs_folder
from offset_assets.dagster_adapter.asset_spec import SPEC_KEY

ROOT = Path(__file__).resolve().parents[1]
PROJECT = ROOT / "examples" / "components" / "kafka_events"
DG = Path(sys.executable).parent / "dg"


@pytest.fixture
def components(tmp_path, monkeypatch):
    """The project's definitions for `topic` on `bootstrap_servers` (its environment
    variables), control plane and warehouse under ./state."""
    monkeypatch.setenv(ENV_HOME, str(tmp_path / "state"))
    monkeypatch.delenv(ENV_DB_URL, raising=False)
    monkeypatch.delenv(ENV_WAREHOUSE, raising=False)
    monkeypatch.syspath_prepend(str(PROJECT))

    def load(bootstrap_servers: str, topic: str) -> dg.Definitions:
        monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", bootstrap_servers)
        monkeypatch.setenv("ORDER_EVENTS_TOPIC", topic)
        return load_defs_folder(PROJECT / "kafka_components")

    yield load
    database.forget(default_db_url())


def test_the_components_build_what_the_python_form_builds(components):
    defs = components("localhost:9092", "order-events")
    python = build_definitions("localhost:9092", "order-events")
    for name in ("order_events", "customer_totals"):
        component, expected = defs.get_assets_def(name), python.get_assets_def(name)
        key = dg.AssetKey(name)
        # Dagster adds where a component was declared (code references, its origin).
        declared = {
            k: v
            for k, v in component.metadata_by_key[key].items()
            if k not in ("dagster/code_references", "dagster/component_origin")
        }
        assert declared == expected.metadata_by_key[key]
        assert component.partitions_def == expected.partitions_def
        assert [spec.name for spec in component.check_specs] == [spec.name for spec in expected.check_specs]
    assert SPEC_KEY in defs.get_assets_def("customer_totals").metadata_by_key[dg.AssetKey("customer_totals")]
    assert [s.name for s in defs.sensors] == [s.name for s in python.sensors] == ["order_events_ranges_sensor"]


def send_orders(broker, topic: str, *orders: tuple[int, int, object], partition: int = 0) -> None:
    broker.send(
        topic,
        [(str(o), json.dumps({"order_id": o, "customer_id": c, "amount_cents": a})) for o, c, a in orders],
        partition=partition,
    )


def totals(defs: dg.Definitions) -> dict[int, tuple[int, int]]:
    table = defs.resources["incremental_engine"].table(dg.AssetKey("customer_totals"))
    return {r.customer_id: (r.orders, r.amount_cents) for r in table.read_actual().collect()}


def test_the_components_ingest_the_topic_and_recompute_only_the_customers_whose_events_arrived(
    kafka_broker, spark, components
):
    topic = kafka_broker.new_topic("order-events", partitions=2)
    defs = components(kafka_broker.bootstrap_servers, topic)
    customer_totals = defs.get_assets_def("customer_totals")
    send_orders(kafka_broker, topic, (1, 7, 1000), (2, 8, 500))
    send_orders(kafka_broker, topic, (3, 7, 250), partition=1)
    with dg.instance_for_test() as instance:
        [first] = ingest_due_ranges(defs, "order_events", instance)
        assert (first, first.rows_read, first.rows_upserted, first.rows_quarantined) == ("kafka:earliest", 3, 3, 0)
        dg.materialize([customer_totals], instance=instance, resources=defs.resources)
        assert totals(defs) == {7: (2, 1250), 8: (1, 500)}

        # Customer 9's first order, and an amount that is no integer: set aside, counted.
        send_orders(kafka_broker, topic, (4, 9, 300), (5, 8, 12.34), partition=1)
        [second] = ingest_due_ranges(defs, "order_events", instance)
        assert (second, second.rows_read, second.rows_upserted, second.rows_quarantined) == (
            f"kafka:{topic}/0@2,{topic}/1@1",
            2,
            1,
            1,
        )
        result = dg.materialize([customer_totals], instance=instance, resources=defs.resources)
    [materialization] = result.asset_materializations_for_node("customer_totals")
    assert (materialization.metadata["changed_keys"].value, materialization.metadata["processed_keys"].value) == (1, 1)
    assert totals(defs) == {7: (2, 1250), 8: (1, 500), 9: (1, 300)}


def test_dg_lists_and_checks_the_kafka_components():
    listed = subprocess.run(
        [str(DG), "list", "defs", "--json"], cwd=PROJECT, capture_output=True, text=True, timeout=900
    )
    assert listed.returncode == 0, listed.stderr[-3000:]
    found = json.loads(listed.stdout)
    assert {a["asset_key"]: a["source"] for a in found["assets"]} == {
        name: f"kafka_components/defs/{name}/defs.yaml:5"
        if name == "order_events"
        else f"kafka_components/defs/{name}/defs.yaml:2"
        for name in ("order_events", "customer_totals")
    }
    assert sorted(c["key"] for c in found["asset_checks"]) == [
        "customer_totals:offset_age",
        "customer_totals:offset_backlog",
        "order_events:malformed_records",
    ]
    assert {s["name"] for s in found["sensors"]} == {"order_events_ranges_sensor"}

    checked = subprocess.run([str(DG), "check", "defs"], cwd=PROJECT, capture_output=True, text=True, timeout=900)
    assert checked.returncode == 0, checked.stderr[-3000:]
    assert "All definitions loaded successfully." in checked.stdout + checked.stderr
