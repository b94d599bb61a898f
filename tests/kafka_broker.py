"""A real Kafka-protocol broker for the Kafka ingestion tests: noida-db (one binary from
the `noida-db` wheel, no JVM), started once per test session on a free local port.

Each test creates its own topics (`kafka_broker.new_topic`), so tests share the broker
without seeing each other's messages. `stop` and `start` keep the data directory and the
port: a test can take the broker away mid-run and bring it back with its log intact.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
START_TIMEOUT_S = 20.0


def noida_binary() -> Path:
    """The broker binary the `noida-db` wheel ships (its console script only wraps it)."""
    from importlib.resources import files

    import noida_db

    path = Path(str(files(noida_db).joinpath("noida-db")))
    if not path.is_file():
        raise FileNotFoundError(f"the noida-db wheel has no binary at {path}")
    path.chmod(0o755)
    return path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class KafkaBroker:
    """One noida-db process serving Kafka on 127.0.0.1:`port`, data in `data_dir`."""

    binary: Path
    data_dir: Path
    port: int = field(default_factory=free_port)
    process: subprocess.Popen | None = None

    @property
    def bootstrap_servers(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.data_dir.parent / f"{self.data_dir.name}.log"

    def start(self) -> None:
        """Start the broker and wait until it answers a metadata request."""
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                [str(self.binary), "start", "--only", "kafka", "--kafka-port", str(self.port),
                 "--data-dir", str(self.data_dir)],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            )
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self._answers():
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(
                    f"noida-db did not serve Kafka on {self.bootstrap_servers} within "
                    f"{START_TIMEOUT_S:.0f} s; its log {self.log_path}:\n{self.log_path.read_text()[-2000:]}"
                )
            time.sleep(0.1)

    def _answers(self) -> bool:
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import AdminClient

        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                pass
            AdminClient({"bootstrap.servers": self.bootstrap_servers}).list_topics(timeout=2)
        except (OSError, KafkaException):
            return False
        return True

    def stop(self) -> None:
        if self.process is None:
            return
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)
        self.process = None

    # -- what the tests do with it -------------------------------------------------------

    def new_topic(self, prefix: str, partitions: int = 1) -> str:
        """A topic of this test's own (a unique name), created with `partitions` partitions."""
        from confluent_kafka.admin import AdminClient, NewTopic

        name = f"{prefix}-{uuid.uuid4().hex[:8]}"
        admin = AdminClient({"bootstrap.servers": self.bootstrap_servers})
        admin.create_topics([NewTopic(name, partitions, 1)])[name].result(10)
        return name

    def add_partitions(self, topic: str, total: int) -> None:
        from confluent_kafka.admin import AdminClient, NewPartitions

        admin = AdminClient({"bootstrap.servers": self.bootstrap_servers})
        admin.create_partitions([NewPartitions(topic, total)])[topic].result(10)

    def delete_records_before(self, topic: str, partition: int, offset: int) -> None:
        """What retention does: the partition's log starts at `offset` from now on."""
        from confluent_kafka import TopicPartition
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": self.bootstrap_servers})
        for future in admin.delete_records([TopicPartition(topic, partition, offset)]).values():
            future.result(10)

    def produce(self, topic: str, values: Sequence[str], partition: int = 0) -> None:
        """Plain (idempotent) messages, keyed by their value, flushed before returning."""
        from confluent_kafka import Producer

        producer = Producer({"bootstrap.servers": self.bootstrap_servers, "enable.idempotence": True})
        for value in values:
            producer.produce(topic, key=value, value=value, partition=partition)
        if producer.flush(10):
            raise RuntimeError(f"messages to {topic}[{partition}] not delivered within 10 s")

    def transactional_producer(self) -> TransactionalProducer:
        """One transactional producer (one transactional.id) for several transactions."""
        return TransactionalProducer(self.bootstrap_servers)

    def read(self, topic: str, partition: int, start: int, stop: int,
             isolation: str = "read_committed") -> list[tuple[int, str]]:
        """(offset, value) of the messages a plain confluent-kafka consumer gets from
        offsets [start, stop) of a partition: what the broker itself returns, to compare a
        range with."""
        from confluent_kafka import Consumer, KafkaError, TopicPartition

        consumer = Consumer({"bootstrap.servers": self.bootstrap_servers, "group.id": "plain-reader",
                             "isolation.level": isolation, "enable.partition.eof": True,
                             "enable.auto.commit": False, "auto.offset.reset": "error"})
        messages: list[tuple[int, str]] = []
        try:
            consumer.assign([TopicPartition(topic, partition, start)])
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                message = consumer.poll(1.0)
                if message is None:
                    continue
                if message.error() is not None:
                    if message.error().code() != KafkaError._PARTITION_EOF:
                        raise RuntimeError(message.error().str())
                    return messages
                if message.offset() >= stop:
                    return messages
                messages.append((message.offset(), message.value().decode()))
            raise RuntimeError(f"{topic}[{partition}]: no end of partition within 10 s from offset {start}")
        finally:
            consumer.close()

    def send(self, topic: str, messages: Sequence[tuple[str | None, str | None]], partition: int = 0) -> None:
        """Plain (idempotent) messages given as (key, value), either of them None (a
        tombstone: a key and no value), flushed before returning."""
        from confluent_kafka import Producer

        producer = Producer({"bootstrap.servers": self.bootstrap_servers, "enable.idempotence": True})
        for key, value in messages:
            producer.produce(topic, key=key, value=value, partition=partition)
        if producer.flush(10):
            raise RuntimeError(f"messages to {topic}[{partition}] not delivered within 10 s")

    def transaction(self, topic: str, values: Sequence[str], partition: int = 0,
                    commit: bool = True) -> None:
        """Messages in one transaction, committed or aborted; either way a transaction
        marker follows them in the partition and occupies an offset."""
        from confluent_kafka import Producer

        producer = Producer({"bootstrap.servers": self.bootstrap_servers,
                             "transactional.id": f"tx-{uuid.uuid4().hex[:8]}"})
        producer.init_transactions(10)
        producer.begin_transaction()
        for value in values:
            producer.produce(topic, key=value, value=value, partition=partition)
        producer.flush(10)
        if commit:
            producer.commit_transaction(10)
        else:
            producer.abort_transaction(10)


class TransactionalProducer:
    """A producer with its own transactional.id, whose transactions follow one another."""

    def __init__(self, bootstrap_servers: str) -> None:
        from confluent_kafka import Producer

        self._producer = Producer({"bootstrap.servers": bootstrap_servers,
                                   "transactional.id": f"tx-{uuid.uuid4().hex[:8]}"})
        self._producer.init_transactions(10)

    def send(self, topic: str, values: Sequence[str], commit: bool = True, partition: int = 0) -> None:
        """`values` in one transaction, committed or aborted (a marker follows either way)."""
        self._producer.begin_transaction()
        for value in values:
            self._producer.produce(topic, key=value, value=value, partition=partition)
        self._producer.flush(10)
        if commit:
            self._producer.commit_transaction(10)
        else:
            self._producer.abort_transaction(10)


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory) -> Iterator[KafkaBroker]:
    try:
        binary = noida_binary()
        import confluent_kafka  # noqa: F401
    except (ImportError, FileNotFoundError) as exc:
        if IN_CI:
            pytest.fail(f"CI=true but the Kafka broker cannot run: {exc} (pip install -e '.[test]')")
        pytest.skip(f"no Kafka broker here ({exc}); pip install -e '.[test]' installs noida-db")
    broker = KafkaBroker(binary, tmp_path_factory.mktemp("kafka") / "data")
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()
