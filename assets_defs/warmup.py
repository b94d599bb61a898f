"""A throwaway engine run that `make dev` sends to its fresh Spark Connect server before
the UI starts, so that the first materialization launched from the UI does not pay for
the server's first Spark work (its classes loading and its code being compiled).

The run is the engine's own story on a few rows (`offset_assets.startup.story`: a first
run and a few incremental runs, each with a changed reference row, and the ingestion of
an id range) in a temporary folder with a SQLite control plane of its own. Nothing of it
is left behind: the folder is deleted and the Connect session closed; the project's
control plane and warehouse are not touched.
"""

from __future__ import annotations

import tempfile
import time

from pyspark.sql import SparkSession

from offset_assets.startup.story import run_story

# Incremental runs after the first: the server's JVM compiles the code every run goes
# through (Spark's analysis and planning, Parquet reads and writes) once it has run it a
# few times, so the UI's first runs find it compiled. Each costs about 2 s of `make dev`'s
# start (`bench.dagster_runs --spark connect`, the engine's part of the UI's first small
# change, with the server's client compiler: 1 run 1.32 s, 4 runs 0.89 s).
INCREMENTAL_RUNS = 4


def warm_up(remote: str, incremental_runs: int = INCREMENTAL_RUNS) -> float:
    """Run the throwaway story against the Connect server at `remote` (`incremental_runs`
    runs after the first); its seconds."""
    started = time.monotonic()
    # A session of its own (not the process's default), closed at the end.
    spark = SparkSession.builder.remote(remote).create()
    with tempfile.TemporaryDirectory(prefix="offset-assets-warmup-") as folder:
        run_story(spark, folder, incremental_runs)
    spark.stop()
    return time.monotonic() - started
