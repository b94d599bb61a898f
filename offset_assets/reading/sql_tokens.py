"""Spark SQL's tokens, by its lexical rules: enough to find Prostore's clauses in a query
(`system_time.py`) and leave everything else as written.

String literals in single or double quotes with backslash escapes, raw `R'...'` literals,
back-quoted identifiers, `--` and nested `/* */` comments (left out), numbers with a
fraction or an exponent as one token; every other character a symbol of its own. A
clause inside a literal or a comment is text, not a clause.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum

_WORD = re.compile(r"\w+")
# A number with a fraction or an exponent is one token, as in Spark's lexer (`2.5`, `1.5e-3`):
# `DELTA_NUM 2.5` is refused as `2.5`, not read as delta 2 followed by `.5`.
_DECIMAL = re.compile(r"[0-9]+\.[0-9]*(?:[eE][+-]?[0-9]+)?\w*")


class TokenKind(StrEnum):
    WORD = "word"  # keyword, identifier or number
    QUOTED = "quoted"  # `back-quoted identifier`
    STRING = "string"  # 'literal', "literal", R'raw literal'
    SYMBOL = "symbol"  # any other character


@dataclass(frozen=True)
class Token:
    kind: TokenKind
    text: str  # as written
    value: str  # a quoted identifier's name, a string literal's content, else the text
    start: int
    end: int

    def is_word(self, word: str) -> bool:
        return self.kind is TokenKind.WORD and self.text.upper() == word

    @property
    def is_identifier(self) -> bool:
        return self.kind in (TokenKind.WORD, TokenKind.QUOTED)


def tokenize(sql: str) -> list[Token]:
    """Spark SQL's tokens, comments and white space left out."""
    tokens: list[Token] = []
    i, n = 0, len(sql)
    while i < n:
        c = sql[i]
        if c.isspace():
            i += 1
        elif sql.startswith("--", i):
            newline = sql.find("\n", i)
            i = n if newline < 0 else newline + 1
        elif sql.startswith("/*", i):
            i = _comment_end(sql, i)
        elif c in "'\"":
            end, value = _string(sql, i, raw=False)
            tokens.append(Token(TokenKind.STRING, sql[i:end], value, i, end))
            i = end
        elif c == "`":
            end = _quoted_end(sql, i)
            tokens.append(Token(TokenKind.QUOTED, sql[i:end], sql[i + 1 : end - 1].replace("``", "`"), i, end))
            i = end
        elif (number := _DECIMAL.match(sql, i)) is not None:
            tokens.append(Token(TokenKind.WORD, number.group(), number.group(), i, number.end()))
            i = number.end()
        elif (word := _WORD.match(sql, i)) is not None:
            if word.group() in ("r", "R") and word.end() < n and sql[word.end()] in "'\"":
                end, value = _string(sql, word.end(), raw=True)
                tokens.append(Token(TokenKind.STRING, sql[i:end], value, i, end))
                i = end
            else:
                tokens.append(Token(TokenKind.WORD, word.group(), word.group(), i, word.end()))
                i = word.end()
        else:
            tokens.append(Token(TokenKind.SYMBOL, c, c, i, i + 1))
            i += 1
    return tokens


def _comment_end(sql: str, i: int) -> int:
    """The end of the bracketed comment at `i` (they nest in Spark SQL); an unclosed one
    runs to the end, and Spark's parser reports it."""
    depth = 0
    while i < len(sql):
        if sql.startswith("/*", i):
            depth, i = depth + 1, i + 2
        elif sql.startswith("*/", i):
            depth, i = depth - 1, i + 2
            if depth == 0:
                return i
        else:
            i += 1
    return i


def _string(sql: str, i: int, raw: bool) -> tuple[int, str]:
    """(end, content) of the string literal whose quote is at `i`."""
    quote, j, content = sql[i], i + 1, []
    while j < len(sql):
        c = sql[j]
        if c == "\\" and not raw and j + 1 < len(sql):
            content.append(sql[j + 1])
            j += 2
        elif c == quote:
            return j + 1, "".join(content)
        else:
            content.append(c)
            j += 1
    return j, "".join(content)


def _quoted_end(sql: str, i: int) -> int:
    j = i + 1
    while j < len(sql):
        if sql[j] == "`":
            if sql.startswith("``", j):
                j += 2
                continue
            return j + 1
        j += 1
    return j
