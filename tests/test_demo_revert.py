"""The README's story of a bad load undone: after `make demo`, `offset-assets revert posts
--to 1 --yes` leaves `posts` with its delta-1 state as a new delta, and the next
materialization of the transformations leaves every output equal to a full recompute over
that state, processing only the posts the revert touched. The demo runs here into a state
of its own (`tests/demo_state.py`): the shared demo state is read only."""

import dagster as dg
import pytest
from click.testing import CliRunner

from assets_defs.assets.transformations import BANNED_WORD
from assets_defs.definitions import build_definitions
from assets_defs.demo.story import QUIET_RUN_CONFIG
from offset_assets.cli import main
from offset_assets.config import default_db_url
from offset_assets.control_plane import connect, database
from offset_assets.control_plane.job_log import JobLog
from tests.demo_state import SMALL, run_demo


def actual_rows(defs: dg.Definitions, asset: str) -> set[tuple]:
    table = defs.resources["incremental_engine"].table(dg.AssetKey(asset))
    return {tuple(row) for row in table.read_actual().select(*table.data_columns).collect()}


def full_recompute(posts: set[tuple], profiles: set[tuple]) -> dict[str, set[tuple]]:
    """Every transformation's output computed from scratch, in Python, over `posts`
    (post_id, user_id, text, updated_at) and `profiles` (id, name, updated_at)."""
    names = {uid: name for uid, name, _ in profiles}
    stats: dict[int, tuple[int, float]] = {}
    for _, uid, _, ts in posts:
        count, last = stats.get(uid, (0, 0.0))
        stats[uid] = (count + 1, max(last, ts))
    rejected = {post for post in posts if BANNED_WORD in post[2].split(" ")}
    return {
        "enriched_posts": {(pid, uid, names.get(uid), text, ts) for pid, uid, text, ts in posts},
        "user_post_stats": {(uid, names.get(uid), count, last) for uid, (count, last) in stats.items()},
        "accepted_posts": posts - rejected,
        "rejected_posts": rejected,
    }


@pytest.mark.slow
def test_after_the_demo_a_revert_of_posts_to_delta_1_is_followed_by_every_transformation(spark, tmp_path, monkeypatch):
    demo = run_demo(tmp_path, monkeypatch)
    defs = build_definitions()
    table = defs.resources["incremental_engine"].table(dg.AssetKey("posts"))
    delta_1 = {tuple(r) for r in table.read_actual(as_of_delta=1).select(*table.data_columns).collect()}
    assert len(delta_1) == SMALL.posts and table.last_committed().delta_num == 3

    result = CliRunner().invoke(main, ["revert", "posts", "--to", "1", "--yes"])

    assert result.exit_code == 0, result.output
    traffic = demo.story.traffic  # 3 inserts, 2 edits, 1 soft delete: 6 posts
    assert result.output.splitlines()[0] == (
        "posts: reverted to delta 1 as delta 4 (undoes deltas 2..3): "
        f"{len(traffic.updated_posts)} upserted back, {len(traffic.inserted_posts)} deleted, "
        f"{len(traffic.deleted_posts)} restored"
    )
    assert actual_rows(defs, "posts") == delta_1 and table.delta(4).reverts_to == 1
    assert table.catalog.actual_rows(["posts"]) == {"posts": SMALL.posts}
    log = JobLog(connect(default_db_url()))
    assert [(r.job_name, r.status) for r in log.jobs(status="REVERTED")] == [
        ("post_updates", "REVERTED"),
        ("posts", "REVERTED"),
    ]

    with demo.instance() as instance:
        run = defs.resolve_job_def("transformations").execute_in_process(instance=instance, run_config=QUIET_RUN_CONFIG)

    processed = {
        event.asset_key.to_user_string(): event.metadata["processed_keys"].value
        for event in (e.step_materialization_data.materialization for e in run.get_asset_materialization_events())
    }
    moderated = processed.get("accepted_posts", processed.get("rejected_posts"))
    assert processed["enriched_posts"] == moderated == len(traffic.changed_posts) == 6
    expected = full_recompute(delta_1, actual_rows(defs, "profiles"))
    for asset, rows in expected.items():
        assert actual_rows(defs, asset) == rows, asset
    database.forget(default_db_url())
