"""Bad input to a versioned table: a clear error naming the table and what is wrong, and
nothing written (the hot delta stays usable, no file is left behind)."""

from __future__ import annotations

import pytest
from pyspark.sql import functions as F
from pyspark.sql.types import (
    DoubleType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
)

from offset_assets.control_plane import connect
from offset_assets.errors import OffsetAssetsError
from offset_assets.versioned import VersionedTable
from offset_assets.versioned.errors import (
    DeltaClosedError,
    InvalidSysOpError,
    NullKeyError,
    SchemaMismatchError,
    TableDefinitionError,
    VersionedTableError,
)
from offset_assets.versioned.layout import WarehouseFiles

SCHEMA = StructType(
    [
        StructField("shop", StringType(), False),
        StructField("day", IntegerType(), False),
        StructField("amount", DoubleType()),
        StructField("currency", StringType(), False),
    ]
)


@pytest.fixture
def sales(spark, sqlite_url, warehouse) -> VersionedTable:
    table = VersionedTable(spark, connect(sqlite_url), "sales", ["shop", "day"], SCHEMA, warehouse=warehouse)
    table.write_delta(spark.createDataFrame([("a", 1, 10.0, "EUR")], SCHEMA))
    return table


def good_row(spark):
    return spark.createDataFrame([("b", 2, 5.0, "EUR")], SCHEMA)


ROWS = "shop string, day int, amount double, currency string"
BAD_INPUTS = {
    "missing key column": (
        lambda s: s.createDataFrame([("b", 1.0, "EUR")], "shop string, amount double, currency string"),
        SchemaMismatchError,
        r"missing primary-key column\(s\) \['day'\]",
    ),
    "missing column": (
        lambda s: s.createDataFrame([("b", 2, "EUR")], "shop string, day int, currency string"),
        SchemaMismatchError,
        r"missing column\(s\) \['amount'\]",
    ),
    "extra column": (
        lambda s: good_row(s).withColumn("colour", F.lit("red")),
        SchemaMismatchError,
        r"unknown column\(s\) \['colour'\]",
    ),
    "a column under another name": (
        lambda s: s.createDataFrame([("b", 2, 5.0, "EUR")], "shop string, day int, amount_eur double, currency string"),
        SchemaMismatchError,
        r"missing column\(s\) \['amount'\] and unknown column\(s\) \['amount_eur'\]; the table has "
        r"\['shop', 'day', 'amount', 'currency'\]",
    ),
    "incompatible type": (
        lambda s: good_row(s).withColumn("day", F.lit("monday")),
        SchemaMismatchError,
        r"incompatible column type\(s\) \['day: string \(table: int\)'\]",
    ),
    "narrowing type": (
        lambda s: good_row(s).withColumn("day", F.lit(2).cast(LongType())),
        SchemaMismatchError,
        r"day: bigint \(table: int\)",
    ),
    "sys_op type": (
        lambda s: good_row(s).withColumn("sys_op", F.lit("delete")),
        SchemaMismatchError,
        r"sys_op: string",
    ),
    "null in a key column declared not nullable": (
        lambda s: s.createDataFrame([("b", None, 1.0, "EUR"), ("c", 1, 1.0, "EUR")], ROWS),
        NullKeyError,
        r"null in primary-key column\(s\) \['shop', 'day'\], which the schema declares not nullable .*"
        r"for key\(s\) \[\{'shop': 'b', 'day': None\}\]",
    ),
    "null in non-nullable column": (
        lambda s: s.createDataFrame([("b", 3, 1.0, None)], ROWS),
        NullKeyError,
        r"non-nullable column\(s\) \['currency'\] for key\(s\) \[\{'shop': 'b', 'day': 3\}\]",
    ),
    "sys_op 2": (
        lambda s: good_row(s).withColumn("sys_op", F.lit(2)),
        InvalidSysOpError,
        r"sys_op must be 0 \(upsert\) or 1 \(delete\), found 2 for key\(s\) \[\{'shop': 'b'",
    ),
    "sys_op null": (
        lambda s: good_row(s).withColumn("sys_op", F.lit(None).cast("int")),
        InvalidSysOpError,
        r"found null",
    ),
}


def test_bad_input_is_refused_naming_table_and_problem_and_nothing_is_written(spark, sales):
    hot = sales.open_delta()
    for case, (make_df, error, message) in BAD_INPUTS.items():
        assert issubclass(error, OffsetAssetsError)
        with pytest.raises(error, match=rf"table 'sales': .*{message}"):
            hot.write(make_df(spark))
            pytest.fail(f"{case}: accepted")
    assert not WarehouseFiles().exists(hot.data_path)
    assert hot.rows_upserted == hot.rows_deleted == 0
    # The hot delta is still usable after refused writes.
    hot.write(good_row(spark))
    hot.commit()
    assert sorted(r.shop for r in sales.read_actual().collect()) == ["a", "b"]


def test_safe_widening_casts_are_accepted(spark, sales):
    narrower = spark.createDataFrame([("c", 3, 7, "EUR")], "shop string, day short, amount int, currency string")
    sales.write_delta(narrower)
    row = sales.read_actual(where_in={"shop": ["c"]}).first()
    assert (row.day, row.amount) == (3, 7.0)


def test_delete_takes_primary_key_columns_only(spark, sales):
    hot = sales.open_delta()
    with pytest.raises(SchemaMismatchError, match=r"'sales'.*primary-key columns \['shop', 'day'\] only"):
        hot.delete(spark.createDataFrame([("a", 1, 10.0)], "shop string, day int, amount double"))
    with pytest.raises(SchemaMismatchError, match=r"missing primary-key column\(s\) \['day'\]"):
        hot.delete(spark.createDataFrame([("a",)], "shop string"))


def test_write_or_commit_on_a_closed_delta_is_refused(spark, sales):
    hot = sales.open_delta()
    hot.write(good_row(spark))
    hot.commit()
    with pytest.raises(DeltaClosedError, match=r"'sales': cannot write to delta 2: it is already committed"):
        hot.write(good_row(spark))
    with pytest.raises(DeltaClosedError, match=r"cannot commit delta 2: it is already committed"):
        hot.commit()
    with pytest.raises(DeltaClosedError, match=r"cannot roll back delta 2"):
        hot.rollback()
    assert sales.last_committed().delta_num == 2


def test_reads_refuse_deltas_that_are_not_committed_and_bad_ranges(spark, sales):
    with pytest.raises(VersionedTableError, match=r"'sales': delta 5 is not committed \(last committed: 1\)"):
        sales.read_actual(as_of_delta=5)
    with pytest.raises(VersionedTableError, match=r"d1 > d2"):
        sales.read_started_in(3, 2)
    with pytest.raises(VersionedTableError, match=r"update_ts must be a finite number"):
        sales.read_changes_since(float("nan"))
    with pytest.raises(VersionedTableError, match=r"where_in column 'colour'"):
        sales.read_actual(where_in={"colour": ["red"]})


@pytest.mark.parametrize(
    ("name", "primary_key", "schema", "message"),
    [
        ("bad/name", ["id"], StructType([StructField("id", LongType())]), "name must be"),
        ("t", [], StructType([StructField("id", LongType())]), "primary key of at least one column"),
        ("t", ["key"], StructType([StructField("id", LongType())]), r"primary-key column\(s\) \['key'\] not in"),
        ("t", ["id"], StructType([StructField("id", LongType()), StructField("sys_from", LongType())]), "reserved"),
        ("t", ["id"], StructType([StructField("id", LongType()), StructField("${env:HOME}", LongType())]),
         r"column name\(s\) \['\$\{env:HOME\}'\] hold '\$\{', which Spark's SQL parser reads as a variable"),
        (
            "t",
            ["id"],
            StructType([StructField("id", LongType()), StructField("m", MapType(StringType(), LongType()))]),
            "is a map",
        ),
    ],
    ids=["name", "no-key", "key-not-in-schema", "reserved-column", "variable-in-column-name", "map-column"],
)
def test_invalid_definitions_are_refused(spark, sqlite_url, warehouse, name, primary_key, schema, message):
    with pytest.raises(TableDefinitionError, match=message):
        VersionedTable(spark, connect(sqlite_url), name, primary_key, schema, warehouse=warehouse)
