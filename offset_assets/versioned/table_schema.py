"""A versioned table's schema: what a definition may be, how it may evolve, and how
written DataFrames are checked against it.

Compatible evolution is adding nullable columns: the catalog schema becomes the union,
files written before read the new columns as null. Everything else (dropping a column,
changing a type, a new non-nullable column, another primary key) is refused, because
old files could no longer be read as the new definition claims.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pyspark.sql import DataFrame
from pyspark.sql.types import (
    ArrayType,
    ByteType,
    DataType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    IntegralType,
    LongType,
    MapType,
    NullType,
    ShortType,
    StructField,
    StructType,
)

from offset_assets.control_plane.names import NAME_MAX_LENGTH, InvalidNameError, validate_name
from offset_assets.versioned.errors import SchemaMismatchError, TableDefinitionError
from offset_assets.versioned.layout import SYS_FROM, SYS_OP, SYSTEM_COLUMNS
from offset_assets.versioned.sql_text import quoted, type_text

# The control plane's name rule (control_plane/names.py): a table name is a catalog key
# and a folder name. The meta table of a transformation is `_meta__<id>`, so
# transformation ids are kept shorter (engine/transformation.py).
TABLE_NAME_MAX_LENGTH = NAME_MAX_LENGTH
_INTEGRAL_RANK = {ByteType: 1, ShortType: 2, IntegerType: 3, LongType: 4}
_INTEGRAL_DIGITS = {ByteType: 3, ShortType: 5, IntegerType: 10, LongType: 19}


def column_name_problems(names: Sequence[str]) -> list[str]:
    """What makes a table's column names unusable, each as a sentence naming the columns:
    duplicates, the version metadata's own names, and `${` (inside the SQL text the table
    builds, Spark's parser would replace `${...}` with a variable's value:
    `spark.sql.variable.substitute`)."""
    problems = []
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        problems.append(f"duplicate column(s) {duplicates} in the schema {list(names)}")
    reserved = [n for n in names if n in SYSTEM_COLUMNS]
    if reserved:
        problems.append(f"column(s) {reserved} are reserved for version metadata")
    substituted = [n for n in names if "${" in n]
    if substituted:
        problems.append(f"column name(s) {substituted} hold '${{', which Spark's SQL parser reads as a variable")
    return problems


def validate_definition(name: str, primary_key: Sequence[str], schema: StructType) -> None:
    """Refuse a definition that cannot be stored: bad name, unusable column names
    (`column_name_problems`), primary key not in the schema, map columns (not comparable in Spark, so a
    version could not be told apart from its predecessor)."""
    validate_table_name(name)
    names = schema.fieldNames()
    problems = column_name_problems(names)
    if problems:
        raise TableDefinitionError(name, "; ".join(problems))
    if not primary_key:
        raise TableDefinitionError(name, "a primary key of at least one column is required")
    missing = [c for c in primary_key if c not in names]
    if missing:
        raise TableDefinitionError(name, f"primary-key column(s) {missing} not in the schema {names}")
    for field in schema.fields:
        if _contains_map(field.dataType):
            raise TableDefinitionError(
                name,
                f"column {field.name!r} is a map ({field.dataType.simpleString()}); "
                "maps cannot be compared, use an array of structs",
            )


def validate_table_name(name: object) -> None:
    """Refuse a name that the catalog or the file system could not hold as it is: the
    control plane's name rule, raised as this table's `TableDefinitionError`."""
    try:
        validate_name(name, "table name")
    except InvalidNameError as refused:
        shown = str(name)
        if len(shown) <= 40:
            raise TableDefinitionError(shown, refused.problem) from None
        raise TableDefinitionError(shown[:40] + "...", f"{refused.problem}: {name!r}") from None


def _contains_map(data_type: DataType) -> bool:
    if isinstance(data_type, MapType):
        return True
    if isinstance(data_type, ArrayType):
        return _contains_map(data_type.elementType)
    if isinstance(data_type, StructType):
        return any(_contains_map(f.dataType) for f in data_type.fields)
    return False


def evolve(name: str, stored: StructType, given: StructType) -> StructType | None:
    """The catalog schema after registering `given` over `stored`; None when unchanged."""
    given_types = {f.name: f for f in given.fields}
    dropped = [f.name for f in stored.fields if f.name not in given_types]
    if dropped:
        raise TableDefinitionError(
            name,
            f"the catalog schema has column(s) {dropped} that this definition lacks "
            "(dropping columns is not supported; update the definition)",
        )
    changed = [
        f"{f.name}: {f.dataType.simpleString()} -> {given_types[f.name].dataType.simpleString()}"
        for f in stored.fields
        if f.dataType.simpleString() != given_types[f.name].dataType.simpleString()
    ]
    if changed:
        raise TableDefinitionError(name, f"column type(s) differ from the catalog: {changed}")
    stored_names = set(stored.fieldNames())
    added = [f for f in given.fields if f.name not in stored_names]
    not_nullable = [f.name for f in added if not f.nullable]
    if not_nullable:
        raise TableDefinitionError(
            name, f"new column(s) {not_nullable} must be nullable: earlier versions have no value"
        )
    if not added:
        return None
    return StructType([*stored.fields, *added])


def file_schema(data_schema: StructType) -> StructType:
    """Columns of the Parquet files: data columns, then sys_op and sys_from."""
    return StructType(
        [
            *[StructField(f.name, f.dataType, True) for f in data_schema.fields],
            StructField(SYS_OP, IntegerType(), True),
            StructField(SYS_FROM, LongType(), True),
        ]
    )


def is_safe_cast(source: DataType, target: DataType) -> bool:
    """True when every value of `source` converts to `target` without loss."""
    if source.simpleString() == target.simpleString() or isinstance(source, NullType):
        return True
    if isinstance(source, IntegralType) and isinstance(target, IntegralType):
        return _INTEGRAL_RANK[type(source)] <= _INTEGRAL_RANK[type(target)]
    if isinstance(target, DoubleType):
        return isinstance(source, (FloatType, ByteType, ShortType, IntegerType))
    if isinstance(target, DecimalType):
        if isinstance(source, DecimalType):
            return target.scale >= source.scale and target.precision - target.scale >= source.precision - source.scale
        if isinstance(source, IntegralType):
            return target.precision - target.scale >= _INTEGRAL_DIGITS[type(source)]
    return False


def column_types(schema: StructType) -> dict[str, DataType]:
    """Column name -> type."""
    return {f.name: f.dataType for f in schema.fields}


def conform(
    table: str,
    df: DataFrame,
    schema: StructType,
    primary_key: Sequence[str],
    columns_allowed_missing: Sequence[str] = (),
    keep: Sequence[str] = (),
    given: Mapping[str, DataType] | None = None,
) -> DataFrame:
    """`df` as the table's data columns (cast to their types) plus `sys_op` (0 when absent),
    and the caller's own `keep` columns as they are.

    Refuses a missing primary-key or data column, an extra column, or a type that does
    not convert without loss; the error names the table and the columns. `given`: the
    types of `df`'s columns (other than `keep`) when the caller built them, so that they
    are not asked of `df` (a Spark Connect client asks the server to analyse its plan).
    """
    if given is None:
        given = column_types(df.schema)
    missing_keys = [c for c in primary_key if c not in given]
    if missing_keys:
        raise SchemaMismatchError(table, f"missing primary-key column(s) {missing_keys}")
    missing = [c for c in schema.fieldNames() if c not in given and c not in columns_allowed_missing]
    extra = [c for c in given if c not in schema.fieldNames() and c != SYS_OP and c not in keep]
    # Both at once are usually one column under another name: say both.
    if missing and extra:
        raise SchemaMismatchError(
            table,
            f"missing column(s) {missing} and unknown column(s) {extra}; the table has {schema.fieldNames()} "
            "(+ optional sys_op)",
        )
    if missing:
        raise SchemaMismatchError(table, f"missing column(s) {missing}")
    if extra:
        raise SchemaMismatchError(
            table,
            f"unknown column(s) {extra}; the table has {schema.fieldNames()} (+ optional sys_op)",
        )
    wrong = [
        f"{f.name}: {given[f.name].simpleString()} (table: {f.dataType.simpleString()})"
        for f in schema.fields
        if f.name in given and not is_safe_cast(given[f.name], f.dataType)
    ]
    if SYS_OP in given and not isinstance(given[SYS_OP], (IntegralType, NullType)):
        wrong.append(f"sys_op: {given[SYS_OP].simpleString()} (must be an integer 0 or 1)")
    if wrong:
        raise SchemaMismatchError(table, f"incompatible column type(s) {wrong}")
    # A column that has its table's type already is taken as it is: a cast is a round trip
    # to the JVM per column, for nothing.
    columns = [
        quoted(f.name) if given.get(f.name) == f.dataType
        else f"CAST({quoted(f.name) if f.name in given else 'NULL'} AS {type_text(f.dataType)}) AS {quoted(f.name)}"
        for f in schema.fields
    ]
    sys_op = (quoted(SYS_OP) if isinstance(given[SYS_OP], IntegerType) else f"CAST({quoted(SYS_OP)} AS INT)") \
        if SYS_OP in given else "0"
    return df.selectExpr(*columns, f"{sys_op} AS {SYS_OP}", *[quoted(c) for c in keep])
