"""A run killed with SIGKILL loses nothing, duplicates nothing and exposes nothing half-written."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from bench.posts_world import make_world, rows_of
from offset_assets.control_plane import connect
from offset_assets.engine import IncrementalEngine

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
@pytest.mark.sigkill
@pytest.mark.parametrize(
    ("point", "committed_before_kill"),
    [("in_function", 2), ("in_output_file", 0), ("in_meta_file", 0), ("before_commit", 0), ("inside_commit", 0)],
)
def test_run_killed_at_any_point_is_completed_by_the_next_run(spark, sqlite_url, warehouse, point,
                                                                committed_before_kill):
    world = make_world(spark, connect(sqlite_url), warehouse)
    world.write_profiles([(1, "ann"), (2, "bob")])
    world.write_posts([(10, 1, "a"), (11, 1, "b"), (12, 2, "c"), (13, 2, "d"), (14, 1, "e")])

    child = subprocess.run(
        [sys.executable, "-m", "tests.crash_runner", sqlite_url, warehouse, point],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert child.returncode == -signal.SIGKILL, child.stderr[-2000:]

    # Readers see exactly what was committed before the kill: no hot or partial rows.
    assert world.enriched.read_actual().count() == committed_before_kill
    engine = IncrementalEngine(spark, world.posts.plane)
    if committed_before_kill == 0:
        assert engine.offsets.get_offsets_for_transformation("enrich_posts") == {}

    # The dead run's lease and hot deltas do not block the next run, which finishes the work.
    result = engine.run_full(world.enriched_transformation())
    assert result.processed_keys == 5 - committed_before_kill
    assert rows_of(world.enriched.read_actual()) == world.expected_enriched()
    assert world.enriched.hot() is None
    assert engine.run_full(world.enriched_transformation()).processed_keys == 0
