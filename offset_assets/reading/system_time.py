"""Prostore's system-time clauses in Spark SQL: found, checked and rewritten onto reads.

    SELECT ... FROM posts FOR SYSTEM_TIME AS OF DELTA_NUM 3 AS p JOIN profiles ...
    ... FROM posts FOR SYSTEM_TIME AS OF '2026-11-28 12:00:00'
    ... FROM posts FOR SYSTEM_TIME STARTED IN (2, 4)    -- versions deltas 2..4 created
    ... FROM posts FOR SYSTEM_TIME FINISHED IN (2, 4)   -- keys deltas 2..4 deleted
    ... FROM posts FOR SYSTEM_TIME STARTED TS ('2026-11-28', '2026-11-29')   -- by commit time
    ... FROM posts FOR SYSTEM_TIME FINISHED TS ('2026-11-28', '2026-11-29')
    ... FROM posts FOR SYSTEM_TIME AS OF LATEST_UNCOMMITTED_DELTA   -- the hot delta, for its writer

The query is split into tokens by Spark's lexical rules (`sql_tokens.py`), so a clause
inside a literal or a comment is text, not a clause. Only the clause and the table name
before it are read here; everything else is Spark SQL and is left to Spark's own parser,
which also resolves every name:

- each `name FOR SYSTEM_TIME ...` becomes a placeholder (`{_oa_0}`) that
  `spark.sql(text, **frames)` fills with the read's DataFrame, aliased by the table's
  name unless the query gives an alias (`AS p` or `p`), so `posts.col` still resolves;
- in a query (SELECT, WITH, FROM, VALUES, TABLE or a parenthesised query), every
  versioned table the text names without a clause is defined as a common table
  expression around it (`WITH posts AS (SELECT * FROM {_oa_1}) (<the query>)`), so that
  Spark's scoping decides what the name means (a CTE of the query's own shadows it) and
  the whole query reads one catalog state.

A hand-written tokenizer rather than a SQL library: sqlglot (the candidate, with a Spark
dialect) does not know these clauses either, and to rewrite a query it regenerates the
whole text from its own tree, which is not the identity on Spark SQL; the tokens Spark's
lexer makes are few, and the clause grammar is seven fixed forms.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass, field
from enum import StrEnum

from offset_assets.reading.errors import SystemTimeError
from offset_assets.reading.sql_tokens import Token, TokenKind, tokenize

EXPECTED = ("AS OF DELTA_NUM <n>, AS OF '<timestamp>', AS OF LATEST_UNCOMMITTED_DELTA, STARTED IN (<d1>, <d2>), "
            "FINISHED IN (<d1>, <d2>), STARTED TS ('<t1>', '<t2>') or FINISHED TS ('<t1>', '<t2>')")
# Words that may follow a table reference without being its alias (Spark's grammar:
# joins, set operations, the clauses after FROM, a FROM-first query's body).
NOT_ALIAS = frozenset({
    "ANTI", "CLUSTER", "CROSS", "DISTRIBUTE", "EXCEPT", "FOR", "FROM", "FULL", "GROUP", "HAVING",
    "INNER", "INSERT", "INTERSECT", "JOIN", "LATERAL", "LEFT", "LIMIT", "MINUS", "NATURAL", "OFFSET",
    "ON", "ORDER", "OUTER", "PIVOT", "QUALIFY", "RIGHT", "SELECT", "SEMI", "SORT", "TABLESAMPLE",
    "UNION", "UNPIVOT", "USING", "WHERE", "WINDOW",
})
QUERY_STARTS = frozenset({"SELECT", "WITH", "FROM", "VALUES", "TABLE"})
# A delta number: ASCII digits only (`str.isdigit` also takes `²` and `٣`), within BIGINT.
_DELTA_NUMBER = re.compile(r"[0-9]+")
MAX_DELTA = 2**63 - 1
PLACEHOLDER_PREFIX = "_oa_"


class ClauseKind(StrEnum):
    AS_OF_DELTA = "as of delta"
    AS_OF_TIME = "as of time"
    AS_OF_UNCOMMITTED = "as of latest uncommitted delta"
    STARTED_IN = "started in"
    FINISHED_IN = "finished in"
    STARTED_TS = "started ts"
    FINISHED_TS = "finished ts"


@dataclass(frozen=True)
class SystemTimeClause:
    """One `FOR SYSTEM_TIME ...` of a query, on a versioned table."""

    table: str  # the table's name as the catalog holds it
    kind: ClauseKind
    text: str  # the clause as written, for messages
    where: str  # "line L, column C" of the clause in the query
    delta: int | None = None  # AS OF DELTA_NUM
    timestamp: str | None = None  # AS OF '<timestamp>': the literal's content
    deltas: tuple[int, int] | None = None  # STARTED / FINISHED IN (d1, d2)
    timestamps: tuple[str, str] | None = None  # STARTED / FINISHED TS ('t1', 't2'): the literals' content

    def error(self, problem: str) -> SystemTimeError:
        """A `SystemTimeError` naming this clause, its table and its place in the query."""
        return SystemTimeError(f"{self.text} on {self.table!r} ({self.where}): {problem}")


@dataclass(frozen=True)
class SystemTimeQuery:
    """A query with its versioned reads taken out: `text` holds a placeholder for each
    (`{_oa_0}`, literal braces doubled, as `spark.sql(text, **frames)` expects), and
    `reads` says what each placeholder reads: a clause, or None for the table's actual
    state. No reads: `text` is the query unchanged."""

    text: str
    reads: dict[str, tuple[str, SystemTimeClause | None]] = field(default_factory=dict)

    @property
    def tables(self) -> list[str]:
        """The versioned tables the query reads, each once."""
        return sorted({table for table, _ in self.reads.values()})


def parse_system_time(sql: str, table_names: Collection[str], plain_as_ctes: bool = True) -> SystemTimeQuery:
    """`sql` with its system-time clauses and the versioned tables of `table_names` it
    names taken out as placeholders; `SystemTimeError` for a malformed clause or one on a
    name that is not in `table_names`. With `plain_as_ctes` False, the tables named
    without a clause are left as written, each a read keyed by its own name: an engine
    that registers them under those names (DuckDB) needs no common table expressions."""
    tokens = tokenize(sql)
    by_lower = {name.lower(): name for name in table_names}
    edits: list[tuple[int, int, str]] = []  # (start, end, replacement) in `sql`
    reads: dict[str, tuple[str, SystemTimeClause | None]] = {}
    in_clauses: set[int] = set()
    i = 0
    while i < len(tokens):
        if not (tokens[i].is_word("FOR") and i + 1 < len(tokens) and tokens[i + 1].is_word("SYSTEM_TIME")):
            i += 1
            continue
        first = _reference_start(sql, tokens, i)
        written = ".".join(t.value for t in tokens[first:i] if t.is_identifier)
        table = by_lower.get(written.lower())
        if table is None:
            known = ", ".join(sorted(table_names)[:30]) or "none"
            raise SystemTimeError(
                f"FOR SYSTEM_TIME on {written!r} ({_where(sql, tokens[first].start)}): not a versioned "
                f"table of this control plane (versioned tables: {known}); Spark's own time travel of other "
                "tables is VERSION AS OF / TIMESTAMP AS OF")
        clause, end = _clause(sql, tokens, i, table)
        placeholder = f"{PLACEHOLDER_PREFIX}{len(reads)}"
        reads[placeholder] = (table, clause)
        edits.append((tokens[first].start, tokens[end - 1].end, "{" + placeholder + "}"))
        after_sample = _after_sample(tokens, end)
        # `TABLE posts FOR SYSTEM_TIME ...` takes no alias (the statement names a relation).
        follows_table = first > 0 and tokens[first - 1].is_word("TABLE")
        if not follows_table and not _has_alias(tokens, after_sample):
            at = tokens[after_sample - 1].end
            edits.append((at, at, f" AS {quote_identifier(table)}"))
        in_clauses.update(range(first, end))
        i = end
    plain = sorted({by_lower[t.value.lower()] for n, t in enumerate(tokens)
                    if n not in in_clauses and t.is_identifier and t.value.lower() in by_lower})
    if not plain_as_ctes:
        reads.update({table: (table, None) for table in plain})
        return SystemTimeQuery(_apply(sql, edits), reads)
    wrap = bool(plain) and _is_query(tokens)
    if not edits and not wrap:
        return SystemTimeQuery(sql)
    body = _apply(sql[:_body_end(tokens, len(sql)) if wrap else len(sql)], edits)
    if not wrap:
        return SystemTimeQuery(body, reads)
    ctes = []
    for table in plain:
        placeholder = f"{PLACEHOLDER_PREFIX}{len(reads)}"
        reads[placeholder] = (table, None)
        ctes.append(f"{quote_identifier(table)} AS (SELECT * FROM {{{placeholder}}})")
    # The query in parentheses: its own WITH, ORDER BY and LIMIT stay its own, and a line
    # comment at its end cannot swallow the closing parenthesis.
    return SystemTimeQuery(f"WITH {', '.join(ctes)}\n(\n{body}\n)", reads)


def quote_identifier(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


# -- clauses -----------------------------------------------------------------------------


def _where(sql: str, offset: int) -> str:
    line = sql.count("\n", 0, offset) + 1
    column = offset - (sql.rfind("\n", 0, offset) + 1) + 1
    return f"line {line}, column {column}"


def _reference_start(sql: str, tokens: list[Token], at: int) -> int:
    """Index of the first token of the (possibly dotted) table name before FOR at `at`."""
    first = at - 1
    if first < 0 or not tokens[first].is_identifier:
        raise SystemTimeError(f"FOR SYSTEM_TIME at {_where(sql, tokens[at].start)} must follow a table name")
    while first >= 2 and tokens[first - 1].text == "." and tokens[first - 2].is_identifier:
        first -= 2
    return first


def _clause(sql: str, tokens: list[Token], at: int, table: str) -> tuple[SystemTimeClause, int]:
    """The clause whose FOR is at `at`, and the index of the token after it."""

    def token(k: int) -> Token | None:
        return tokens[k] if k < len(tokens) else None

    def fail(k: int, expected: str) -> SystemTimeError:
        found = token(k)
        where = _where(sql, found.start if found else len(sql))
        shown = repr(found.text) if found else "the end of the query"
        return SystemTimeError(f"malformed FOR SYSTEM_TIME clause on {table!r} at {where}: "
                               f"expected {expected}, found {shown}")

    def word(k: int, expected: str, shown: str | None = None) -> None:
        found = token(k)
        if found is None or not found.is_word(expected):
            raise fail(k, shown or expected)

    def symbol(k: int, expected: str) -> None:
        found = token(k)
        if found is None or found.text != expected:
            raise fail(k, repr(expected))

    def number(k: int) -> int:
        found = token(k)
        if (found is None or found.kind is not TokenKind.WORD or not _DELTA_NUMBER.fullmatch(found.text)
                or int(found.text) > MAX_DELTA):
            raise fail(k, "a delta number")
        return int(found.text)

    def clause(end: int, kind: ClauseKind, **values: object) -> tuple[SystemTimeClause, int]:
        text = " ".join(t.text for t in tokens[at:end]).replace("( ", "(").replace(" )", ")").replace(" ,", ",")
        return SystemTimeClause(table, kind, text, _where(sql, tokens[at].start), **values), end

    def timestamp(k: int) -> str:
        found = token(k)
        if found is None or found.kind is not TokenKind.STRING:
            raise fail(k, "a '<timestamp>' literal")
        return found.value

    k = at + 2
    first = token(k)
    if first is not None and first.is_word("AS"):
        word(k + 1, "OF")
        target = token(k + 2)
        if target is not None and target.is_word("DELTA_NUM"):
            return clause(k + 4, ClauseKind.AS_OF_DELTA, delta=number(k + 3))
        if target is not None and target.kind is TokenKind.STRING:
            return clause(k + 3, ClauseKind.AS_OF_TIME, timestamp=target.value)
        if target is not None and target.is_word("LATEST_UNCOMMITTED_DELTA"):
            return clause(k + 3, ClauseKind.AS_OF_UNCOMMITTED)
        raise fail(k + 2, "DELTA_NUM <n>, '<timestamp>' or LATEST_UNCOMMITTED_DELTA")
    for keyword, by_delta, by_time in (("STARTED", ClauseKind.STARTED_IN, ClauseKind.STARTED_TS),
                                       ("FINISHED", ClauseKind.FINISHED_IN, ClauseKind.FINISHED_TS)):
        if first is not None and first.is_word(keyword):
            by_ts = token(k + 1) is not None and token(k + 1).is_word("TS")
            if not by_ts:
                word(k + 1, "IN", "IN or TS")
            symbol(k + 2, "(")
            low = timestamp(k + 3) if by_ts else number(k + 3)
            symbol(k + 4, ",")
            high = timestamp(k + 5) if by_ts else number(k + 5)
            symbol(k + 6, ")")
            if by_ts:
                return clause(k + 7, by_time, timestamps=(low, high))
            return clause(k + 7, by_delta, deltas=(low, high))
    raise fail(k, EXPECTED)


def _after_sample(tokens: list[Token], at: int) -> int:
    """The index after a TABLESAMPLE (...) [REPEATABLE (n)] at `at`, else `at`: a table's
    alias follows its sample."""
    if at >= len(tokens) or not tokens[at].is_word("TABLESAMPLE"):
        return at
    end = _group_end(tokens, at + 1)
    if end < len(tokens) and tokens[end].is_word("REPEATABLE"):
        end = _group_end(tokens, end + 1)
    return end


def _group_end(tokens: list[Token], at: int) -> int:
    """The index after the parenthesised group that opens at `at` (or `at` if none)."""
    if at >= len(tokens) or tokens[at].text != "(":
        return at
    depth = 0
    for k in range(at, len(tokens)):
        depth += {"(": 1, ")": -1}.get(tokens[k].text, 0) if tokens[k].kind is TokenKind.SYMBOL else 0
        if depth == 0:
            return k + 1
    return len(tokens)


def _has_alias(tokens: list[Token], at: int) -> bool:
    if at >= len(tokens):
        return False
    following = tokens[at]
    if following.kind is TokenKind.QUOTED or following.is_word("AS"):
        return True
    return following.kind is TokenKind.WORD and following.text.upper() not in NOT_ALIAS


def _is_query(tokens: list[Token]) -> bool:
    return bool(tokens) and (tokens[0].text == "(" or (tokens[0].kind is TokenKind.WORD
                                                        and tokens[0].text.upper() in QUERY_STARTS))


def _body_end(tokens: list[Token], length: int) -> int:
    """Where the query ends before its trailing semicolons (one statement in parentheses)."""
    end = len(tokens)
    while end > 0 and tokens[end - 1].kind is TokenKind.SYMBOL and tokens[end - 1].text == ";":
        end -= 1
    if end == len(tokens):
        return length
    return tokens[end - 1].end if end else 0


def _apply(sql: str, edits: list[tuple[int, int, str]]) -> str:
    """`sql` with `edits` applied (in order, not overlapping) and every other brace doubled."""
    pieces, cursor = [], 0
    for start, end, replacement in sorted(edits, key=lambda e: (e[0], e[1])):
        pieces += [_escaped(sql[cursor:start]), replacement]
        cursor = end
    pieces.append(_escaped(sql[cursor:]))
    return "".join(pieces)


def _escaped(text: str) -> str:
    return text.replace("{", "{{").replace("}", "}}")
