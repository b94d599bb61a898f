"""What a read surface runs: one statement that reads.

`VersionedTables.sql` and `offset-assets sql` read the versioned tables; a statement that
writes (`INSERT OVERWRITE DIRECTORY` writes files, `CREATE TABLE ... AS` a table, `DROP`,
`SET` changes the session) is refused before any engine sees it, on Spark and DuckDB
alike. Read from the query's tokens (`sql_tokens.py`), so a keyword inside a literal or a
comment is text: the statement must start as a query or a look at the catalog (`DESCRIBE`,
`SHOW`, `EXPLAIN`), hold one statement, and name no writing keyword anywhere (Spark runs
`WITH ... INSERT` and `FROM t INSERT ...`). A column named like such a keyword is written
in back-quotes.
"""

from __future__ import annotations

from offset_assets.reading.errors import WriteRefusedError
from offset_assets.reading.sql_tokens import TokenKind, tokenize

READ_STARTS = frozenset({"SELECT", "WITH", "FROM", "VALUES", "TABLE", "DESCRIBE", "DESC", "SHOW", "EXPLAIN"})
WRITE_WORDS = frozenset(
    {
        "ADD",
        "ALTER",
        "ANALYZE",
        "ATTACH",
        "CACHE",
        "CALL",
        "CHECKPOINT",
        "COPY",
        "CREATE",
        "DELETE",
        "DETACH",
        "DIRECTORY",
        "DROP",
        "EXPORT",
        "IMPORT",
        "INSERT",
        "INSTALL",
        "LOAD",
        "MERGE",
        "MSCK",
        "OVERWRITE",
        "PRAGMA",
        "REFRESH",
        "REPAIR",
        "RESET",
        "SET",
        "TRUNCATE",
        "UNCACHE",
        "UPDATE",
        "USE",
        "VACUUM",
    }
)


def check_reads_only(sql: str) -> None:
    """Refuse `sql` (`WriteRefusedError`, naming the word at fault) unless it is one
    statement that reads."""
    tokens = tokenize(sql)
    while tokens and tokens[-1].text == ";":
        tokens.pop()
    if not tokens:
        raise WriteRefusedError("an empty statement: nothing to read")
    first = tokens[0]
    if not (first.text == "(" or (first.kind is TokenKind.WORD and first.text.upper() in READ_STARTS)):
        raise WriteRefusedError(
            f"a {first.text!r} statement is not a read: a read surface runs queries (SELECT, WITH, FROM, VALUES, "
            "TABLE) and DESCRIBE, SHOW or EXPLAIN"
        )
    for token in tokens:
        if token.kind is TokenKind.SYMBOL and token.text == ";":
            raise WriteRefusedError("several statements: a read surface runs one query at a time")
        if token.kind is TokenKind.WORD and token.text.upper() in WRITE_WORDS:
            raise WriteRefusedError(
                f"{token.text!r} writes or changes the session: a read surface only reads (a column of that "
                f"name is written in back-quotes: `{token.text}`)"
            )
