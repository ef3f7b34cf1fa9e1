"""NoticesScreen (m): the recent notices, newest first, with the time each arrived."""

from __future__ import annotations

from datetime import datetime, tzinfo
from typing import Sequence

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from ..widgets.notice_bar import Notice, notice_text

__all__ = ["NoticesScreen"]


class NoticesScreen(ModalScreen[None]):
    """Read-only list; escape, m or q closes it."""

    BINDINGS = [Binding("escape,m,q", "dismiss", "Close")]

    def __init__(self, notices: Sequence[Notice], time_zone: tzinfo | None = None) -> None:
        super().__init__(classes="dialog")
        self._notices = list(notices)
        self._time_zone = time_zone

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="dialog") as box:
            box.border_title = Text(f"Recent notices ({len(self._notices)})")
            box.border_subtitle = Text("escape close")
            lines = Text()
            for notice in reversed(self._notices):
                stamp = datetime.fromtimestamp(notice.wall_time, self._time_zone)
                lines.append(stamp.strftime("%H:%M:%S"), "dim")
                lines.append_text(notice_text(notice))
                lines.append("\n")
            if not self._notices:
                lines.append("no notices yet", "dim")
            lines.rstrip()
            yield Static(lines)
