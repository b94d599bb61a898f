"""Prostore's system-time clauses found in Spark SQL text and rewritten onto reads
(`offset_assets/reading/system_time.py`): no Spark, the text Spark will run and the
read each placeholder stands for, and one line per malformed clause."""

from __future__ import annotations

import pytest

from offset_assets.reading.errors import SystemTimeError
from offset_assets.reading.system_time import ClauseKind, parse_system_time

TABLES = ["posts", "profiles", "orders.v2"]


def reads(parsed) -> dict[str, tuple]:
    """placeholder -> (table, kind, argument) of each read."""
    told = {}
    for placeholder, (table, clause) in parsed.reads.items():
        if clause is None:
            told[placeholder] = (table, "actual", None)
        else:
            told[placeholder] = (table, clause.kind, clause.delta if clause.kind is ClauseKind.AS_OF_DELTA
                                 else clause.timestamp if clause.kind is ClauseKind.AS_OF_TIME
                                 else clause.timestamps or clause.deltas)
    return told


def test_each_clause_becomes_a_placeholder_aliased_by_the_table_name():
    parsed = parse_system_time(
        "SELECT * FROM posts FOR SYSTEM_TIME AS OF DELTA_NUM 3 JOIN profiles USING (id);", TABLES)

    assert parsed.text == ("WITH `profiles` AS (SELECT * FROM {_oa_1})\n(\n"
                           "SELECT * FROM {_oa_0} AS `posts` JOIN profiles USING (id)\n)")
    assert reads(parsed) == {"_oa_0": ("posts", ClauseKind.AS_OF_DELTA, 3), "_oa_1": ("profiles", "actual", None)}
    assert parsed.tables == ["posts", "profiles"]


def test_the_four_clauses_in_any_case_with_the_querys_own_aliases():
    parsed = parse_system_time(
        "select p.id from posts for system_time as of '2026-11-28 12:00:00' as p\n"
        "join posts FOR SYSTEM_TIME STARTED IN (2, 4) s on p.id = s.id\n"
        "join posts FOR SYSTEM_TIME FINISHED IN(2,4) `f` on p.id = f.id", TABLES)

    assert parsed.text == ("select p.id from {_oa_0} as p\njoin {_oa_1} s on p.id = s.id\n"
                           "join {_oa_2} `f` on p.id = f.id")
    assert reads(parsed) == {"_oa_0": ("posts", ClauseKind.AS_OF_TIME, "2026-11-28 12:00:00"),
                             "_oa_1": ("posts", ClauseKind.STARTED_IN, (2, 4)),
                             "_oa_2": ("posts", ClauseKind.FINISHED_IN, (2, 4))}


def test_prostores_clauses_by_commit_time_and_of_the_hot_delta():
    parsed = parse_system_time(
        "SELECT * FROM posts FOR SYSTEM_TIME STARTED TS ('2026-11-28', '2026-11-29 12:00:00') s\n"
        "JOIN posts FOR SYSTEM_TIME finished ts('2026-11-28T00:00:00Z','2026-11-30') AS f USING (post_id)\n"
        "JOIN profiles FOR SYSTEM_TIME AS OF LATEST_UNCOMMITTED_DELTA ON f.user_id = profiles.id", TABLES)

    # `profiles.id` names the table too: defined around the query, shadowed by the clause's alias.
    assert parsed.text == ("WITH `profiles` AS (SELECT * FROM {_oa_3})\n(\nSELECT * FROM {_oa_0} s\n"
                           "JOIN {_oa_1} AS f USING (post_id)\n"
                           "JOIN {_oa_2} AS `profiles` ON f.user_id = profiles.id\n)")
    assert reads(parsed) == {"_oa_0": ("posts", ClauseKind.STARTED_TS, ("2026-11-28", "2026-11-29 12:00:00")),
                             "_oa_1": ("posts", ClauseKind.FINISHED_TS, ("2026-11-28T00:00:00Z", "2026-11-30")),
                             "_oa_2": ("profiles", ClauseKind.AS_OF_UNCOMMITTED, None),
                             "_oa_3": ("profiles", "actual", None)}


def test_clauses_inside_literals_and_comments_are_text_and_braces_are_kept():
    query = ("SELECT 'posts FOR SYSTEM_TIME AS OF DELTA_NUM 1' AS a, \"{b}\", r'\\' -- posts FOR SYSTEM_TIME x\n"
             "/* a /* nested */ posts FOR SYSTEM_TIME */ FROM `posts` FOR SYSTEM_TIME AS OF DELTA_NUM 2")

    parsed = parse_system_time(query, TABLES)

    assert parsed.text == ("SELECT 'posts FOR SYSTEM_TIME AS OF DELTA_NUM 1' AS a, \"{{b}}\", r'\\' -- posts FOR "
                           "SYSTEM_TIME x\n/* a /* nested */ posts FOR SYSTEM_TIME */ FROM {_oa_0} AS `posts`")
    assert reads(parsed) == {"_oa_0": ("posts", ClauseKind.AS_OF_DELTA, 2)}


def test_a_quoted_name_with_a_dot_and_a_sample_keep_the_alias_after_the_sample():
    parsed = parse_system_time("SELECT * FROM `orders.v2` FOR SYSTEM_TIME AS OF DELTA_NUM 1 TABLESAMPLE (50 PERCENT)",
                               TABLES)

    assert parsed.text == "SELECT * FROM {_oa_0} TABLESAMPLE (50 PERCENT) AS `orders.v2`"


def test_the_table_statement_takes_a_clause_without_an_alias():
    parsed = parse_system_time("TABLE posts FOR SYSTEM_TIME FINISHED IN (1, 2)", TABLES)

    assert parsed.text == "TABLE {_oa_0}"


def test_plain_names_in_a_query_are_defined_around_it_so_its_own_ctes_still_shadow_them():
    parsed = parse_system_time("WITH posts AS (SELECT * FROM posts WHERE id > 1) SELECT * FROM posts", TABLES)

    assert parsed.text == ("WITH `posts` AS (SELECT * FROM {_oa_0})\n(\n"
                           "WITH posts AS (SELECT * FROM posts WHERE id > 1) SELECT * FROM posts\n)")


def test_a_delta_number_is_ascii_digits_up_to_bigint():
    parsed = parse_system_time("SELECT 2.5 AS x FROM posts FOR SYSTEM_TIME AS OF DELTA_NUM 9223372036854775807", TABLES)

    assert parsed.text == "SELECT 2.5 AS x FROM {_oa_0} AS `posts`"
    assert reads(parsed) == {"_oa_0": ("posts", ClauseKind.AS_OF_DELTA, 2**63 - 1)}


def test_statements_that_are_not_queries_and_queries_without_tables_run_as_written():
    for statement in ("DESCRIBE posts", "SHOW TABLES", "SELECT 1 AS posts_count", "SELECT '{x}'"):
        parsed = parse_system_time(statement, TABLES)
        assert (parsed.text, parsed.reads) == (statement, {})


@pytest.mark.parametrize(("query", "message"), [
    ("SELECT * FROM nosuch FOR SYSTEM_TIME AS OF DELTA_NUM 1",
     "FOR SYSTEM_TIME on 'nosuch' (line 1, column 15): not a versioned table of this control plane "
     "(versioned tables: orders.v2, posts, profiles); Spark's own time travel of other tables is VERSION AS OF "
     "/ TIMESTAMP AS OF"),
    ("SELECT * FROM posts FOR SYSTEM_TIME AS OF DELTA_NUM three",
     "malformed FOR SYSTEM_TIME clause on 'posts' at line 1, column 53: expected a delta number, found 'three'"),
    ("SELECT * FROM posts\nFOR SYSTEM_TIME BETWEEN 1 AND 2",
     "malformed FOR SYSTEM_TIME clause on 'posts' at line 2, column 17: expected AS OF DELTA_NUM <n>, AS OF "
     "'<timestamp>', AS OF LATEST_UNCOMMITTED_DELTA, STARTED IN (<d1>, <d2>), FINISHED IN (<d1>, <d2>), "
     "STARTED TS ('<t1>', '<t2>') or FINISHED TS ('<t1>', '<t2>'), found 'BETWEEN'"),
    ("SELECT * FROM posts FOR SYSTEM_TIME AS OF 3",
     "malformed FOR SYSTEM_TIME clause on 'posts' at line 1, column 43: expected DELTA_NUM <n>, '<timestamp>' or "
     "LATEST_UNCOMMITTED_DELTA, found '3'"),
    ("SELECT * FROM posts FOR SYSTEM_TIME STARTED TS (1, 2)",
     "malformed FOR SYSTEM_TIME clause on 'posts' at line 1, column 49: expected a '<timestamp>' literal, found '1'"),
    ("SELECT * FROM posts FOR SYSTEM_TIME FINISHED TS ('2026-01-01')",
     "malformed FOR SYSTEM_TIME clause on 'posts' at line 1, column 62: expected ',', found ')'"),
    ("SELECT * FROM posts FOR SYSTEM_TIME STARTED IN (1 2)",
     "malformed FOR SYSTEM_TIME clause on 'posts' at line 1, column 51: expected ',', found '2'"),
    ("SELECT * FROM posts FOR SYSTEM_TIME FINISHED (1, 2)",
     "malformed FOR SYSTEM_TIME clause on 'posts' at line 1, column 46: expected IN or TS, found '('"),
    ("SELECT * FROM posts FOR SYSTEM_TIME AS OF DELTA_NUM ²",
     "malformed FOR SYSTEM_TIME clause on 'posts' at line 1, column 53: expected a delta number, found '²'"),
    ("SELECT * FROM posts FOR SYSTEM_TIME AS OF DELTA_NUM ٣",
     "malformed FOR SYSTEM_TIME clause on 'posts' at line 1, column 53: expected a delta number, found '٣'"),
    ("SELECT * FROM posts FOR SYSTEM_TIME AS OF DELTA_NUM 2.5",
     "malformed FOR SYSTEM_TIME clause on 'posts' at line 1, column 53: expected a delta number, found '2.5'"),
    ("SELECT * FROM posts FOR SYSTEM_TIME AS OF DELTA_NUM 1e3",
     "malformed FOR SYSTEM_TIME clause on 'posts' at line 1, column 53: expected a delta number, found '1e3'"),
    ("SELECT * FROM posts FOR SYSTEM_TIME AS OF DELTA_NUM 9223372036854775808",
     "malformed FOR SYSTEM_TIME clause on 'posts' at line 1, column 53: expected a delta number, found "
     "'9223372036854775808'"),
    ("SELECT * FROM posts FOR SYSTEM_TIME STARTED IN (1, 2.0)",
     "malformed FOR SYSTEM_TIME clause on 'posts' at line 1, column 52: expected a delta number, found '2.0'"),
    ("SELECT * FROM posts FOR SYSTEM_TIME FINISHED IN (, 2)",
     "malformed FOR SYSTEM_TIME clause on 'posts' at line 1, column 50: expected a delta number, found ','"),
    ("SELECT * FROM posts FOR SYSTEM_TIME AS OF DELTA_NUM -1",
     "malformed FOR SYSTEM_TIME clause on 'posts' at line 1, column 53: expected a delta number, found '-'"),
    ("SELECT * FROM posts FOR SYSTEM_TIME AS OF",
     "malformed FOR SYSTEM_TIME clause on 'posts' at line 1, column 42: expected DELTA_NUM <n>, '<timestamp>' or "
     "LATEST_UNCOMMITTED_DELTA, found the end of the query"),
    ("SELECT * FROM (SELECT 1) FOR SYSTEM_TIME AS OF DELTA_NUM 1",
     "FOR SYSTEM_TIME at line 1, column 26 must follow a table name"),
])
def test_each_malformed_clause_is_one_line_naming_it(query, message):
    with pytest.raises(SystemTimeError) as refused:
        parse_system_time(query, TABLES)

    assert str(refused.value) == message
    assert "\n" not in str(refused.value)
