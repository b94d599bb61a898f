"""The Kafka example (`examples/kafka_events/`) runs as its docstrings say, in real Dagster
runs on real Spark against the test broker: order events ingested range by range into a
versioned table, and the per-customer totals recomputed only for the customers whose
events arrived."""

from __future__ import annotations

import json

import dagster as dg
import pytest

from examples.kafka_events.definitions import build_definitions
from examples.kafka_events.run import update_totals
from offset_assets.config import ENV_DB_URL, ENV_HOME, ENV_WAREHOUSE, default_db_url
from offset_assets.control_plane import database
from offset_assets.dagster_adapter import ingest_due_ranges


@pytest.fixture
def state(tmp_path, monkeypatch):
    """Control plane and warehouse under ./state, the defaults the example's resources use."""
    monkeypatch.setenv(ENV_HOME, str(tmp_path / "state"))
    monkeypatch.delenv(ENV_DB_URL, raising=False)
    monkeypatch.delenv(ENV_WAREHOUSE, raising=False)
    yield tmp_path
    database.forget(default_db_url())


def send_orders(broker, topic: str, *orders: tuple[int, int, int], partition: int = 0) -> None:
    """Order events keyed by order id, as the example's topic is."""
    broker.send(topic, [(str(o), json.dumps({"order_id": o, "customer_id": c, "amount_cents": a}))
                        for o, c, a in orders], partition=partition)


def cancel_orders(broker, topic: str, *order_ids: int, partition: int = 0) -> None:
    """Tombstones: an order's key and no value."""
    broker.send(topic, [(str(o), None) for o in order_ids], partition=partition)


def totals(defs: dg.Definitions) -> dict[int, tuple[int, int]]:
    table = defs.resources["incremental_engine"].table(dg.AssetKey("customer_totals"))
    return {r.customer_id: (r.orders, r.amount_cents) for r in table.read_actual().collect()}


def test_order_events_are_ingested_range_by_range_and_totals_follow_only_the_changed_customers(
        kafka_broker, spark, state):
    topic = kafka_broker.new_topic("order-events", partitions=2)
    defs = build_definitions(kafka_broker.bootstrap_servers, topic)
    send_orders(kafka_broker, topic, (1, 7, 1000), (2, 8, 500))
    send_orders(kafka_broker, topic, (3, 7, 250), partition=1)
    with dg.instance_for_test() as instance:
        assert ingest_due_ranges(defs, "order_events", instance) == ["kafka:earliest"]
        first = update_totals(defs, instance)
        assert totals(defs) == {7: (2, 1250), 8: (1, 500)}
        assert first["processed_keys"] == 2

        # Customer 9's first order and one more of 8's; customer 7 is not read again.
        send_orders(kafka_broker, topic, (4, 9, 300), (5, 8, 100), partition=1)
        assert ingest_due_ranges(defs, "order_events", instance) == [f"kafka:{topic}/0@2,{topic}/1@1"]
        second = update_totals(defs, instance)
        assert totals(defs) == {7: (2, 1250), 8: (2, 600), 9: (1, 300)}
        assert (second["changed_keys"], second["processed_keys"]) == (2, 2)
        assert ingest_due_ranges(defs, "order_events", instance) == []

        # An order sent again replaces its row (twice in one range: the last one wins), and
        # a cancelled order (a tombstone) leaves its customer's total.
        send_orders(kafka_broker, topic, (1, 7, 1100), (1, 7, 1500), partition=0)
        cancel_orders(kafka_broker, topic, 5, partition=1)
        assert ingest_due_ranges(defs, "order_events", instance) == [f"kafka:{topic}/0@2,{topic}/1@3"]
        update_totals(defs, instance)
        assert totals(defs) == {7: (2, 1750), 8: (1, 500), 9: (1, 300)}
