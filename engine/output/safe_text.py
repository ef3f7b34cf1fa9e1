"""Text from outside (a rank, a record in the store, a file a person could have edited)
made fit for a person's terminal: one helper for every human output.

``sanitize`` neutralises what would act on the terminal; for a field shown on one line (a
host, a run id, a message in a table or a notice) ``one_line`` also drops colours, shows a
newline as a visible symbol and caps the length, so that a 7 MB host name is not printed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .sanitize import sanitize, strip_sgr

__all__ = ["ONE_LINE_CAP", "one_line", "safe_text", "safe_tree"]

ONE_LINE_CAP = 500
"""Characters kept of one field by default; the rest is cut, with an ellipsis."""


def safe_text(text: object) -> str:
    """``text`` as a string with every escape but colours neutralised (lines kept)."""
    return sanitize(text if isinstance(text, str) else str(text))


def one_line(text: object, cap: int = ONE_LINE_CAP) -> str:
    """``text`` as one plain line: no escape, no colour, no newline, at most ``cap`` chars."""
    s = text if isinstance(text, str) else str(text)
    if len(s) > 4 * cap:
        s = s[: 4 * cap]  # never scan megabytes for a field shown in a few hundred
    s = strip_sgr(sanitize(s)).replace("\r", "\u240d").replace("\n", "\u2424")
    return s if len(s) <= cap else s[: cap - 1] + "\u2026"


def safe_tree(value: Any, text: Callable[[str], str] = lambda s: one_line(s, 2000)) -> Any:
    """``value`` (JSON-like: dicts, lists, scalars) with every string, keys too, passed
    through ``text`` (one safe line of at most 2000 characters by default): for a record
    from a file anyone with the run dir could have edited, shown to a person or an agent."""
    if isinstance(value, str):
        return text(value)
    if isinstance(value, dict):
        return {text(k) if isinstance(k, str) else k: safe_tree(v, text)
                for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [safe_tree(v, text) for v in value]
    return value
