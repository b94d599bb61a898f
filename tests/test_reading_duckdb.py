"""SQL without a JVM (`offset_assets/reading/duckdb_sql.py`): DuckDB over the Arrow reads
of one catalog state answers every query of the reading tests as Spark does, row for row
and type for type; a read surface refuses statements that write, on both engines; and
`offset-assets sql` over a local warehouse imports neither PySpark nor Dagster."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from offset_assets.control_plane import connect
from offset_assets.reading.duckdb_sql import choose_engine, duckdb_sql
from offset_assets.reading.errors import WriteRefusedError
from offset_assets.reading.tables import VersionedTables, to_arrow
from tests.reading_story import clause_reads, write_history

ROOT = Path(__file__).resolve().parent.parent
# Beyond the clauses: aggregates, a join of two tables with columns of one name, Spark's
# dialect (back-quoted names, a double-quoted string), a CTE shadowing a table, ordering.
MORE = [
    "SELECT count(*) AS n FROM posts FOR SYSTEM_TIME AS OF DELTA_NUM 1",
    "SELECT user_id, count(*) AS n, max(text) AS last FROM posts GROUP BY user_id",
    "SELECT * FROM posts p JOIN profiles r ON p.user_id = r.id",
    'SELECT `p`.`text`, "a string" AS s FROM posts AS p WHERE p.text <> "b again"',
    "WITH posts AS (SELECT 1 AS post_id) SELECT * FROM posts",
    "SELECT post_id, text FROM posts FOR SYSTEM_TIME STARTED IN (1, 5) ORDER BY post_id, sys_from LIMIT 4",
]


def canonical(rows: list[dict]) -> list[str]:
    """Rows as sorted JSON texts, null fields left out (as `clause_reads` gives them)."""
    return sorted(json.dumps({k: v for k, v in row.items() if v is not None}, sort_keys=True) for row in rows)


@pytest.mark.quick
def test_every_query_of_the_reading_tests_through_duckdb_equals_spark(spark, sqlite_url, warehouse):
    through_spark = clause_reads(spark, sqlite_url, warehouse)  # the history, and Spark's rows of each clause
    tables = VersionedTables(spark, sqlite_url)

    for query, (spark_rows, _) in through_spark.items():
        assert canonical(duckdb_sql(sqlite_url, query).to_pylist()) == canonical(spark_rows), query
    for query in MORE:
        by_spark, by_duckdb = to_arrow(tables.sql(query)), duckdb_sql(sqlite_url, query)
        assert by_duckdb.column_names == by_spark.column_names, query
        assert by_duckdb.schema.types == by_spark.schema.types, query
        if "ORDER BY" in query:
            assert by_duckdb.to_pylist() == by_spark.to_pylist(), query
        else:
            assert canonical(by_duckdb.to_pylist()) == canonical(by_spark.to_pylist()), query
    assert duckdb_sql(sqlite_url, MORE[0]).to_pylist() == [{"n": 5}]


@pytest.mark.parametrize("statement", [
    "INSERT OVERWRITE DIRECTORY '{out}' USING parquet SELECT * FROM posts",
    "CREATE TABLE copied AS SELECT * FROM posts",
    "DROP TABLE posts",
    "WITH p AS (SELECT * FROM posts) INSERT INTO copied SELECT * FROM p",
    "FROM posts INSERT OVERWRITE DIRECTORY '{out}' SELECT *",
    "SELECT 1; DROP TABLE posts",
    "SET spark.sql.shuffle.partitions = 1",
    "COPY (SELECT * FROM posts) TO '{out}'",
])
def test_a_read_surface_refuses_a_statement_that_writes_on_both_engines(spark, sqlite_url, warehouse, tmp_path,
                                                                         statement):
    write_history(spark, sqlite_url, warehouse, posts_deltas=1)
    statement = statement.format(out=tmp_path / "out")

    with pytest.raises(WriteRefusedError) as by_spark:
        VersionedTables(spark, sqlite_url).sql(statement)
    with pytest.raises(WriteRefusedError) as by_duckdb:
        duckdb_sql(sqlite_url, statement)

    assert str(by_spark.value) == str(by_duckdb.value)
    assert "\n" not in str(by_spark.value)
    assert not (tmp_path / "out").exists()


def test_auto_chooses_duckdb_for_a_small_local_warehouse_and_spark_beyond_the_limit(spark, sqlite_url, warehouse):
    write_history(spark, sqlite_url, warehouse)
    plane = connect(sqlite_url)
    query = "SELECT * FROM posts FOR SYSTEM_TIME AS OF DELTA_NUM 2 JOIN profiles ON posts.user_id = profiles.id"

    # posts wrote 14 versions (upserts and tombstones), profiles 4.
    assert choose_engine(plane, query) == "duckdb"
    assert choose_engine(plane, query, limit=18) == "duckdb"
    assert choose_engine(plane, query, limit=17) == "spark"
    assert choose_engine(plane, "SELECT 1") == "duckdb"


def test_sql_over_a_local_warehouse_imports_neither_pyspark_nor_dagster(spark, sqlite_url, warehouse, tmp_path):
    write_history(spark, sqlite_url, warehouse)
    child = (
        "import sys\n"
        "from offset_assets.cli import main\n"
        "try:\n"
        "    main(['--db-url', sys.argv[1], 'sql', 'SELECT count(*) AS n FROM posts FOR SYSTEM_TIME AS OF DELTA_NUM 1',"
        " '--format', 'json'])\n"
        "except SystemExit as done:\n"
        "    assert done.code in (0, None), done.code\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'pyspark', 'dagster', 'py4j'}))\n"
    )
    no_java = {**os.environ, "JAVA_HOME": str(tmp_path / "no-java")}

    ran = subprocess.run([sys.executable, "-c", child, sqlite_url], cwd=ROOT, env=no_java, capture_output=True,
                         text=True, timeout=300)

    assert ran.returncode == 0, ran.stderr[-2000:]
    assert ran.stdout.splitlines() == ['{"n": 5}', "[]"]
    assert ran.stderr == ""


def test_the_reads_without_a_jvm_spell_the_arrow_types_spark_gives():
    # Spark's own conversion of the types a versioned table holds, against ours.
    from pyspark.sql.pandas.types import to_arrow_schema

    from offset_assets.reading.arrow_types import arrow_schema
    from tests.test_reading_arrow import EVOLVED

    assert arrow_schema(EVOLVED.json()) == to_arrow_schema(EVOLVED, timezone="UTC")
