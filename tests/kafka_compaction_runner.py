"""Ingest a keyed topic in a child process and SIGKILL it in the read of one range.

Usage: python -m tests.kafka_compaction_runner DB_URL WAREHOUSE BOOTSTRAP TOPIC KILL_AT_RANGE
The job is tests.test_ingestion_kafka_records' compacted-topic job; the child dies once
it has read its range number KILL_AT_RANGE (1-based), holding it RUNNING under run
`child-run`.
"""

from __future__ import annotations

import os
import signal
import sys

from offset_assets.control_plane import connect
from offset_assets.ranges.ingestion import RangeIngestion
from offset_assets.spark import LOCAL_TEST_CONF, SHORT_JVM_OPTIONS, get_spark_session
from tests.test_ingestion_kafka_records import compacted_job


def main(db_url: str, warehouse: str, bootstrap_servers: str, topic: str, kill_at: str) -> None:
    conf = {**LOCAL_TEST_CONF, "spark.driver.extraJavaOptions": SHORT_JVM_OPTIONS}
    spark = get_spark_session(master="local[2]", conf=conf)
    reads = []

    def die_after(data_range):
        reads.append(data_range)
        if len(reads) == int(kill_at):
            os.kill(os.getpid(), signal.SIGKILL)

    ingestion = RangeIngestion(spark, connect(db_url), compacted_job(bootstrap_servers, topic, after_read=die_after),
                               warehouse)
    while ingestion.run_pending(run_id="child-run"):
        pass
    sys.exit(3)  # reaching this line means the kill point was never hit


if __name__ == "__main__":
    main(*sys.argv[1:])
