"""Errors of the incremental engine."""

from __future__ import annotations

import traceback

from pyspark.errors import PySparkException

from offset_assets.errors import OffsetAssetsError


class TransformationDefinitionError(OffsetAssetsError, ValueError):
    """A transformation is declared inconsistently (names the transformation and the column)."""


class TransformationOutputError(OffsetAssetsError):
    """A transformation function returned something that cannot be written to its outputs."""


def error_text(exc: BaseException) -> tuple[str, str]:
    """(what a failed batch's error says, its whole text), for meta, the report and the log.

    A Spark error's text holds its message and then the query plan, often a hundred
    lines: the message says what to fix ("name `amout` cannot be resolved. Did you mean
    one of the following? [`amount`, ...]"), the plan only where. So for a Spark error
    (`PySparkException`) the message alone is kept, without the plan; the whole text is
    for the debug log. Any other error is kept as Python prints it."""
    whole = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    get_message = getattr(exc, "getMessage", None)
    message = None
    if isinstance(exc, PySparkException) and callable(get_message):
        try:
            message = get_message()
        except Exception:  # noqa: BLE001 - no message apart from the text: keep the text
            message = None
    if not message:
        return whole, whole
    return f"{type(exc).__name__}: {message.strip()}", whole
