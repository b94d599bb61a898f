"""Ingest an id backlog in a child process and SIGKILL it while it reads one range.

Usage: python -m tests.backlog_crash_runner DB_URL WAREHOUSE SOURCE_URL KILL_AT
The job is tests.test_ingestion_backlog's (ranges of 3 ids); the child dies inside the
read of the range starting at id KILL_AT, holding it RUNNING under run `child-run`.
"""

from __future__ import annotations

import os
import signal
import sys

from offset_assets.control_plane import connect
from offset_assets.ranges.ingestion import RangeIngestion
from offset_assets.spark import LOCAL_TEST_CONF, SHORT_JVM_OPTIONS, get_spark_session
from tests.test_ingestion_backlog import ReadHook, backlog_job


def main(db_url: str, warehouse: str, source_url: str, kill_at: str) -> None:
    conf = {**LOCAL_TEST_CONF, "spark.driver.extraJavaOptions": SHORT_JVM_OPTIONS}
    spark = get_spark_session(master="local[2]", conf=conf)

    def die_in(data_range):
        if data_range.start == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)

    job = backlog_job(source_url, ReadHook(source_url, die_in))
    RangeIngestion(spark, connect(db_url), job, warehouse).run_pending(run_id="child-run")
    sys.exit(3)  # reaching this line means the kill point was never hit


if __name__ == "__main__":
    main(*sys.argv[1:])
