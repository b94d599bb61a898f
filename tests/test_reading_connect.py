"""Reading versioned tables over Spark Connect: every system-time clause through SQL equals
the versioned table's own read, and `make dev`'s global views serve another client of
the server. Each story runs as a Connect client in a child process (`tests.reading_story`):
this test process holds a classic local session."""

from __future__ import annotations

import json

import pytest

from offset_assets.config import ENV_DB_URL
from tests.spark_cluster import ConnectServer, run_client

# One worker holds the Connect server (tests/conftest.py groups its tests).
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("jvm_servers")]


def story(server: ConnectServer, command: str, tmp_path) -> dict:
    (tmp_path / "warehouse").mkdir()
    db_url = f"sqlite:///{tmp_path / 'cp.db'}"
    child = run_client(["-m", "tests.reading_story", command, "--remote", server.url, db_url,
                        str(tmp_path / "warehouse")], server, {ENV_DB_URL: db_url}, timeout=900)
    assert child.returncode == 0, child.stderr[-3000:]
    return json.loads(child.stdout.strip().splitlines()[-1])


def test_every_system_time_clause_through_sql_over_connect_equals_the_versioned_tables_read(connect_server, tmp_path):
    compared = story(connect_server, "clauses", tmp_path)

    assert len(compared) == 23
    for query, (through_sql, through_table) in compared.items():
        assert through_sql == through_table, query
    assert [row["post_id"] for row in compared["SELECT * FROM posts"][0]] == [1, 2, 4, 5, 7]
    assert [row["post_id"] for row in compared["SELECT * FROM posts FOR SYSTEM_TIME FINISHED IN (1, 5)"][0]] == [
        2, 3, 6]


def test_global_views_serve_every_table_to_another_client_and_follow_commits(connect_server, tmp_path):
    told = story(connect_server, "views", tmp_path)

    assert told["refreshed"] is True and told["unchanged"] is False
    assert told["registered"] == {"posts": 1, "profiles": 2}
    assert told["seen"] == told["expected"]
    assert [row["post_id"] for row in told["seen"][0]] == [1, 2, 3, 4, 5]
    assert told["refreshed_after_commit"] is True and told["registered_after_commit"]["posts"] == 2
    assert told["posts_after_commit"] == told["expected_after_commit"]
    assert [row["post_id"] for row in told["posts_after_commit"]] == [1, 3, 4, 5, 6]


def test_make_devs_thread_waits_for_the_control_plane_then_serves_its_tables(connect_server, tmp_path):
    told = story(connect_server, "dev_views", tmp_path)

    assert told["seen"] == told["expected"]
    assert [row["post_id"] for row in told["seen"]] == [1, 2, 3, 4, 5]
    assert told["thread_ended"] is True
