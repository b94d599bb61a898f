"""Kafka ranges ingested by a Spark Connect client of its own (a test process already
holds a classic local session, and a Connect client switches the process's functions
to Connect): the Connect server's executors read the slices. The story prints its
findings as JSON.

Usage: python -m tests.kafka_connect_story REMOTE_URL BOOTSTRAP_SERVERS TOPIC WORKDIR
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from pyspark.sql import types as T

from offset_assets.control_plane import connect
from offset_assets.ranges.ingestion import IngestionJob, RangeIngestion, TargetTable
from offset_assets.ranges.planners import KafkaOffsetPlanner
from offset_assets.ranges.sources.kafka import KafkaSource
from offset_assets.spark import get_spark_session
from offset_assets.versioned.table import VersionedTable

MESSAGES = T.StructType([
    T.StructField("kafka_partition", T.IntegerType(), False),
    T.StructField("kafka_offset", T.LongType(), False),
    T.StructField("value", T.StringType(), True),
])
KEY = ["kafka_partition", "kafka_offset"]


def main(args: list[str]) -> None:
    remote, bootstrap_servers, topic, workdir = args
    spark = get_spark_session(remote=remote, app_name="kafka-connect-story")
    plane = connect(f"sqlite:///{Path(workdir) / 'control_plane.db'}")
    warehouse = str(Path(workdir) / "warehouse")
    source = KafkaSource(bootstrap_servers, [topic], consumer_config={"sasl.password": "pw-4711"},
                         timeout_s=5.0)
    job = IngestionJob("raw_messages", source, KafkaOffsetPlanner(),
                       TargetTable("raw_messages", KEY, MESSAGES))
    results = RangeIngestion(spark, plane, job, warehouse).run_pending()
    table = VersionedTable(spark, plane, "raw_messages", KEY, MESSAGES, warehouse=warehouse)
    print(json.dumps({
        "ranges": [(r.data_range.start, r.data_range.end, r.rows_read) for r in results],
        "rows": sorted(list(r) for r in table.read_actual().select(*MESSAGES.fieldNames()).collect()),
    }))
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1:])
