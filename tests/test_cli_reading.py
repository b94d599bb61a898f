"""`offset-assets show` and `offset-assets sql` on the demo's state (`make demo` at a small
size, `tests/demo_state.py`): what they print equals Spark's read of the same tables."""

from __future__ import annotations

import csv
import io
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from pyspark.errors import AnalysisException

from offset_assets.cli import main
from offset_assets.config import default_db_url
from offset_assets.control_plane import connect
from offset_assets.control_plane.delta_catalog import DeltaCatalog
from offset_assets.reading.tables import VersionedTables
from tests.reading_story import write_history

ROOT = Path(__file__).resolve().parent.parent
JOIN = ("SELECT e.post_id, p.name FROM enriched_posts FOR SYSTEM_TIME AS OF DELTA_NUM 1 AS e "
        "JOIN profiles p ON e.user_id = p.id WHERE p.id = 4 ORDER BY e.post_id")


def invoke(*args: str, stdin: str | None = None):
    return CliRunner().invoke(main, list(args), input=stdin)


def installed(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """The installed `offset-assets` command, run as a user runs it."""
    return subprocess.run([str(Path(sys.executable).parent / "offset-assets"), *args], cwd=ROOT,
                          env={**os.environ, **(env or {})}, capture_output=True, text=True, timeout=600)


def test_show_prints_the_actual_state_as_spark_reads_it(spark, demo):
    every_row = invoke("show", "enriched_posts", "--limit", "0", "--format", "json")
    default = invoke("show", "enriched_posts")

    assert every_row.exit_code == 0, every_row.output
    shown = [json.loads(line) for line in every_row.stdout.splitlines()]
    spark_read = VersionedTables(spark, default_db_url()).read("enriched_posts").collect()
    assert sorted(row["post_id"] for row in shown) == sorted(row.post_id for row in spark_read)
    assert len(shown) == 30 + 3 - 1  # the demo's posts, its inserts, its delete
    assert list(shown[0]) == ["post_id", "user_id", "author", "text", "updated_at", "sys_from", "sys_to", "sys_op",
                              "update_ts"]
    by_post = {row.post_id: row for row in spark_read}
    assert all(row["author"] == by_post[row["post_id"]].author for row in shown)
    assert default.exit_code == 0
    header, *rows = default.stdout.splitlines()
    assert header.split() == list(shown[0]) and len(rows) == 20
    assert default.stderr == "(the first 20 rows; --limit N for more, --limit 0 for all)\n"


def test_show_reads_a_table_beyond_max_bytes_through_spark(spark, demo):
    without_jvm = invoke("show", "profiles", "--format", "json")
    through_spark = invoke("show", "profiles", "--format", "json", "--max-bytes", "100")

    assert through_spark.exit_code == 0, through_spark.output
    assert through_spark.stderr.startswith("table 'profiles': its actual state is read from ")
    assert through_spark.stderr.endswith("above max_bytes=100 for a read without a JVM: read it with Spark "
                                         "(VersionedTables, offset-assets sql), or raise max_bytes: reading it "
                                         "through Spark\n")
    assert sorted(map(json.loads, through_spark.stdout.splitlines()), key=repr) == sorted(
        map(json.loads, without_jvm.stdout.splitlines()), key=repr)


def test_show_as_of_a_delta_prints_the_state_that_delta_left(demo):
    renamed, (before, after) = 4, demo.story.renamed[4]

    first = invoke("show", "profiles", "--as-of", "1", "--format", "csv")
    last = invoke("show", "profiles", "--format", "csv")

    assert first.exit_code == 0 and last.exit_code == 0, first.output
    names = {int(row["id"]): row["name"] for row in csv.DictReader(io.StringIO(first.stdout))}
    assert len(names) == 6 and names[renamed] == before
    assert {int(row["id"]): row["name"] for row in csv.DictReader(io.StringIO(last.stdout))}[renamed] == after
    beyond = invoke("show", "profiles", "--as-of", "9")
    assert beyond.exit_code == 1
    assert beyond.stderr == "error: table 'profiles': delta 9 is not committed (last committed: 2)\n"
    unknown = invoke("show", "profile")
    assert unknown.exit_code == 1 and unknown.stderr.startswith("error: no versioned table 'profile' in the delta ")


def test_sql_reads_a_system_time_clause_and_another_table_at_one_state(spark, demo):
    result = invoke("sql", JOIN, "--format", "csv")
    from_stdin = invoke("sql", "-", "--format", "csv", stdin=JOIN)

    assert result.exit_code == 0, result.output
    printed = list(csv.reader(io.StringIO(result.stdout)))
    expected = VersionedTables(spark, default_db_url()).sql(JOIN).collect()
    assert printed == [["post_id", "name"], *[[str(row.post_id), row.name] for row in expected]]
    assert len(printed) > 1 and {name for _, name in printed[1:]} == {demo.story.renamed[4][1]}
    assert from_stdin.stdout == result.stdout


def test_sql_errors_are_one_line_without_a_trace(spark, demo):
    malformed = invoke("sql", "SELECT * FROM posts FOR SYSTEM_TIME AS OF DELTA 2")
    unresolved = invoke("sql", "SELECT no_such_column FROM posts")

    assert malformed.exit_code == 1
    assert malformed.stderr == ("error: malformed FOR SYSTEM_TIME clause on 'posts' at line 1, column 43: expected "
                                "DELTA_NUM <n>, '<timestamp>' or LATEST_UNCOMMITTED_DELTA, found 'DELTA'\n")
    assert unresolved.exit_code == 1
    assert unresolved.stderr.startswith("error: [UNRESOLVED_COLUMN.WITH_SUGGESTION] A column, variable, or function "
                                        "parameter with name `no_such_column` cannot be resolved.")
    assert unresolved.stderr.count("\n") == 1


def test_a_query_error_after_the_cli_quieted_pysparks_loggers_is_still_sparks_error(spark, demo, monkeypatch):
    # As in a fresh process: PySpark has not made its query-context loggers yet.
    for name in ("SQLQueryContextLogger", "DataFrameQueryContextLogger"):
        monkeypatch.delitem(logging.Logger.manager.loggerDict, name, raising=False)

    assert invoke("sql", "SELECT no_such_column FROM posts").exit_code == 1
    with pytest.raises(AnalysisException, match="UNRESOLVED_COLUMN"):
        spark.range(1).select("no_such_column").collect()


def test_show_and_a_refused_clause_need_no_java_from_a_shell(demo, tmp_path):
    def shell(*args: str) -> subprocess.CompletedProcess:
        no_java = {**os.environ, "OFFSET_ASSETS_HOME": str(demo.state), "JAVA_HOME": str(tmp_path / "no-java")}
        return subprocess.run([str(Path(sys.executable).parent / "offset-assets"), *args], cwd=ROOT, env=no_java,
                              capture_output=True, text=True, timeout=300)

    shown = shell("show", "user_post_stats", "-n", "3")
    refused = shell("sql", "SELECT * FROM enriched_posts FOR SYSTEM_TIME STARTED IN (2, 3)")

    assert shown.returncode == 0, shown.stderr
    header, *rows = shown.stdout.splitlines()
    assert header.split()[0] == "user_id" and "post_count" in header.split() and len(rows) == 3
    assert shown.stderr == "(the first 3 rows; --limit N for more, --limit 0 for all)\n"
    # Checked against the catalog before a driver starts: the error is the clause's, not Java's.
    assert refused.returncode == 1
    assert refused.stderr == ("error: FOR SYSTEM_TIME STARTED IN (2, 3) on 'enriched_posts' (line 1, column 30): "
                              "delta 3 is not committed (last committed: 2)\n")


def test_the_shells_reads_without_a_jvm_import_no_pandas_and_a_query_for_spark_still_runs_on_spark(spark, demo):
    """pyarrow imports pandas at its first conversion of a Python value, 0.3 s of a query
    from a shell (docs/benchmark.md); the console script keeps it out of its reads without
    a JVM (`cli.base.pandas_kept_out`), which answer as the same command run in-process
    does, and a query DuckDB cannot run still goes to Spark in the same process."""
    query = ("SELECT user_id, count(*) AS n FROM enriched_posts FOR SYSTEM_TIME AS OF DELTA_NUM 1 "
             "GROUP BY user_id ORDER BY user_id")
    imports = {"PYTHONPROFILEIMPORTTIME": "1", "OFFSET_ASSETS_HOME": str(demo.state)}

    def imported(ran: subprocess.CompletedProcess) -> set[str]:
        # Refused imports are listed too (`pandas` alone, in microseconds): pandas loaded
        # is `pandas.core` imported.
        return {line.rsplit("|", 1)[-1].strip() for line in ran.stderr.splitlines() if line.startswith("import time:")}

    queried = installed("sql", query, "--engine", "duckdb", "--format", "csv", env=imports)
    shown = installed("show", "enriched_posts", "--limit", "0", "--format", "csv", env=imports)
    on_spark = installed("sql", "SELECT count(*) AS n FROM posts WHERE spark_partition_id() >= 0", "--format", "csv",
                         env={"OFFSET_ASSETS_HOME": str(demo.state)})

    assert queried.returncode == 0 and shown.returncode == 0, queried.stderr[-2000:] + shown.stderr[-2000:]
    assert "duckdb" in imported(queried) and "pandas.core" not in imported(queried)
    assert "pyarrow" in imported(shown) and "pandas.core" not in imported(shown)
    assert queried.stdout == invoke("sql", query, "--engine", "duckdb", "--format", "csv").stdout
    assert shown.stdout == invoke("show", "enriched_posts", "--limit", "0", "--format", "csv").stdout
    assert on_spark.returncode == 0, on_spark.stderr[-2000:]
    posts = VersionedTables(spark, default_db_url()).read("posts").count()
    assert on_spark.stdout.splitlines() == ["n", str(posts)]


def test_sql_prints_two_result_columns_of_one_name_each_with_its_own_values(spark, sqlite_url, warehouse):
    posts, profiles = write_history(spark, sqlite_url, warehouse)
    then_and_now = ("SELECT p.post_id, p.text, now.text FROM posts FOR SYSTEM_TIME AS OF DELTA_NUM 1 AS p "
                    "JOIN posts now ON now.post_id = p.post_id WHERE p.post_id = 1")
    both_tables = "SELECT * FROM posts p JOIN profiles r ON p.user_id = r.id WHERE p.post_id = 1"

    table = installed("--db-url", sqlite_url, "sql", then_and_now)
    as_csv = installed("--db-url", sqlite_url, "sql", both_tables, "--format", "csv")
    as_json = invoke("--db-url", sqlite_url, "sql", then_and_now, "--format", "json")

    assert table.returncode == 0, table.stderr
    assert table.stdout.splitlines() == ["post_id  text  text", "1        a     a3"]
    assert as_csv.returncode == 0, as_csv.stderr
    post_ts, profile_ts = posts.delta(4).commit_ts, profiles.delta(1).commit_ts
    assert list(csv.reader(io.StringIO(as_csv.stdout))) == [
        ["post_id", "user_id", "text", "sys_from", "sys_to", "sys_op", "update_ts",
         "id", "name", "sys_from", "sys_to", "sys_op", "update_ts"],
        ["1", "1", "a3", "4", "", "0", str(post_ts), "1", "ann", "1", "", "0", str(profile_ts)]]
    # A JSON object holds a key once: the second `text` is numbered.
    assert as_json.exit_code == 0, as_json.output
    assert [json.loads(line) for line in as_json.stdout.splitlines()] == [{"post_id": 1, "text": "a", "text_2": "a3"}]


@pytest.mark.parametrize(("args", "message"), [
    (["sql", "SELECT * FROM posts FOR SYSTEM_TIME AS OF DELTA_NUM ²"],
     "malformed FOR SYSTEM_TIME clause on 'posts' at line 1, column 53: expected a delta number, found '²'"),
    (["sql", "SELECT * FROM posts FOR SYSTEM_TIME AS OF DELTA_NUM ٣"],
     "malformed FOR SYSTEM_TIME clause on 'posts' at line 1, column 53: expected a delta number, found '٣'"),
    (["sql", "SELECT * FROM posts FOR SYSTEM_TIME AS OF DELTA_NUM 2.5"],
     "malformed FOR SYSTEM_TIME clause on 'posts' at line 1, column 53: expected a delta number, found '2.5'"),
    (["sql", "SELECT * FROM posts FOR SYSTEM_TIME AS OF DELTA_NUM 99999999999999999999"],
     "malformed FOR SYSTEM_TIME clause on 'posts' at line 1, column 53: expected a delta number, found "
     "'99999999999999999999'"),
    (["sql", "SELECT * FROM posts FOR SYSTEM_TIME STARTED IN (-1, 2)"],
     "malformed FOR SYSTEM_TIME clause on 'posts' at line 1, column 49: expected a delta number, found '-'"),
    (["sql", "SELECT * FROM posts FOR SYSTEM_TIME FINISHED IN (, 2)"],
     "malformed FOR SYSTEM_TIME clause on 'posts' at line 1, column 50: expected a delta number, found ','"),
    (["sql", "SELECT * FROM posts FOR SYSTEM_TIME AS OF ''"],
     "FOR SYSTEM_TIME AS OF '' on 'posts' (line 1, column 21): '' is not an ISO 8601 timestamp"),
    (["sql", "SELECT * FROM posts FOR SYSTEM_TIME AS OF LATEST_UNCOMMITTED_DELTA"],
     "FOR SYSTEM_TIME AS OF LATEST_UNCOMMITTED_DELTA on 'posts' (line 1, column 21): only the writer holding the "
     "table's hot delta reads it (VersionedTables.sql(..., hot_deltas=[that HotDelta])); 'posts' has no hot delta"),
    (["sql", "SELECT * FROM posts FOR SYSTEM_TIME STARTED TS ('2026-01-02', '2026-01-01')"],
     "FOR SYSTEM_TIME STARTED TS ('2026-01-02', '2026-01-01') on 'posts' (line 1, column 21): an empty range: "
     "'2026-01-02' is after '2026-01-01'"),
    *[(["show", "posts", "--as-of", value],
       f"table 'posts': as of {value!r}: neither a delta number (ASCII digits) nor an ISO 8601 time")
      for value in ("²", "٣", "2.5", "-1", "")],
])
def test_a_malformed_clause_value_is_refused_in_one_line_before_a_driver_starts(sqlite_url, tmp_path, args, message):
    # Three committed deltas of `posts` in the catalog: `٣` would name one of them.
    catalog = DeltaCatalog(connect(sqlite_url))
    catalog.register_table("posts", ["post_id"], '{"type": "struct", "fields": []}')
    for _ in range(3):
        hot = catalog.open_hot("posts", "writer", None, lambda n: str(tmp_path / f"posts-{n}"))
        catalog.commit([("posts", hot.delta_num, 0, 0)])

    refused = installed("--db-url", sqlite_url, *args, env={"JAVA_HOME": str(tmp_path / "no-java")})

    assert (refused.returncode, refused.stdout, refused.stderr) == (1, "", f"error: {message}\n")
