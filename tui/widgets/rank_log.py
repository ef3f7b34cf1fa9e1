"""RankLog: one rank's recent output on Textual's Line API.

The widget owns no lines: it draws a ``LineBuffer`` (a bounded ring, see ``tui.model``) and
renders only the rows on screen, each on demand with ``Text.from_ansi`` (through
``display_text``) and an LRU of strips keyed by the line's absolute index. A batch of a
thousand new lines costs a deque extend and one refresh, not a thousand widget writes.

Following: the log sticks to its tail until the user scrolls up, and follows again when they
scroll back to the bottom (or press space, which pauses and resumes following explicitly).
While not following, the visible lines stay put even as old lines fall off the ring.
"""

from __future__ import annotations

from typing import Any

from rich.segment import Segment
from rich.style import Style
from textual.cache import LRUCache
from textual.geometry import Size
from textual.reactive import reactive
from textual.scroll_view import ScrollView
from textual.strip import Strip

from tui.model import LineBuffer
from tui.widgets.ansi import display_text

__all__ = ["RankLog"]


class RankLog(ScrollView, can_focus=False):
    """The tail of one rank's stdout and stderr, following until scrolled."""

    COMPONENT_CLASSES = {"ranklog--stderr", "ranklog--marker", "ranklog--partial"}

    DEFAULT_CSS = """
    RankLog {
        overflow: hidden auto;
        scrollbar-size-vertical: 1;
        background: $surface;
    }
    RankLog > .ranklog--stderr { color: $text-warning; }
    RankLog > .ranklog--marker { color: $text-muted; text-style: italic; }
    RankLog > .ranklog--partial { color: $text-accent; }
    """

    follow: reactive[bool] = reactive(True, init=False)
    """Stick to the tail. False after the user scrolls up or pauses."""
    paused: reactive[bool] = reactive(False, init=False)
    """Following paused by the user (space); new lines arrive but the view holds still."""

    def __init__(self, buffer: LineBuffer | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._buffer = buffer if buffer is not None else LineBuffer(1)
        self._strips: LRUCache[tuple[int, int], Strip] = LRUCache(1024)
        self._seen_evicted = self._buffer.evicted
        self._seen_version = -1
        self._programmatic = False

    @property
    def buffer(self) -> LineBuffer:
        return self._buffer

    @buffer.setter
    def buffer(self, buffer: LineBuffer) -> None:
        """Show another rank's buffer (the focused pane beside the tiles does this)."""
        if buffer is self._buffer:
            return
        self._buffer = buffer
        self._strips.clear()
        self._seen_evicted = buffer.evicted
        self._seen_version = -1
        self.follow = not self.paused
        self.sync()

    def on_mount(self) -> None:
        self.sync()

    def on_resize(self) -> None:
        if self.follow:
            self._scroll_to_end()

    # -- updating --------------------------------------------------------------------------

    def sync(self) -> None:
        """Take in what was added to the buffer since the last call (once per drain tick)."""
        buffer = self._buffer
        if buffer.version == self._seen_version:
            return
        self._seen_version = buffer.version
        newly_evicted = buffer.evicted - self._seen_evicted
        self._seen_evicted = buffer.evicted
        height = len(buffer) + (1 if buffer.partial else 0)
        self.virtual_size = Size(buffer.width + 1, height)
        if self.follow:
            self._scroll_to_end()
            # Layout may not have caught up with the new virtual size yet: again after it.
            self.call_after_refresh(self._scroll_to_end_if_following)
        elif newly_evicted:
            # Keep the same lines in view although the ring dropped some from its front.
            self._programmatic = True
            try:
                self.scroll_to(y=max(0, self.scroll_y - newly_evicted), animate=False)
            finally:
                self._programmatic = False
        self.refresh()

    def _scroll_to_end_if_following(self) -> None:
        if self.follow:
            self._scroll_to_end()

    def _scroll_to_end(self) -> None:
        self._programmatic = True
        try:
            self.scroll_to(y=self.max_scroll_y, animate=False)
        finally:
            self._programmatic = False

    def watch_scroll_y(self, old_value: float, new_value: float) -> None:
        super().watch_scroll_y(old_value, new_value)
        if self._programmatic or self.paused:
            return
        # The user scrolled: follow again only once they are back at the bottom.
        self.follow = new_value >= self.max_scroll_y

    def watch_paused(self, paused: bool) -> None:
        self.set_class(paused, "-paused")
        if paused:
            self.follow = False
        else:
            self.follow = True
            self._scroll_to_end()

    def watch_follow(self, follow: bool) -> None:
        self.set_class(follow, "-follow")

    # -- rendering -------------------------------------------------------------------------

    def render_line(self, y: int) -> Strip:
        scroll_x, scroll_y = self.scroll_offset
        index = scroll_y + y
        width = self.scrollable_content_region.width
        base = self.rich_style
        buffer = self._buffer
        if index < len(buffer):
            key = (buffer.evicted + index, id(buffer))
            strip = self._strips.get(key)
            if strip is None:
                kind, line = buffer[index]
                strip = self._make_strip(line, kind, base)
                self._strips[key] = strip
        elif index == len(buffer) and buffer.partial:
            strip = self._make_strip(buffer.partial, "partial", base)
        else:
            return Strip.blank(width, base)
        return strip.crop_extend(scroll_x, scroll_x + width, base)

    def _make_strip(self, line: str, kind: str, base: Style) -> Strip:
        text = display_text(line)
        if kind == "stdout":
            style = base
        else:
            style = base + self.get_component_rich_style(f"ranklog--{kind}", partial=True)
        segments = list(text.render(self.app.console))
        return Strip(Segment.apply_style(segments, style), text.cell_len)

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._strips.clear()
