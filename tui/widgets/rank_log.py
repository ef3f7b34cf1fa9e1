"""RankLog: one rank's recent output on Textual's Line API.

The widget owns no lines: it draws a ``LineBuffer`` (a bounded ring, see ``tui.model``) and
renders only the rows on screen, each on demand with ``Text.from_ansi`` (through
``display_text``) and an LRU of strips keyed by the line's absolute index. A batch of a
thousand new lines costs a deque extend and one refresh, not a thousand widget writes.

The LRU holds twice the rows on screen, no more: each Strip carries Textual's own caches
(half a dozen small objects, and the strips derived from it), all of which Python's cyclic
GC walks in every full collection. At 1024 strips per pane, 8 flooding panes kept about 45k
such objects alive and each full collection took 100-300 ms of the UI thread: the tail of
the key-to-screen latency (``tests/bench/bench_tui.py``).

Following: the log sticks to its tail until the user scrolls up, and follows again when they
scroll back to the bottom (or press space, which pauses and resumes following explicitly).
While not following, the visible lines stay put even as old lines fall off the ring.
"""

from __future__ import annotations

from typing import Any

from rich.cells import cell_len
from rich.segment import Segment
from rich.style import Style
from textual import events
from textual.cache import LRUCache
from textual.geometry import Size
from textual.strip import Strip

from ..model import TYPED_MARK, LineBuffer, typed_parts
from .ansi import display_text, safe_line
from .follow import FollowingScrollView

__all__ = ["MIN_CACHED_STRIPS", "RankLog"]

MIN_CACHED_STRIPS = 16
"""The strip LRU's size before the first resize, and its floor after (twice the rows)."""


class RankLog(FollowingScrollView, can_focus=False):
    """The tail of one rank's stdout and stderr, following until scrolled."""

    COMPONENT_CLASSES = {
        "ranklog--stderr", "ranklog--marker", "ranklog--partial", "ranklog--typed",
    }

    DEFAULT_CSS = """
    RankLog {
        overflow: hidden auto;
        scrollbar-size-vertical: 1;
        background: $surface;
    }
    RankLog > .ranklog--stderr { color: $text-warning; }
    RankLog > .ranklog--marker { color: $text-muted; text-style: italic; }
    RankLog > .ranklog--partial { color: $text-accent; }
    RankLog > .ranklog--typed { color: $text-accent; text-style: dim bold; }
    """

    def __init__(self, buffer: LineBuffer | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._buffer = buffer if buffer is not None else LineBuffer(1)
        self._strips: LRUCache[tuple[int, int, int, int], Strip] = LRUCache(128)
        self._seen_evicted = self._buffer.evicted
        self._seen_version = -1

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
        self.resume_following()
        self.sync()

    def on_mount(self) -> None:
        super().on_mount()
        self.sync()

    def on_resize(self, event: events.Resize) -> None:
        # Enough for every row on screen and as many again (a scroll of a page reuses them).
        self._strips.maxsize = max(MIN_CACHED_STRIPS, event.size.height + 8)

    # -- updating --------------------------------------------------------------------------

    def sync(self) -> None:
        """Take in what was added to the buffer since the last call (once per drain tick).

        While following, the compositor keeps the view at the bottom (see ``follow.py``);
        once the ring is full the size stops changing and the rows simply show newer lines.
        """
        buffer = self._buffer
        if buffer.version == self._seen_version:
            return
        self._seen_version = buffer.version
        dropped = buffer.evicted - self._seen_evicted
        self._seen_evicted = buffer.evicted
        height = len(buffer) + (1 if buffer.partial else 0)
        self.set_virtual_size(Size(buffer.width + 1, height))
        self.keep_in_view(dropped)
        self.refresh()

    # -- rendering -------------------------------------------------------------------------

    def render_line(self, y: int) -> Strip:
        scroll_x, scroll_y = self.scroll_offset
        index = scroll_y + y
        width = self.scrollable_content_region.width
        base = self._base_style()
        buffer = self._buffer
        if index < len(buffer):
            # Keyed by the line's absolute index and the crop: while following, a line moves
            # up a row each tick and its strip is reused as is.
            key = (buffer.evicted + index, id(buffer), scroll_x, width)
            strip = self._strips.get(key)
            if strip is None:
                kind, line = buffer[index]
                strip = self._make_strip(line, kind, base)
                strip = strip.crop_extend(scroll_x, scroll_x + width, base)
                self._strips[key] = strip
            return strip
        if index == len(buffer) and buffer.partial:
            strip = self._make_strip(buffer.partial, "partial", base)
            return strip.crop_extend(scroll_x, scroll_x + width, base)
        return Strip.blank(width, base)

    def _make_strip(self, line: str, kind: str, base: Style) -> Strip:
        if kind == "typed":
            # The prompt as the rank wrote it, then what a person typed, marked.
            prompt, text = typed_parts(line)
            head = self._make_strip(prompt, "stdout", base) if prompt else Strip([], 0)
            mark = TYPED_MARK + text
            style = base + self.get_component_rich_style("ranklog--typed", partial=True)
            return Strip([*head, Segment(mark, style)], head.cell_length + cell_len(mark))
        if kind == "stdout":
            style = base
        else:
            style = base + self.get_component_rich_style(f"ranklog--{kind}", partial=True)
        clean = safe_line(line)
        if "\x1b" not in clean:
            # Plain text, the common case: one segment, no Rich Text on the way.
            if "\t" in clean:
                clean = clean.expandtabs(8)
            return Strip([Segment(clean, style)], cell_len(clean))
        text = display_text(clean)
        segments = list(text.render(self.app.console))
        return Strip(Segment.apply_style(segments, style), text.cell_len)

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._strips.clear()
