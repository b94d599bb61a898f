"""`offset-assets rescan` and `reprocess`: what the next run processes after each.

The story: posts 1..4 with their authors, enriched by a full run. A change to post 2 is
then skipped by an offset moved past it (as a wrong manual offset would), and post 3 is
processed and unchanged. `rescan` brings back exactly the skipped change; `reprocess`
makes the next run process every key, once.
"""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from bench.posts_world import make_world, rows_of
from offset_assets.cli import main
from offset_assets.control_plane import connect
from offset_assets.control_plane.offsets import OffsetRepository
from offset_assets.control_plane.reprocess import ReprocessRequests
from offset_assets.engine import IncrementalEngine

TID = "enrich_posts"


@pytest.fixture
def story(spark, sqlite_url, warehouse):
    plane = connect(sqlite_url)
    world = make_world(spark, plane, warehouse)
    world.write_profiles([(1, "ann"), (2, "bob")])
    world.write_posts([(1, 1, "a"), (2, 2, "b"), (3, 1, "c"), (4, 2, "d")])
    engine = IncrementalEngine(spark, plane)
    transformation = world.enriched_transformation(transformation_id=TID)
    assert engine.run_full(transformation).processed_keys == 4
    return world, engine, transformation, plane


def cli(url: str, *args: str):
    result = CliRunner().invoke(main, ["--db-url", url, *args])
    assert result.exit_code == 0, result.output
    return result.output


def processed_posts(engine: IncrementalEngine, transformation) -> set[int]:
    return {row["post_id"] for row in engine.changed_keys(transformation).collect()}


def test_rescan_brings_back_only_the_change_the_offsets_skipped(story, sqlite_url):
    world, engine, transformation, plane = story
    world.write_posts([(2, 2, "b2")])
    skipped_past = world.posts.last_committed().commit_ts + 1.0
    OffsetRepository(plane).update_offsets_bulk({(TID, "posts"): skipped_past})
    assert processed_posts(engine, transformation) == set()  # the change of post 2 is lost

    output = cli(sqlite_url, "rescan", TID, "--input", "posts", "--yes")

    assert "keys already processed stay as they are" in output
    assert processed_posts(engine, transformation) == {2}
    result = engine.run_full(transformation)
    assert (result.processed_keys, rows_of(world.enriched.read_actual()) == world.expected_enriched()) == (1, True)
    assert engine.run_full(transformation).processed_keys == 0


@pytest.mark.quick
def test_reprocess_makes_the_next_run_process_every_key_once(story, sqlite_url):
    world, engine, transformation, plane = story
    assert engine.run_full(transformation).processed_keys == 0

    output = cli(sqlite_url, "reprocess", TID, "--yes")

    assert output.endswith(f"the next run of {TID} processes every key again\n")
    assert ReprocessRequests(plane).pending(TID) is not None
    assert OffsetRepository(plane).get_offsets_for_transformation(TID) == {}  # same transaction
    result = engine.run_full(transformation)
    assert result.processed_keys == 4
    assert rows_of(world.enriched.read_actual()) == world.expected_enriched()
    assert ReprocessRequests(plane).pending(TID) is None  # done: the request is completed
    assert engine.run_full(transformation).processed_keys == 0
