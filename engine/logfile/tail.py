"""The last lines of a log file, for a failure report: read from the end, bounded.

A rank that left no error.json is explained by the last lines of its stderr; the headless
report and the UI read them from the failing incarnation's own file (never an earlier
attempt's or restart's), sanitised, since a rank can write anything.
"""

from __future__ import annotations

import os
from typing import Final

from ..output.sanitize import sanitize

__all__ = ["last_lines", "read_tail"]

TAIL_BYTES: Final = 16 * 1024
"""How much of the file's end is read: enough for a dozen long lines, never the whole file."""


def read_tail(path: str, max_bytes: int = TAIL_BYTES) -> tuple[str, bool]:
    """The last ``max_bytes`` of ``path`` as text, and whether the file was longer (its
    first line is then probably cut); ("", False) when it is missing or unreadable."""
    if not path:
        return "", False
    try:
        with open(path, "rb") as f:
            size = f.seek(0, os.SEEK_END)
            f.seek(max(0, size - max_bytes))
            data = f.read(max_bytes)
    except OSError:
        return "", False
    return data.decode("utf-8", errors="replace"), size > max_bytes


def last_lines(path: str, count: int, *, max_bytes: int = TAIL_BYTES) -> list[str]:
    """The last ``count`` lines of ``path`` (without newlines), oldest first, sanitised;
    [] when the file is missing, unreadable or empty. Blank lines at the end are dropped."""
    if count <= 0:
        return []
    text, cut = read_tail(path, max_bytes)
    # Split on newlines only: a progress bar's "\r" frames are one line, shown as the
    # last frame drawn (what a terminal would show).
    lines = [_last_frame(x) for x in text.split("\n")] if text else []
    if cut and lines:
        lines = lines[1:]  # the first line is probably cut
    while lines and not lines[-1].strip():
        lines.pop()
    return [sanitize(line) for line in lines[-count:]]


def _last_frame(line: str) -> str:
    frames = [f for f in line.split("\r") if f]
    return frames[-1] if frames else ""
