"""Rank output to Rich ``Text``: colours kept, everything else that could act on a terminal
removed, and never parsed as markup.

The engine's log pipeline already neutralises escape sequences; this is the UI's own guard,
so that any ``SupervisorHandle`` (a scripted one, a future remote one) is safe to display.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Final

from rich.text import Text

__all__ = ["display_text", "plain_text", "safe_line", "single_width_joins"]

_SGR: Final = re.compile(r"\x1b\[[0-9;:]*m")
_ESCAPES: Final = re.compile(
    r"""
      \x1b\[[0-?]*[ -/]*[@-~]          # CSI (cursor moves, clears, ...) -- SGR is kept aside
    | \x1b\][^\x07\x1b]*(?:\x07|\x1b\\|$)   # OSC (title, clipboard, hyperlinks), even unterminated
    | \x1b[PX^_][^\x1b]*(?:\x1b\\|$)   # DCS, SOS, PM, APC
    | \x1b[ -/]*[0-~]?                  # other ESC sequences, or a lone ESC
    | \x9b[0-?]*[ -/]*[@-~]             # 8-bit CSI
    | [\x00-\x08\x0b-\x1f\x7f-\x9f]     # other C0 / C1 controls (tab kept, CR handled first)
    """,
    re.VERBOSE,
)


_CONTROLS: Final = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f\u200d\ufe0e\ufe0f]")
"""Any control character but tab (CR and ESC included), or a joiner: the slow path is needed."""

_JOINERS: Final = re.compile("[\u200d\ufe0e\ufe0f]")
"""The zero-width joiner and the text / emoji variation selectors."""


def single_width_joins(text: str) -> str:
    """``text`` without zero-width joiners and variation selectors.

    Rich counts "⚠️" (with the emoji selector) as two cells and a ZWJ family as one emoji of
    two; terminals (tmux among them) often draw the first in one cell and the second as three
    emoji of two each. Every border after such a character then lands a few cells off. Without
    the joiners each character is as wide for Rich as for the terminal."""
    return _JOINERS.sub("", text) if _JOINERS.search(text) else text


def safe_line(line: str) -> str:
    """Keep the last ``\\r`` frame and SGR colours; drop every other control sequence."""
    if _CONTROLS.search(line) is None:
        return line  # the common case: plain text
    line = single_width_joins(line)
    if "\r" in line:
        frames = line.split("\r")
        line = next((frame for frame in reversed(frames) if frame), "")
    if "\x1b" not in line and _CONTROLS.search(line) is None:
        return line
    kept: list[str] = []
    pos = 0
    for match in _SGR.finditer(line):
        kept.append(_ESCAPES.sub("", line[pos : match.start()]))
        kept.append(match.group())
        pos = match.end()
    kept.append(_ESCAPES.sub("", line[pos:]))
    return "".join(kept)


@lru_cache(maxsize=4096)
def display_text(line: str) -> Text:
    """A Rich ``Text`` of one raw output line (ANSI colours as styles, no markup)."""
    clean = safe_line(line)
    text = Text.from_ansi(clean, no_wrap=True) if "\x1b" in clean else Text(clean, no_wrap=True)
    if "\t" in text.plain:
        text.expand_tabs(8)
    # Hyperlinks from OSC 8 were removed above; drop any link a style could still carry.
    return text


def plain_text(line: str) -> str:
    """The characters a person sees (colours removed), for search and tiles."""
    return _SGR.sub("", safe_line(line))
