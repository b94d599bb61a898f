"""Run a transformation in a child process and SIGKILL it at a chosen point.

Usage: python -m tests.crash_runner DB_URL WAREHOUSE POINT
POINT: in_function (batch 2 of a per-batch-commit run), before_commit (end mode, output
files written, nothing committed), inside_commit (end mode, inside the commit transaction
after the offsets were written), in_output_file and in_meta_file (end mode, half of the
Parquet file the driver writes for the output's versions, or for the meta's, on disk:
`versioned/held_files.py`).
"""

from __future__ import annotations

import io
import os
import signal
import sys

from bench.posts_world import enrich, make_world
from offset_assets.control_plane import connect
from offset_assets.control_plane.delta_catalog import DeltaCatalog
from offset_assets.control_plane.offsets import OffsetRepository
from offset_assets.engine import IncrementalEngine
from offset_assets.spark import LOCAL_TEST_CONF, SHORT_JVM_OPTIONS, get_spark_session
from offset_assets.versioned import held_files


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def die_in_driver_write(number: int) -> None:
    """The `number`-th Parquet file the driver writes is half written, then the process dies."""
    calls = {"n": 0}
    write_table = held_files.pq.write_table

    def half_then_die(table, where, filesystem=None, **options):  # noqa: ANN001, ANN003, ANN202
        calls["n"] += 1
        if calls["n"] < number:
            return write_table(table, where, filesystem=filesystem, **options)
        whole = io.BytesIO()
        write_table(table, whole, **options)
        with filesystem.open_output_stream(where) as out:
            out.write(whole.getvalue()[: len(whole.getvalue()) // 2])
        die()

    held_files.pq.write_table = half_then_die


def main(db_url: str, warehouse: str, point: str) -> None:
    # A JVM for one run that is killed: the client compiler only (less CPU to start it).
    conf = {**LOCAL_TEST_CONF, "spark.driver.extraJavaOptions": SHORT_JVM_OPTIONS}
    spark = get_spark_session(master="local[2]", conf=conf)
    world = make_world(spark, connect(db_url), warehouse)
    engine = IncrementalEngine(spark, world.posts.plane)
    calls = {"n": 0}

    def dying_in_batch_two(posts, profiles):
        calls["n"] += 1
        if calls["n"] == 2:
            die()
        return enrich(posts, profiles)

    if point == "in_function":
        engine.run_full(world.enriched_transformation(func=dying_in_batch_two, batch_size=2,
                                                      commit_mode="batch"))
    elif point == "before_commit":
        DeltaCatalog.commit = lambda *args, **kwargs: die()
        engine.run_full(world.enriched_transformation())
    elif point in ("in_output_file", "in_meta_file"):
        die_in_driver_write(1 if point == "in_output_file" else 2)
        engine.run_full(world.enriched_transformation())
    elif point == "inside_commit":
        original = OffsetRepository.update_offsets_bulk

        def write_then_die(self, offsets, conn=None):
            original(self, offsets, conn=conn)
            die()

        OffsetRepository.update_offsets_bulk = write_then_die
        engine.run_full(world.enriched_transformation())
    sys.exit(3)  # reaching this line means the kill point was never hit


if __name__ == "__main__":
    main(*sys.argv[1:])
