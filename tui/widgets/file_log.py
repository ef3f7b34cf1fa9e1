"""FileLog: a log file of any size, scrolled from disk through the engine's ``LogStore``.

The store keeps an index of line offsets (compact, built incrementally as the file grows);
this widget asks it for the rows on screen only, in chunks kept in a small LRU, so memory
stays bounded for a multi-GB log. It follows the end of a live file like ``RankLog``, and
highlights search matches (all of them on screen, the current one brighter).

Threads: ``poll()`` runs ``store.refresh()`` (indexing what was appended since the last call,
the whole file the first time: seconds for a GB) on a thread worker and takes the new line
count back on the UI thread; rows on screen are read with ``get_lines`` on the UI thread (a
few ``pread`` calls). Searching a whole file runs on a worker too (see the zoom screen).
"""

from __future__ import annotations

import os
import re
from typing import Any, Final, Iterator, Protocol

from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.binding import Binding
from textual.cache import LRUCache
from textual.geometry import Size
from textual.strip import Strip

from tui.widgets.ansi import display_text
from tui.widgets.follow import FollowingScrollView

__all__ = ["FileLog", "LogSource", "open_source"]

CHUNK: Final = 256
"""Lines fetched from the store at a time."""


class LogSource(Protocol):
    """What FileLog needs of ``engine.logfile.store.LogStore``."""

    @property
    def line_count(self) -> int: ...

    def refresh(self) -> int: ...

    def get_lines(self, start: int, stop: int) -> list[str]: ...

    def search(
        self,
        pattern: str,
        *,
        regex: bool = False,
        case_sensitive: bool = False,
        start: int = 0,
        backwards: bool = False,
        cancel: Any = None,
    ) -> Iterator[int]: ...


def open_source(path: str) -> LogSource | None:
    """A ``LogStore`` over ``path``, or None while the file does not exist (yet)."""
    if not path or not os.path.exists(path):
        return None
    from engine.logfile.store import LogStore

    # No in-memory tail: this view reads every row it shows from disk.
    return LogStore(path, tail_lines=0)


class FileLog(FollowingScrollView, can_focus=True):
    """Rows of a file on disk, with line numbers, following and search highlights."""

    COMPONENT_CLASSES = {"filelog--gutter", "filelog--match", "filelog--current"}

    DEFAULT_CSS = """
    FileLog {
        overflow: auto auto;
        scrollbar-size: 1 1;
        background: $surface;
        border: round $panel-lighten-2;
        border-title-align: left;
        border-subtitle-align: right;
    }
    FileLog:focus { border: round $accent; }
    FileLog > .filelog--gutter { color: $text-muted; }
    FileLog > .filelog--match { background: $warning 45%; }
    FileLog > .filelog--current { background: $warning; color: $background; text-style: bold; }
    """

    BINDINGS = [
        Binding("g,home", "scroll_home", "Top", show=False),
        Binding("G,end", "scroll_end", "Bottom", show=False),
    ]

    def __init__(self, path: str, *, label: str = "", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.path = path
        self.label = label
        self.source: LogSource | None = None
        self.line_count = 0
        self._chunks: LRUCache[int, list[str]] = LRUCache(32)
        self._strips: LRUCache[tuple[int, int], Strip] = LRUCache(512)
        self._width = 0
        self._pattern: re.Pattern[str] | None = None
        self.current_match: int | None = None
        self._indexing = False

    # -- data ------------------------------------------------------------------------------

    def on_mount(self) -> None:
        super().on_mount()
        self.poll()

    def on_resize(self) -> None:
        self._update_virtual_size()

    def poll(self) -> None:
        """Pick up lines appended to the file since the last call (indexing off-thread)."""
        if self._indexing:
            return
        if self.source is None:
            self.source = open_source(self.path)
            if self.source is None:
                self._set_title()
                return
        self._indexing = True
        self.run_worker(
            self._index_worker, thread=True, group=f"index-{id(self)}", exit_on_error=False
        )

    def _index_worker(self) -> None:
        source = self.source
        try:
            count = source.refresh() if source is not None else 0
        except OSError:
            count = self.line_count
        finally:
            self._indexing = False
        self.app.call_from_thread(self._take_count, count)

    def _take_count(self, count: int) -> None:
        if count == self.line_count:
            self._set_title()
            return
        if count < self.line_count:  # truncated or replaced: start over
            self._chunks.clear()
            self._strips.clear()
        else:
            # The last chunk was partial; it has more lines now.
            self._chunks.discard(self.line_count // CHUNK)
        self.line_count = count
        self._update_virtual_size()  # anchored: the compositor keeps the view at the end
        self._set_title()
        self.refresh()

    def _gutter_width(self) -> int:
        return len(str(max(1, self.line_count))) + 1

    def _update_virtual_size(self) -> None:
        width = max(self._width + self._gutter_width() + 1, self.scrollable_content_region.width)
        self.virtual_size = Size(width, self.line_count)

    def get_line(self, index: int) -> str:
        chunk_no = index // CHUNK
        chunk = self._chunks.get(chunk_no)
        if chunk is None:
            assert self.source is not None
            start = chunk_no * CHUNK
            chunk = self.source.get_lines(start, min(self.line_count, start + CHUNK))
            self._chunks[chunk_no] = chunk
        offset = index - chunk_no * CHUNK
        return chunk[offset] if offset < len(chunk) else ""

    def _set_title(self) -> None:
        words = self.label
        if self.source is None:
            words += " · not written yet"
        else:
            words += f" · {self.line_count:,} line{'' if self.line_count == 1 else 's'}"
        self.border_title = Text(words)
        if self.paused:
            self.border_subtitle = Text("⏸ paused")
        elif self.follow:
            self.border_subtitle = Text("following")
        else:
            self.border_subtitle = Text("")

    # -- following ------------------------------------------------------------------------

    def watch_scroll_y(self, old_value: float, new_value: float) -> None:
        super().watch_scroll_y(old_value, new_value)
        self._set_title()

    def watch_paused(self, paused: bool) -> None:
        super().watch_paused(paused)
        self._set_title()

    def action_scroll_end(self) -> None:
        self.anchor()
        self._set_title()

    # -- search ----------------------------------------------------------------------------

    def set_highlight(self, pattern: re.Pattern[str] | None) -> None:
        self._pattern = pattern
        self._strips.clear()
        self.refresh()

    def go_to(self, index: int) -> None:
        """Show line ``index`` (a third down the view) and mark it current."""
        self.current_match = index
        self._strips.clear()
        # A scroll of ours releases the anchor: the view stays on the match as lines arrive.
        top = max(0, index - self.scrollable_content_region.height // 3)
        self.scroll_to(y=top, animate=False)
        line = display_text(self.get_line(index)).plain
        if self._pattern is not None and (match := self._pattern.search(line)):
            x = match.start()
            width = self.scrollable_content_region.width - self._gutter_width()
            if not self.scroll_x <= x < self.scroll_x + width - 1:
                self.scroll_to(x=max(0, x - width // 3), animate=False)
        self._set_title()
        self.refresh()

    # -- rendering -------------------------------------------------------------------------

    def render_line(self, y: int) -> Strip:
        scroll_x, scroll_y = self.scroll_offset
        index = scroll_y + y
        width = self.scrollable_content_region.width
        base = self._base_style()
        if index >= self.line_count or self.source is None:
            if index == 0 and self.line_count == 0:
                note = "(empty)" if self.source is not None else "(no file yet)"
                return Strip([Segment(note, base + Style(dim=True))]).crop_extend(0, width, base)
            return Strip.blank(width, base)
        key = (index, 1 if index == self.current_match else 0)
        strip = self._strips.get(key)
        if strip is None:
            strip = self._make_strip(index, base)
            self._strips[key] = strip
        # The line number stays put; only the text scrolls sideways.
        gutter_width = self._gutter_width()
        gutter_style = base + self.get_component_rich_style("filelog--gutter", partial=True)
        gutter = Strip([Segment(f"{index + 1:>{gutter_width - 1}} ", gutter_style)], gutter_width)
        body = strip.crop_extend(scroll_x, scroll_x + max(0, width - gutter_width), base)
        return Strip.join([gutter, body])

    def _make_strip(self, index: int, base: Style) -> Strip:
        text = display_text(self.get_line(index))
        if self._pattern is not None:
            text = text.copy()
            name = "filelog--current" if index == self.current_match else "filelog--match"
            style = self.get_component_rich_style(name, partial=True)
            for match in self._pattern.finditer(text.plain):
                if match.end() > match.start():
                    text.stylize(style, match.start(), match.end())
        if text.cell_len > self._width:
            self._width = min(text.cell_len, 100_000)
            self.call_later(self._update_virtual_size)
        segments = list(text.render(self.app.console))
        return Strip(Segment.apply_style(segments, base), text.cell_len)

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._strips.clear()
