"""Ingestion of a Kafka topic: a backlog of JSON messages, then a small increment.

A 3-partition topic on a throwaway noida-db broker (the tests' broker, `tests/kafka_broker.py`)
gets `--messages` JSON messages `{"event_id", "kind", "amount"}` keyed by `event_id`
(`--keys` distinct keys: most messages update a key already sent), one in 50 a tombstone
(the key, no value), one in 10,000 a value that does not fit (`"amount": "x"`). They are
ingested by `IngestionJob` + `KafkaSource(value_schema, message_key="event_id")` +
`KafkaOffsetPlanner` into a versioned table, quarantining the malformed ones, in one
`local[2]` session; then `--increment` more messages are ingested as one more range.
Reported: per load the seconds, ranges, messages and messages per second (read from the
broker, expanded, classified, written, committed), the Spark jobs and their seconds, and
the time the producer took. Writes `docs/bench/ingest/kafka.json`.

    .venv/bin/python -m bench.kafka_ingest                               # 5,000,000 + 10,000
    .venv/bin/python -m bench.kafka_ingest --messages 1000000 --out /tmp/kafka_1m.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from pyspark.sql import types as T

from bench.ingest import git_commit
from offset_assets.control_plane import connect
from offset_assets.ranges.ingestion import IngestionJob, RangeIngestion, TargetTable
from offset_assets.ranges.planners import KafkaOffsetPlanner
from offset_assets.ranges.sources.kafka import KafkaSource
from offset_assets.spark import get_spark_session
from offset_assets.spark_jobs import count_spark_jobs

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "bench" / "ingest" / "kafka.json"
PARTITIONS = 3
EVENT = T.StructType(
    [
        T.StructField("event_id", T.LongType(), False),
        T.StructField("kind", T.StringType()),
        T.StructField("amount", T.DoubleType()),
    ]
)


def produce(bootstrap_servers: str, topic: str, first: int, count: int, keys: int) -> float:
    """Messages `first`..`first + count - 1` sent to `topic`; the seconds it took."""
    from confluent_kafka import Producer

    producer = Producer(
        {
            "bootstrap.servers": bootstrap_servers,
            "linger.ms": 50,
            "batch.num.messages": 10_000,
            "queue.buffering.max.messages": 1_000_000,
            "log_level": 0,
        }
    )
    started = time.perf_counter()
    for n in range(first, first + count):
        key = str(n % keys)
        if n % 50 == 49:
            value = None  # a tombstone
        elif n % 10_000 == 5_000:
            value = json.dumps({"event_id": n % keys, "kind": "buy", "amount": "x"})  # does not fit
        else:
            value = json.dumps({"event_id": n % keys, "kind": "buy" if n % 3 else "view", "amount": n * 0.25})
        producer.produce(topic, key=key, value=value, partition=(n % keys) % PARTITIONS)
        if n % 100_000 == 0:
            producer.poll(0)
    if producer.flush(600):
        raise RuntimeError(f"messages to {topic} not delivered within 600 s")
    return time.perf_counter() - started


def timed_load(ingestion: RangeIngestion, run_id: str) -> dict:
    started = time.perf_counter()
    with count_spark_jobs(ingestion.spark) as jobs:
        results = ingestion.run_pending(run_id=run_id)
    seconds = time.perf_counter() - started
    messages = sum(r.rows_read for r in results)
    return {
        "seconds": round(seconds, 2),
        "messages": messages,
        "messages_per_s": round(messages / seconds),
        "ranges": len(results),
        "rows_quarantined": sum(r.rows_quarantined for r in results),
        "spark_jobs": jobs.count,
        "spark_job_s": round(sum(job.seconds or 0 for job in jobs.jobs), 2),
    }


def run(messages: int, increment: int, keys: int, workdir: Path) -> dict:
    sys.path.insert(0, str(ROOT))
    from tests.kafka_broker import KafkaBroker, noida_binary

    broker = KafkaBroker(noida_binary(), workdir / "kafka")
    broker.start()
    try:
        topic = broker.new_topic("bench-events", partitions=PARTITIONS)
        produced_s = produce(broker.bootstrap_servers, topic, 0, messages, keys)
        spark = get_spark_session(
            master="local[2]",
            app_name="bench-kafka-ingest",
            conf={"spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false"},
        )
        spark.sparkContext.setLogLevel("ERROR")
        try:
            # noida-db answers a fetch with everything from its offset, whatever the fetch's
            # size limits ask: a partition of 1.7M messages is one 116 MB response, beyond
            # librdkafka's default receive.message.max.bytes (100 MB). A Kafka broker keeps
            # to fetch.max.bytes and needs no such setting.
            source = KafkaSource(
                broker.bootstrap_servers, [topic], value_schema=EVENT, message_key="event_id", timeout_s=60.0,
                consumer_config={"receive.message.max.bytes": 1_000_000_000},
            )
            job = IngestionJob(
                "events",
                source,
                KafkaOffsetPlanner(),
                TargetTable("events", ["event_id"], EVENT),
                on_malformed="quarantine",
            )
            (workdir / "warehouse").mkdir()
            ingestion = RangeIngestion(
                spark, connect(f"sqlite:///{workdir / 'control_plane.db'}"), job, str(workdir / "warehouse")
            )
            backlog = timed_load(ingestion, "backlog")
            produce(broker.bootstrap_servers, topic, messages, increment, keys)
            return {
                "messages": messages,
                "increment_messages": increment,
                "keys": keys,
                "partitions": PARTITIONS,
                "driver_memory": spark.conf.get("spark.driver.memory", "1g"),
                "produced_s": round(produced_s, 2),
                "backlog": backlog,
                "increment": timed_load(ingestion, "increment"),
            }
        finally:
            spark.stop()
    finally:
        broker.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=5_000_000)
    parser.add_argument("--increment", type=int, default=10_000)
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--out", default=str(OUT))
    args = parser.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    with tempfile.TemporaryDirectory(prefix="bench-kafka-") as workdir:
        report = {
            "commit": git_commit(),
            "command": " ".join([".venv/bin/python -m bench.kafka_ingest", *sys.argv[1:]]),
            "cpus": os.cpu_count(),
            **run(args.messages, args.increment, args.keys, Path(workdir)),
        }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
