"""`in_values`: the IN filter of a key lookup, built in one JVM call, selects exactly the
rows `Column.isin` selects, for every value the engine's keys can hold; a datetime by
what the column holds (an instant, or a wall-clock time), which `isin` does not know;
and a None the rows that hold NULL (a NULL key is a key), which `isin` never selects."""

from __future__ import annotations

import datetime
import decimal
import enum

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import functions as F
from pyspark.sql.types import (
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from offset_assets.versioned.in_filter import in_values

TEXT = st.text(alphabet=st.characters(blacklist_categories=["Cs"]), max_size=6) | st.sampled_from(
    ["", "'", "\\", "\\'", "a'b", "C:\\x", "\\n", "\n", "--", "/*", "é", "日本", "NULL", "'); DROP",
     "${spark.sql.shuffle.partitions}", "${env:HOME}", "$", "2"]
)
INTS = st.integers(min_value=-(2**63), max_value=2**63 - 1) | st.sampled_from(
    [0, -1, 2**31 - 1, 2**31, -(2**31), -(2**31) - 1, 2**63 - 1, -(2**63)]
)
FLOATS = st.floats(allow_nan=False, allow_infinity=False) | st.sampled_from([0.0, -0.0, 1e-300, 1e300, 0.1, -2.5])
CASES = {
    "text": (StringType(), TEXT),
    "number": (LongType(), INTS),
    "real": (DoubleType(), FLOATS),
    "flag": (BooleanType(), st.booleans()),
    # From year 1000: `isin` cannot make a literal of an earlier date (pyspark spells the
    # year with fewer than four digits, which Java's `Date.valueOf` refuses).
    "day": (DateType(), st.dates(min_value=datetime.date(1000, 1, 1)) | st.sampled_from(
        [datetime.date(1582, 10, 4), datetime.date(1582, 10, 15), datetime.date(1970, 1, 1),
         datetime.date(9999, 12, 31)])),
}
SLOW_EXAMPLES = settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def selected(df, condition) -> list:
    return sorted(row.i for row in df.where(condition).collect())


def same_selection(df, wanted) -> tuple[list, list]:
    """Rows kept by `in_values` and by `isin` (or IS NULL, for a None wanted), from one Spark job."""
    isin = F.col("c").isin(wanted) | F.col("c").isNull() if None in wanted else F.col("c").isin(wanted)
    both = df.select("i", in_values("c", wanted).alias("ours"), isin.alias("isin")).collect()
    return sorted(row.i for row in both if row.ours), sorted(row.i for row in both if row.isin)


@pytest.mark.parametrize(("case", "escaped_literals"), [(case, "false") for case in sorted(CASES)] + [("text", "true")])
def test_in_values_selects_the_rows_isin_selects(spark, case, escaped_literals):
    data_type, values = CASES[case]
    schema = StructType([StructField("i", LongType()), StructField("c", data_type)])

    @SLOW_EXAMPLES
    @given(stored=st.lists(values | st.none(), min_size=1, max_size=8),
           wanted=st.lists(values | st.none(), min_size=1, max_size=8), reuse=st.integers(0, 3))
    def check(stored, wanted, reuse):
        wanted = wanted + stored[:reuse]  # some wanted values are stored, some are not
        df = spark.createDataFrame(list(enumerate(stored)), schema)
        ours, theirs = same_selection(df, wanted)
        assert ours == theirs

    spark.conf.set("spark.sql.parser.escapedStringLiterals", escaped_literals)
    try:
        check()
    finally:
        spark.conf.unset("spark.sql.parser.escapedStringLiterals")


@pytest.mark.quick
def test_in_values_is_one_sql_expression_for_strings_and_numbers(spark):
    """Strings with quotes or backslashes are spelled in hex: the same bytes whatever the
    parser's escape setting. (A Column is built by the JVM: the session must be running.)"""
    assert str(in_values("id", ["k1", "it's"])) == (
        "Column<'`id` IN ('k1', CAST(X'69742773' AS STRING))'>"
    )
    assert str(in_values("n", [1, 2**40, -3])) == "Column<'`n` IN (1, 1099511627776L, (-3))'>"
    assert str(in_values("n", [enum.IntFlag("Bits", "A B")(2)])) == "Column<'`n` IN (2)'>"
    assert str(in_values("d", [datetime.date(2026, 11, 29)])) == "Column<'`d` IN (DATE '2026-11-29')'>"


@pytest.mark.quick
def test_a_none_among_the_values_selects_the_rows_that_hold_null(spark):
    df = spark.createDataFrame([(0, None), (1, 1), (2, 2)], "i long, c long")
    assert selected(df, in_values("c", [None])) == [0]
    assert selected(df, in_values("c", [2, None])) == [0, 2]
    assert str(in_values("c", [2, None])) == "Column<'`c` IN (2) OR `c` IS NULL'>"
    assert selected(df, in_values("c", [2])) == [2]
    assert selected(df.where(~in_values("c", [2])), "true") == [1]  # NULL IN (2) is NULL, as with isin
    dollar = spark.createDataFrame([(0, None), (1, 1), (2, 2)], "i long, `c$` long")  # through isin
    assert selected(dollar, in_values("c$", [None, 1])) == [0, 1]


def test_dates_before_year_1000_are_found_where_isin_cannot_spell_them(spark):
    days = [datetime.date(1, 1, 1), datetime.date(999, 12, 31), datetime.date(2026, 11, 29)]
    df = spark.createDataFrame(list(enumerate(days)), "i long, d date")
    assert selected(df, in_values("d", days[:2])) == [0, 1]


def test_values_without_a_safe_literal_fall_back_to_isin(spark):
    schema = StructType([StructField("i", LongType()), StructField("m", DecimalType(10, 2)),
                         StructField("x", DoubleType())])
    money = decimal.Decimal("12.50")
    df = spark.createDataFrame([(1, money, float("nan")), (2, decimal.Decimal("1.00"), 1.0)], schema)
    assert selected(df, in_values("m", [money])) == [1]
    assert selected(df, in_values("x", [float("nan"), 3.0])) == [1]
    assert selected(df, in_values("x", [])) == []


@pytest.mark.quick
def test_a_key_that_looks_like_a_spark_variable_is_not_substituted(spark):
    """Spark replaces `${name}` in SQL text by a conf value before parsing: such a key
    must still match only itself."""
    keys = ["${spark.sql.shuffle.partitions}", "${env:HOME}", spark.conf.get("spark.sql.shuffle.partitions")]
    df = spark.createDataFrame(list(enumerate(keys)), "i long, c string")
    assert selected(df, in_values("c", keys[:1])) == [0]
    assert selected(df, in_values("c", keys[1:2])) == [1]
    assert selected(df, in_values("c", keys[2:])) == [2]


def test_datetimes_mean_what_the_column_holds_whatever_the_session_time_zone(spark):
    """A collected datetime is a naive wall-clock time: the process's local time for a
    timestamp, the stored time for one without time zone. Rendered by the column's type,
    each selects its row also when the session's time zone is not the process's (UTC)."""
    spark.conf.set("spark.sql.session.timeZone", "America/New_York")
    df = spark.sql("SELECT 1L AS i, TIMESTAMP'2026-06-01 12:00:00.25' AS t, TIMESTAMP_NTZ'2026-06-01 12:00:00' AS n "
                   "UNION ALL SELECT 2L, TIMESTAMP'2026-06-01 16:00:00', TIMESTAMP_NTZ'2026-06-01 16:00:00'")
    first = df.where("i = 1").first()
    t, n = (in_values(c, [first[c]], df.schema[c].dataType) for c in ("t", "n"))

    assert (selected(df, t), selected(df, n)) == ([1], [1])
    assert str(t) == "Column<'`t` IN (timestamp_micros(1780329600250000L))'>"
    assert str(n) == "Column<'`n` IN (TIMESTAMP_NTZ '2026-06-01 12:00:00.000000')'>"
