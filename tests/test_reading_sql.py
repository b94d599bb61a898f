"""SQL over the versioned tables (`VersionedTables`): every system-time clause equals the
versioned table's own read, one committed catalog state per query, a concurrent commit
seen whole or not at all, files removed by cleanup while a query runs, and the reads by
name (`read`, `changes`, `register_views`)."""

from __future__ import annotations

import threading

import pytest

from offset_assets.control_plane import database
from offset_assets.control_plane.delta_catalog.errors import UnknownTableError
from offset_assets.local_frames import local_frame
from offset_assets.reading.errors import FilesRemovedError, SystemTimeError
from offset_assets.reading.tables import VersionedTables, to_arrow
from offset_assets.spark_jobs import count_spark_jobs
from offset_assets.versioned.commit import commit_deltas
from offset_assets.versioned.compaction import compact
from offset_assets.versioned.errors import VersionedTableError
from offset_assets.versioned.maintenance import cleanup
from tests.reading_story import POSTS_HISTORY, POSTS_OP, PROFILES_OP, clause_reads, rows, utc_text, write_history


@pytest.fixture(scope="module")
def history(spark, tmp_path_factory):
    """The story's two tables with their whole history, and `VersionedTables` over them:
    for the tests that only read them."""
    root = tmp_path_factory.mktemp("reading")
    url = f"sqlite:///{root / 'control_plane.db'}"
    posts, profiles = write_history(spark, url, str(root / "warehouse"))
    yield posts, profiles, VersionedTables(spark, url)
    database.forget(url)


def post_ids(frame) -> list[int]:
    return sorted(row.post_id for row in frame.collect())


@pytest.mark.quick
def test_every_system_time_clause_through_sql_equals_the_versioned_tables_read(spark, sqlite_url, warehouse):
    compared = clause_reads(spark, sqlite_url, warehouse)

    for query, (through_sql, through_table) in compared.items():
        assert through_sql == through_table, query
    read = {query: [[row.get(c) for c in ("post_id", "text", "sys_from", "sys_to")] for row in sql_rows]
            for query, (sql_rows, _) in compared.items()}
    # What the history holds, so that the reads compared above are not both empty.
    assert read["SELECT * FROM posts"] == [
        [1, "a3", 4, None], [2, "b again", 4, None], [4, "d2", 3, None], [5, "e", 1, None], [7, "g", 5, None]]
    assert read["SELECT * FROM posts FOR SYSTEM_TIME AS OF DELTA_NUM 0"] == []
    assert read["SELECT * FROM posts FOR SYSTEM_TIME AS OF DELTA_NUM 2"] == [
        [1, "a2", 2, None], [3, "c", 1, None], [4, "d", 1, None], [5, "e", 1, None], [6, "f", 2, None]]
    # Versions deltas 3..4 created, sys_to as history stood at delta 4.
    assert read["SELECT * FROM posts FOR SYSTEM_TIME STARTED IN (3, 4)"] == [
        [1, "a3", 4, None], [2, "b again", 4, None], [4, "d2", 3, None]]
    # The keys deleted in the whole history, their tombstones holding the deleted data.
    assert read["SELECT * FROM posts FOR SYSTEM_TIME FINISHED IN (1, 5)"] == [
        [2, "b", 2, 3], [3, "c", 3, None], [6, "f", 5, None]]
    # By commit time: deltas 2..3 (their own printed times), all five, none (a moment between two commits).
    by_time = [query for query in compared if " TS (" in query]
    assert [len(compared[query][0]) for query in by_time] == [3, 2, 11, 3, 0, 0]
    join = next(query for query in compared if "JOIN" in query)
    assert [[row["post_id"], row["name"]] for row in compared[join][0]] == [
        [1, "ann"], [3, "bobby"], [4, "bobby"], [5, "cy"], [6, "cy"]]


def test_a_query_joining_two_tables_reads_the_catalog_state_it_was_planned_on(spark, sqlite_url, warehouse):
    posts, profiles = write_history(spark, sqlite_url, warehouse, posts_deltas=1)
    tables = VersionedTables(spark, sqlite_url)
    query = tables.sql("SELECT p.post_id, r.name FROM posts p JOIN profiles r ON p.user_id = r.id")
    before = rows(query)
    # One commit of both tables after the query was planned: the query does not see it.
    hot_posts, hot_profiles = posts.open_delta(), profiles.open_delta()
    hot_posts.write(local_frame(spark, [(8, 2, "h", 0)], POSTS_OP))
    hot_profiles.write(local_frame(spark, [(2, "robert", 0)], PROFILES_OP))
    commit_deltas([hot_posts, hot_profiles])

    assert rows(query) == before == [[1, "ann"], [2, "ann"], [3, "bobby"], [4, "bobby"], [5, "cy"]]
    after = rows(tables.sql("SELECT p.post_id, r.name FROM posts p JOIN profiles r ON p.user_id = r.id"))
    assert after == [[1, "ann"], [2, "ann"], [3, "robert"], [4, "robert"], [5, "cy"], [8, "robert"]]


def test_a_query_during_a_concurrent_commit_sees_all_or_nothing_of_that_delta(spark, db_url, warehouse):
    backend = "sqlite" if db_url.startswith("sqlite") else "postgresql"
    posts, profiles = write_history(spark, db_url, warehouse, posts_deltas=1)
    tables = VersionedTables(spark, db_url)
    join = "SELECT p.post_id, r.name FROM posts p JOIN profiles r ON p.user_id = r.id"
    before = rows(tables.sql(join))
    hot_posts, hot_profiles = posts.open_delta(), profiles.open_delta()
    hot_posts.write(local_frame(spark, [(8, 2, "h", 0), (1, None, None, 1)], POSTS_OP))
    hot_profiles.write(local_frame(spark, [(2, "robert", 0)], PROFILES_OP))
    during: list = []
    reader = threading.Thread(target=lambda: during.append(rows(tables.sql(join))))

    def query_from_another_thread(_conn, _commit_ts) -> None:
        # The commit transaction is open and has marked both deltas committed. On
        # PostgreSQL (READ COMMITTED) a query planned and run now, on its own connection,
        # sees neither; on SQLite every control-plane transaction takes the write lock, so
        # the query waits for the commit to end and sees both.
        reader.start()
        if backend == "postgresql":
            reader.join()

    commit_deltas([hot_posts, hot_profiles], on_commit=query_from_another_thread)
    reader.join()

    after = rows(tables.sql(join))
    assert during == [before if backend == "postgresql" else after]
    assert before == [[1, "ann"], [2, "ann"], [3, "bobby"], [4, "bobby"], [5, "cy"]]
    assert after == [[2, "ann"], [3, "robert"], [4, "robert"], [5, "cy"], [8, "robert"]]


def test_a_snapshot_removed_by_cleanup_while_a_query_runs_fails_it_clearly_and_a_retry_succeeds(
        spark, sqlite_url, warehouse):
    posts, _profiles = write_history(spark, sqlite_url, warehouse, posts_deltas=1)
    tables = VersionedTables(spark, sqlite_url)
    compact(posts)
    posts.write_delta(local_frame(spark, POSTS_HISTORY[1], POSTS_OP))
    compact(posts)  # the snapshot at delta 2 supersedes the one at delta 1
    query = "SELECT post_id FROM posts FOR SYSTEM_TIME AS OF DELTA_NUM 1"
    planned = tables.sql(query)  # reads the snapshot at delta 1
    assert cleanup(posts, retention_s=0).expired_snapshots == [1]

    with pytest.raises(FilesRemovedError) as failed:
        to_arrow(planned)

    message = str(failed.value)
    assert message.startswith("table 'posts': ") and "/posts/snapshots/000000000001-" in message
    assert message.endswith("was removed while this read ran (cleanup removes a snapshot once a newer one has "
                            "superseded it for longer than its retention): run it again")
    assert sorted(to_arrow(tables.sql(query))["post_id"].to_pylist()) == [1, 2, 3, 4, 5]


def test_reads_by_name_know_the_key_and_schema_from_the_catalog(history):
    posts, _profiles, tables = history
    last = posts.last_committed()

    assert post_ids(tables.read("posts")) == [1, 2, 4, 5, 7]
    assert post_ids(tables.read("posts", as_of_delta=1)) == [1, 2, 3, 4, 5]
    assert post_ids(tables.read("posts", as_of=posts.delta(2).commit_ts)) == [1, 3, 4, 5, 6]
    changes = tables.changes("posts", since_delta=3)
    assert sorted((row.post_id, row.sys_from, row.sys_op) for row in changes.collect()) == [
        (1, 4, 0), (2, 4, 0), (6, 5, 1), (7, 5, 0)]
    assert sorted(row.post_id for row in tables.changes("posts", since=last.commit_ts).collect()) == [6, 7]
    assert tables.read("posts").columns == ["post_id", "user_id", "text", "sys_from", "sys_to", "sys_op", "update_ts"]

    with pytest.raises(VersionedTableError, match=r"^table 'posts': delta 9 is not committed \(last committed: 5\)$"):
        tables.read("posts", as_of_delta=9)
    with pytest.raises(UnknownTableError, match=r"^no versioned table 'post' in the delta catalog \(tables: posts, "
                                                r"profiles\)$"):
        tables.read("post")


def test_register_views_shows_every_table_at_one_catalog_state(spark, sqlite_url, warehouse):
    posts, _profiles = write_history(spark, sqlite_url, warehouse, posts_deltas=1)
    tables = VersionedTables(spark, sqlite_url)

    assert tables.register_views() == {"posts": 1, "profiles": 2}
    assert sorted(row.post_id for row in spark.sql("SELECT post_id FROM posts").collect()) == [1, 2, 3, 4, 5]
    posts.write_delta(local_frame(spark, [(9, 1, "i", 0)], POSTS_OP))
    # A view is the state it was registered at, until it is registered again.
    assert spark.sql("SELECT count(*) AS n FROM posts").first().n == 5
    assert tables.register_views()["posts"] == 2
    assert spark.sql("SELECT count(*) AS n FROM posts").first().n == 6
    for name in ("posts", "profiles"):
        spark.catalog.dropTempView(name)


def test_planning_a_query_with_clauses_starts_no_spark_job(spark, history):
    posts, _profiles, tables = history
    moment = (posts.delta(2).commit_ts + posts.delta(3).commit_ts) / 2
    query = (f"SELECT p.post_id, r.name FROM posts FOR SYSTEM_TIME AS OF '{utc_text(moment)}' p "
             "JOIN profiles FOR SYSTEM_TIME AS OF DELTA_NUM 1 r ON p.user_id = r.id")

    with count_spark_jobs(spark) as planning:
        planned = tables.sql(query)

    assert planning.count == 0
    assert rows(planned) == [[1, "ann"], [3, "bob"], [4, "bob"], [5, "cy"], [6, "cy"]]


@pytest.mark.parametrize(("query", "message"), [
    ("SELECT * FROM posts FOR SYSTEM_TIME AS OF DELTA_NUM 9",
     "FOR SYSTEM_TIME AS OF DELTA_NUM 9 on 'posts' (line 1, column 21): delta 9 is not committed (last committed: 5)"),
    ("SELECT * FROM posts FOR SYSTEM_TIME STARTED IN (4, 6)",
     "FOR SYSTEM_TIME STARTED IN (4, 6) on 'posts' (line 1, column 21): delta 6 is not committed (last committed: 5)"),
    ("SELECT * FROM posts FOR SYSTEM_TIME FINISHED IN (3, 2)",
     "FOR SYSTEM_TIME FINISHED IN (3, 2) on 'posts' (line 1, column 21): an empty range: 3 > 2"),
    ("SELECT * FROM posts FOR SYSTEM_TIME STARTED IN (0, 2)",
     "FOR SYSTEM_TIME STARTED IN (0, 2) on 'posts' (line 1, column 21): delta numbers start at 1"),
    ("SELECT * FROM posts FOR SYSTEM_TIME AS OF 'the day before'",
     "FOR SYSTEM_TIME AS OF 'the day before' on 'posts' (line 1, column 21): 'the day before' is not an ISO 8601 "
     "timestamp"),
])
def test_a_clause_naming_a_delta_or_time_that_is_not_there_is_one_line_naming_it(history, query, message):
    _posts, _profiles, tables = history

    with pytest.raises(SystemTimeError) as refused:
        tables.sql(query)

    assert str(refused.value) == message


def test_the_writer_holding_the_hot_delta_reads_the_state_it_leaves_and_another_reader_is_told_whose_it_is(
        spark, sqlite_url, warehouse):
    posts, _profiles = write_history(spark, sqlite_url, warehouse, posts_deltas=2)
    tables = VersionedTables(spark, sqlite_url)
    query = "SELECT post_id, text, sys_from, update_ts FROM posts FOR SYSTEM_TIME AS OF LATEST_UNCOMMITTED_DELTA"
    hot = posts.open_delta(holder="loader-1")

    nothing_written = rows(tables.sql(query, hot_deltas=[hot]))
    hot.write(local_frame(spark, POSTS_HISTORY[2], POSTS_OP))  # delta 3: post 3 deleted, post 4 changed
    written = rows(tables.sql(query, hot_deltas=[hot]))
    with pytest.raises(SystemTimeError) as without_it:
        tables.sql(query)
    hot.commit()
    committed = rows(tables.sql("SELECT post_id, text, sys_from, update_ts FROM posts"))

    t1, t2, t3 = (posts.delta(n).commit_ts for n in (1, 2, 3))
    assert nothing_written == [[1, "a2", 2, t2], [3, "c", 1, t1], [4, "d", 1, t1], [5, "e", 1, t1], [6, "f", 2, t2]]
    # The versions of the hot delta have no commit time yet; once committed they have its own.
    assert written == [[1, "a2", 2, t2], [4, "d2", 3, None], [5, "e", 1, t1], [6, "f", 2, t2]]
    assert committed == [[1, "a2", 2, t2], [4, "d2", 3, t3], [5, "e", 1, t1], [6, "f", 2, t2]]
    assert str(without_it.value) == (
        "FOR SYSTEM_TIME AS OF LATEST_UNCOMMITTED_DELTA on 'posts' (line 1, column 54): only the writer holding the "
        "table's hot delta reads it (VersionedTables.sql(..., hot_deltas=[that HotDelta])); the hot delta of 'posts' "
        "(3) is held by loader-1")
    with pytest.raises(VersionedTableError, match=r"^table 'posts': HotDelta\('posts', 3, committed\) is no longer "
                                                  r"open: only an open hot delta is read$"):
        tables.sql(query, hot_deltas=[hot])
    with pytest.raises(SystemTimeError, match=r"'posts' has no hot delta$"):
        tables.sql(query)
