"""NoticeBar: the newest notice on one line above the footer, where it never covers a log.

Notices (a refused command, a watchdog kill, "copied 12 lines of rank 3") used to be toasts
drawn over the bottom-right pane, right where a failing rank's traceback ends. Here they get
a line of their own; ``m`` lists the recent ones.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from rich.text import Text

from .text_bar import TextBar

__all__ = ["Notice", "NoticeBar", "notice_text"]

_STYLES: Final = {
    "information": ("●", "bold"),
    "warning": ("▲", "bold yellow"),
    "error": ("✖", "bold red"),
}


@dataclass(frozen=True, slots=True)
class Notice:
    """One notice as the app keeps it."""

    message: str
    severity: str = "information"
    wall_time: float = 0.0
    """``clock.wall()`` when it arrived, for the list of recent notices."""


def notice_text(notice: Notice | None, count: int = 0) -> Text:
    """The bar's line: the glyph and message of ``notice``, and how to see the others."""
    text = Text(no_wrap=True, overflow="ellipsis")
    if notice is None:
        text.append(" no notices", "dim")
        return text
    glyph, style = _STYLES.get(notice.severity, _STYLES["information"])
    text.append(f" {glyph} ", style)
    # Plain text: a notice may quote a rank's output, which is never markup.
    text.append(" ".join(notice.message.split()), style if notice.severity != "information" else "")
    if count > 1:
        text.append(f"  (m: {count} notices)", "dim")
    return text


class NoticeBar(TextBar):
    """One line between a screen's content and its footer."""

    DEFAULT_CSS = """
    NoticeBar {
        background: $panel;
    }
    """

    def show_notice(self, notice: Notice | None, count: int = 0) -> None:
        self.show_text(notice_text(notice, count))
