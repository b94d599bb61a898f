"""Schema evolution of a versioned table: a new nullable column is compatible (older
versions read it as null); anything else that disagrees with the catalog is refused."""

from __future__ import annotations

import json

import pytest
from pyspark.sql.types import DoubleType, IntegerType, LongType, StringType, StructField, StructType

from offset_assets.control_plane import connect
from offset_assets.versioned import VersionedTable
from offset_assets.versioned.errors import TableDefinitionError

V1 = StructType([StructField("id", LongType(), False), StructField("name", StringType())])
V2 = StructType([*V1.fields, StructField("email", StringType(), True)])


def test_a_new_nullable_column_is_added_and_older_versions_read_it_as_null(spark, sqlite_url, warehouse):
    plane = connect(sqlite_url)
    v1 = VersionedTable(spark, plane, "customers", ["id"], V1, warehouse=warehouse)
    v1.write_delta(spark.createDataFrame([(1, "ann"), (2, "bob")], V1))

    v2 = VersionedTable(spark, plane, "customers", ["id"], V2, warehouse=warehouse)
    stored = json.loads(v2.catalog.table_spec("customers").schema_json)
    assert [f["name"] for f in stored["fields"]] == ["id", "name", "email"]
    assert sorted(tuple(r) for r in v2.read_actual().select("id", "name", "email").collect()) == [
        (1, "ann", None),
        (2, "bob", None),
    ]
    # Re-writing an old row with the new column null is no change; a value is a new version.
    written = v2.write_delta(spark.createDataFrame([(1, "ann", None), (2, "bob", "bob@x.org")], V2))
    assert (written.rows_upserted, written.rows_deleted) == (1, 0)
    assert sorted(tuple(r) for r in v2.read_actual().select("id", "email", "sys_from").collect()) == [
        (1, None, 1),
        (2, "bob@x.org", 2),
    ]
    # The old definition now lacks a column of the catalog: refused rather than silently dropping it.
    with pytest.raises(TableDefinitionError, match=r"'customers'.*\['email'\] that this definition lacks"):
        VersionedTable(spark, plane, "customers", ["id"], V1, warehouse=warehouse)


@pytest.mark.parametrize(
    ("primary_key", "schema", "message"),
    [
        (["name"], V1, r"primary key \['name'\] differs from the registered primary key \['id'\]"),
        (
            ["id"],
            StructType([StructField("id", LongType(), False), StructField("name", DoubleType())]),
            r"column type\(s\) differ from the catalog: \['name: string -> double'\]",
        ),
        (
            ["id"],
            StructType([*V1.fields, StructField("age", LongType(), False)]),
            r"new column\(s\) \['age'\] must be nullable",
        ),
    ],
    ids=["other-primary-key", "changed-type", "new-non-nullable-column"],
)
def test_incompatible_definitions_of_a_registered_table_are_refused(
    spark, sqlite_url, warehouse, primary_key, schema, message
):
    plane = connect(sqlite_url)
    VersionedTable(spark, plane, "customers", ["id"], V1, warehouse=warehouse)
    with pytest.raises(TableDefinitionError, match=rf"table 'customers': {message}"):
        VersionedTable(spark, plane, "customers", primary_key, schema, warehouse=warehouse)


AWKWARD = StructType([
    StructField("post id", LongType(), False),
    StructField("a b", StringType(), False),
    StructField("x.y", LongType()),
    StructField("nested", StructType([StructField("in:ner", LongType()), StructField("o'k", StringType())])),
])


def test_columns_named_with_spaces_dots_colons_and_quotes_are_written_versioned_and_read(
    spark, sqlite_url, warehouse
):
    plane = connect(sqlite_url)
    table = VersionedTable(spark, plane, "awkward", ["post id"], AWKWARD, warehouse=warehouse)
    table.write_delta(spark.createDataFrame([(1, "one", 10, (1, "p")), (2, "two", 20, (2, "q"))], AWKWARD))
    # The same row again (no version), a changed one, a new one; `x.y` given as an int.
    given = StructType([*AWKWARD.fields[:2], StructField("x.y", IntegerType()), AWKWARD.fields[3]])
    second = table.write_delta(spark.createDataFrame([(1, "one", 10, (1, "p")), (2, "TWO", 21, (2, "r")),
                                                     (3, "three", None, None)], given))
    assert (second.rows_upserted, second.rows_deleted) == (2, 0)
    deletes = StructType([*AWKWARD.fields, StructField("sys_op", IntegerType())])
    third = table.write_delta(spark.createDataFrame([(1, "gone", None, None, 1)], deletes))
    assert (third.rows_upserted, third.rows_deleted) == (0, 1)

    def rows(df):
        return sorted((r["post id"], r["a b"], r["x.y"], tuple(r["nested"]) if r["nested"] else None)
                      for r in df.collect())

    assert rows(table.read_actual()) == [(2, "TWO", 21, (2, "r")), (3, "three", None, None)]
    assert rows(table.read_actual(as_of_delta=1)) == [(1, "one", 10, (1, "p")), (2, "two", 20, (2, "q"))]
    # The tombstone carries the deleted version's data; history ends each replaced version.
    assert rows(table.read_finished_in(3, 3)) == [(1, "one", 10, (1, "p"))]
    ended = {(r["post id"], r["sys_from"], r["sys_to"]) for r in table.read_started_in(1, 3).collect()}
    assert ended == {(1, 1, 2), (2, 1, 1), (2, 2, None), (3, 2, None)}
