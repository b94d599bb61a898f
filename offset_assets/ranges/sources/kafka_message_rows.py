"""What a Kafka range's messages mean, as Spark SQL over the messages read: JSON values
expanded into `value_schema`'s columns, tombstones as deletes (`sys_op` 1), and a message
whose value (or needed key) does not fit marked (`MALFORMED`), never read as a null.
The source: `kafka.py`; the messages' read: `kafka_read.py`.
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import DataFrame
from pyspark.sql import types as T

from offset_assets.ranges.errors import SourceError
from offset_assets.ranges.sources.batch import MALFORMED, SHOWN_CHARS
from offset_assets.ranges.sources.kafka_read import MESSAGE_SCHEMA
from offset_assets.versioned.layout import SYS_OP
from offset_assets.versioned.sql_text import case_when, quoted, string_literal, type_text

# The parsed value and message key of `with_values_expanded`; the corrupt record's column.
_VALUE, _RAW, _KEY, _BAD = "__value", "__raw_value", "__message_key", "__does_not_fit"


def with_values_expanded(messages: DataFrame, value_schema: T.StructType | None,
                         message_key: str | Sequence[str] | None = None, tombstones: bool = True) -> DataFrame:
    """The message rows; with `value_schema`, JSON values expanded into its columns beside
    the message's own (`kafka_topic`, ..., `key`, `value`), and:
    - `sys_op`: 1 for a tombstone (a key, a null value) when `tombstones`, else the
      value's own `sys_op` (0 when it has none); without `tombstones`, a message with a
      null value is no row;
    - the columns `message_key` names come from the message key where the value has none
      (a tombstone): a column name, the key's text is its value; a list of names, the key
      is a JSON object holding them;
    - `MALFORMED` describes a message whose value (or needed key) does not fit
      (`batch.MALFORMED_TYPE`), null for the others: its columns are read as nulls.
    """
    if value_schema is None:
        return messages
    names = value_schema.fieldNames()
    key_columns = [message_key] if isinstance(message_key, str) else list(message_key or [])
    unknown = [c for c in key_columns if c not in names]
    if unknown:
        raise SourceError(f"message_key names column(s) {unknown} that value_schema lacks (it has {names})")
    with_bad = T.StructType([*value_schema.fields, T.StructField(_BAD, T.StringType())])
    as_text = T.StructType([T.StructField(f.name, T.StringType()) for f in value_schema.fields])
    corrupt = f"map('columnNameOfCorruptRecord', {string_literal(_BAD)})"

    def parsed(column: str, schema: T.StructType) -> str:
        return f"from_json({column}, {string_literal(type_text(schema))}, {corrupt})"

    if isinstance(message_key, str):
        key_type = value_schema[message_key].dataType
        key = f"named_struct({string_literal(message_key)}, try_cast(key AS {type_text(key_type)})) AS {_KEY}"
        key_bad = f"try_cast(key AS {type_text(key_type)}) IS NULL"
    else:
        key_schema = T.StructType([value_schema[c] for c in key_columns])
        key = f"{parsed('key', T.StructType([*key_schema.fields, T.StructField(_BAD, T.StringType())]))} AS {_KEY}"
        key_bad = f"{_KEY}.{_BAD} IS NOT NULL"
    read = messages if tombstones else messages.where("value IS NOT NULL")
    value = parsed("value", with_bad)
    stage = read.selectExpr(
        "*", f"{value} AS {_VALUE}",
        # The value's fields as text, parsed only for a value that does not fit: a field
        # with text but no typed value is the one at fault.
        f"CASE WHEN {value}.{_BAD} IS NOT NULL THEN {parsed('value', as_text)} END AS {_RAW}",
        *([key] if key_columns else []),
    )
    return stage.selectExpr(
        *[f"coalesce({_VALUE}.{quoted(c)}, {_KEY}.{quoted(c)}) AS {quoted(c)}" if c in key_columns
          else f"{_VALUE}.{quoted(c)} AS {quoted(c)}" for c in names],
        *[quoted(c) for c in MESSAGE_SCHEMA.fieldNames() if c not in names],
        *([] if SYS_OP in names else [_sys_op(tombstones)]),
        f"{_malformed(value_schema, key_columns, key_bad if key_columns else None, tombstones)} AS {MALFORMED}",
    )


def _sys_op(tombstones: bool) -> str:
    """`sys_op` of a message whose value has none: 1 for a tombstone."""
    return f"{case_when([('value IS NULL AND key IS NOT NULL', '1')], '0')} AS {SYS_OP}" if tombstones \
        else f"0 AS {SYS_OP}"


def _shown(text: str) -> str:
    """SQL text of a value as a reason shows it: quoted, at most `SHOWN_CHARS` characters."""
    cut = case_when([(f"length({text}) > {SHOWN_CHARS}", f"concat(substr({text}, 1, {SHOWN_CHARS}), '...')")], text)
    return f"concat('\\'', {cut}, '\\'')"


def _malformed(value_schema: T.StructType, key_columns: Sequence[str], key_bad: str | None,
               tombstones: bool) -> str:
    """SQL text of the `MALFORMED` struct of a message, null when it fits: the first field
    of the value whose text is there but whose typed value is not, else the value as a
    whole, else the message key a tombstone (or a value without the key's columns) needs,
    else a null value without a key."""
    where = ("concat('Kafka topic ', quote(kafka_topic), ' partition ', kafka_partition, ' offset ', kafka_offset, "
             "': ')")
    branches = [
        (f"{_RAW}.{quoted(f.name)} IS NOT NULL AND {_VALUE}.{quoted(f.name)} IS NULL",
         f"concat({string_literal(f'column {f.name!r} holds ')}, {_shown(f'{_RAW}.{quoted(f.name)}')}, "
         f"{string_literal(f', which is not {f.dataType.simpleString()}')})")
        for f in value_schema.fields
    ]
    branches.append((f"{_VALUE}.{_BAD} IS NOT NULL",
                     case_when([(" OR ".join(f"{_RAW}.{quoted(c)} IS NOT NULL" for c in value_schema.fieldNames()),
                                 string_literal("a nested value does not fit value_schema"))],
                               string_literal("the value is not a JSON object"))))
    value_fits = [(f"{_VALUE}.{_BAD} IS NOT NULL", case_when(branches))]
    needs_key = []
    if key_bad is not None:
        missing = " OR ".join(f"{_VALUE}.{quoted(c)} IS NULL" for c in key_columns)
        shown = ", ".join(key_columns)
        needs_key = [(f"key IS NOT NULL AND ({key_bad}) AND (value IS NULL OR {missing})",
                      f"concat('the message key ', {_shown('key')}, "
                      f"{string_literal(f' does not fit column(s) {shown}')})")]
    keyless = [("value IS NULL AND key IS NULL", string_literal("a message with neither a value nor a key"))] \
        if tombstones else []
    reason = case_when([*value_fits, *needs_key, *keyless])
    record = (f"named_struct('source_key', concat(kafka_topic, '/', kafka_partition, '@', kafka_offset), "
              f"'raw_value', value, 'reason', concat({where}, {reason}))")
    return case_when([(f"{reason} IS NOT NULL", record)])
