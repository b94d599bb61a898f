"""The name rule: what a table name, a transformation id or an input id may be.

One rule for every name the control plane stores as a key and the warehouse uses as a
folder: letters, digits, '_', '.', '-', not starting with '.' or '-', at most
`NAME_MAX_LENGTH` characters. The limit is the same on SQLite (which would store any
length) and PostgreSQL (String(255) columns), and leaves room for a folder name (255
bytes per path component on common file systems). Control characters are outside the
rule: a newline in a key would split the row of every listing that prints it.
"""

from __future__ import annotations

import re

from offset_assets.errors import OffsetAssetsError

NAME_PATTERN = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]*")
NAME_MAX_LENGTH = 128
NAME_RULE = "name must be letters, digits, '_', '.', '-' (it becomes a folder name)"
# A transformation's meta is the versioned table `_meta__<transformation id>`: the engine
# names it, and a revert tells a transformation's commits by it (`DeltaCatalog`).
META_TABLE_PREFIX = "_meta__"


class InvalidNameError(OffsetAssetsError, ValueError):
    """A name outside the rule; `kind` says what it names ("transformation id", "input
    table name", ...), `value` is the name as given and `problem` the rule it breaks.
    Raised before anything is read or written."""

    def __init__(self, kind: str, value: object, problem: str) -> None:
        # All three in `args`, so the error survives pickling between processes.
        super().__init__(kind, value, problem)
        self.kind = kind
        self.value = value
        self.problem = problem

    def __str__(self) -> str:
        return f"{self.kind} {self.value!r} refused: {self.problem}"


def name_problem(value: object) -> str | None:
    """The rule `value` breaks, or None when it is a valid name.

    `fullmatch`, not `match` with `$`: `$` also matches before a trailing newline."""
    if not isinstance(value, str) or not NAME_PATTERN.fullmatch(value):
        return NAME_RULE
    if len(value) > NAME_MAX_LENGTH:
        return f"name is {len(value)} characters long, the limit is {NAME_MAX_LENGTH}"
    return None


def validate_name(value: object, kind: str) -> None:
    """Refuse a name outside the rule with `InvalidNameError` naming `kind`, the value
    and the rule."""
    problem = name_problem(value)
    if problem is not None:
        raise InvalidNameError(kind, value, problem)
