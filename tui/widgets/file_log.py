"""FileLog: a log file of any size, scrolled from disk through the engine's ``LogStore``.

The store keeps an index of line offsets (compact, built incrementally as the file grows);
this widget asks it for the rows on screen only, in chunks kept in a small LRU, so memory
stays bounded for a multi-GB log. It follows the end of a live file like ``RankLog``, and
highlights search matches (all of them on screen, the current one brighter).

Its source is one file (``LogStore``) or a rank's two logs merged in arrival order
(``engine.logfile.merged.MergedSource``: stderr rows get a red gutter; rows a source says are
"stdin", lines a person typed, are marked ⌨ and dimmed). The unfinished last
line of a file (a progress bar) is shown after the complete ones, dimmed. ``wrap`` folds long
lines to the width: then the view scrolls a line (not a row) at a time, and near the end it
fills the screen up to the last line, so following still shows the newest rows; without it,
``left``/``right`` move a quarter of the width a key.

Threads: ``poll()`` runs ``store.refresh()`` (indexing what was appended since the last call,
the whole file the first time: seconds for a GB) on a thread worker and takes the new line
count back on the UI thread; rows on screen are read with ``get_lines`` on the UI thread (a
few ``pread`` calls). Searching a whole file runs on a worker too (see the zoom screen).
"""

from __future__ import annotations

import os
import re
from typing import Any, Callable, Final, Protocol, Sequence

from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.binding import Binding
from textual.cache import LRUCache
from textual.geometry import Size
from textual.strip import Strip

from ...engine.logfile.search import Searchable
from ..model import TYPED_MARK
from .ansi import display_text
from .follow import FollowingScrollView

__all__ = ["FileLog", "LogSource", "open_merged", "open_source"]

CHUNK: Final = 256
"""Lines fetched from the store at a time."""


class LogSource(Searchable, Protocol):
    """What FileLog needs of ``engine.logfile.store.LogStore``: its search (``Searchable``),
    its line count, and lines on demand."""

    @property
    def line_count(self) -> int: ...

    def refresh(self) -> int: ...

    def get_lines(self, start: int, stop: int) -> list[str]: ...


def open_merged(stdout_path: str, stderr_path: str) -> LogSource:
    """Both logs of a rank as one, in arrival order (from the index beside them)."""
    from ...engine.logfile.merged import MergedSource
    from ...engine.rundir.arrival import arrival_path

    return MergedSource(stdout_path, stderr_path, arrival_path(stdout_path, stderr_path))


def open_source(path: str) -> LogSource | None:
    """A ``LogStore`` over ``path``, or None while the file does not exist (yet)."""
    if not path or not os.path.exists(path):
        return None
    from ...engine.logfile.store import LogStore

    # No in-memory tail: this view reads every row it shows from disk.
    return LogStore(path, tail_lines=0)


class FileLog(FollowingScrollView, can_focus=True):
    """Rows of a file on disk, with line numbers, following and search highlights."""

    COMPONENT_CLASSES = {
        "filelog--gutter",
        "filelog--stderr",
        "filelog--typed",
        "filelog--partial",
        "filelog--match",
        "filelog--current",
    }

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
    FileLog > .filelog--stderr { color: $error; }
    FileLog > .filelog--typed { color: $text-accent; text-style: dim bold; }
    FileLog > .filelog--partial { text-style: dim italic; }
    FileLog > .filelog--match { background: $warning 45%; }
    FileLog > .filelog--current { background: $warning; color: $background; text-style: bold; }
    """

    BINDINGS = [
        Binding("g,home", "scroll_home", "Top", show=False),
        Binding("G,end", "scroll_end", "Bottom", show=False),
        Binding("left", "scroll_left", "Left", show=False),
        Binding("right", "scroll_right", "Right", show=False),
    ]

    def __init__(
        self,
        path: str,
        *,
        label: str = "",
        merged: tuple[str, str] | None = None,
        stream: str = "stdout",
        wrap: bool = False,
        typed: Callable[[], Sequence[tuple[float, str]]] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.path = path
        self.typed = typed
        """With ``merged``: the lines typed to the rank (time sent, text), shown among its own
        (``TypedRows``)."""
        self.label = label
        self.merged = merged
        """(stdout path, stderr path) to show merged in arrival order, or None: ``path``."""
        self.stream = stream
        """Which stream a one-file view shows (its partial line's colour)."""
        self.wrap = wrap
        self.source: LogSource | None = None
        self.line_count = 0
        """Complete lines of the source."""
        self.partials: list[tuple[str, str]] = []
        """(stream, text) unfinished last lines, shown after the complete ones."""
        self._kinds: LRUCache[int, list[str]] = LRUCache(32)
        self._wrapped: LRUCache[tuple[int, int, int], list[Strip]] = LRUCache(256)
        self._layout: tuple[tuple[int, int, int, int], list[tuple[int, Strip]]] | None = None
        self._chunks: LRUCache[int, list[str]] = LRUCache(32)
        self._strips: LRUCache[tuple[int, int], Strip] = LRUCache(512)
        self._width = 0
        self._pattern: re.Pattern[str] | None = None
        self.current_match: int | None = None
        self._indexing = False

    # -- data ------------------------------------------------------------------------------

    def on_mount(self) -> None:
        super().on_mount()
        if self.display:  # a hidden one reads its file once it is shown
            self.poll()

    def on_resize(self) -> None:
        self._update_virtual_size()

    def poll(self) -> None:
        """Pick up lines appended to the file since the last call (indexing off-thread)."""
        if self._indexing:
            return
        if self.source is None:
            if self.merged is not None:
                self.source = open_merged(*self.merged)
                if self.typed is not None:
                    from ...engine.rundir.arrival import arrival_path
                    from .typed_source import TypedRows

                    self.source = TypedRows(
                        self.source, arrival_path(*self.merged), self.typed  # type: ignore[arg-type]
                    )
            else:
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
        partials = self.partials
        try:
            count = source.refresh() if source is not None else 0
            partials = _partials(source, self.stream)
        except OSError:
            count = self.line_count
        finally:
            self._indexing = False
        self.app.call_from_thread(self._take_count, count, partials)

    def _take_count(self, count: int, partials: list[tuple[str, str]] | None = None) -> None:
        moved = getattr(self.source, "changed_from", None)
        if moved is not None:
            # A typed line went in before rows already read: they moved down one.
            self._forget_from(moved)
            self.refresh()
        if partials is not None and partials != self.partials:
            self.partials = partials
            low = min(count, self.line_count)
            for key in list(self._strips.keys()):
                if key[0] >= low:
                    self._strips.discard(key)
            for wkey in list(self._wrapped.keys()):
                if wkey[0] >= low:
                    self._wrapped.discard(wkey)
            self._layout = None
            if count == self.line_count:
                self._update_virtual_size()
                self.refresh()
        if count == self.line_count:
            self._set_title()
            return
        if count < self.line_count:  # truncated or replaced: start over
            self._chunks.clear()
            self._kinds.clear()
            self._strips.clear()
            self._wrapped.clear()
        else:
            # The last chunk was partial; it has more lines now (and the partial-line rows
            # drawn after it are lines now).
            self._forget_from(self.line_count)
        self._layout = None
        self.line_count = count
        self._update_virtual_size()  # anchored: the compositor keeps the view at the end
        self._set_title()
        self.refresh()

    def _forget_from(self, row: int) -> None:
        """Drop what is cached of rows ``row`` on."""
        for cache in (self._chunks, self._kinds):
            for chunk_no in list(cache.keys()):
                if chunk_no >= row // CHUNK:
                    cache.discard(chunk_no)
        for key in list(self._strips.keys()):
            if key[0] >= row:
                self._strips.discard(key)
        for wkey in list(self._wrapped.keys()):
            if wkey[0] >= row:
                self._wrapped.discard(wkey)
        self._layout = None

    def _gutter_width(self) -> int:
        return len(str(max(1, self.line_count))) + 1

    @property
    def row_count(self) -> int:
        """Rows to show: the complete lines, then the unfinished ones."""
        return self.line_count + len(self.partials)

    def _update_virtual_size(self) -> None:
        region = self.scrollable_content_region
        if self.wrap:
            # One scroll step a line; the top line may go down to the last one (the layout
            # then fills the screen up to it, see _wrap_layout). A log that fits, wrapped,
            # needs no scrolling (and no scrollbar): few lines, so cheap to measure.
            rows = self.row_count
            if rows < region.height and self.source is not None and self.is_attached:
                width = max(1, region.width - self._gutter_width())
                base = self._base_style()
                wrapped = sum(len(self._wrapped_strips(i, width, base)) for i in range(rows))
                if wrapped <= region.height:
                    self.virtual_size = Size(region.width, rows)
                    return
            self.virtual_size = Size(region.width, rows + max(0, region.height - 1))
            return
        width = max(self._width + self._gutter_width() + 1, region.width)
        self.virtual_size = Size(width, self.row_count)

    def set_wrap(self, wrap: bool) -> None:
        """Fold long lines to the width (True) or cut them and scroll sideways."""
        if wrap == self.wrap:
            return
        self.wrap = wrap
        self._layout = None
        self._wrapped.clear()
        self.scroll_to(x=0, animate=False)
        self._update_virtual_size()
        if self.follow:
            self.call_after_refresh(self.scroll_end, animate=False)
        self.refresh()

    def action_scroll_right(self) -> None:
        step = max(8, self.scrollable_content_region.width // 4)
        self.scroll_to(x=self.scroll_x + step, animate=False)

    def action_scroll_left(self) -> None:
        step = max(8, self.scrollable_content_region.width // 4)
        self.scroll_to(x=max(0, self.scroll_x - step), animate=False)

    def stream_of(self, index: int) -> str:
        """"stdout" or "stderr": where row ``index`` comes from."""
        if index >= self.line_count:
            partials = self.partials
            k = index - self.line_count
            return partials[k][0] if k < len(partials) else self.stream
        streams = getattr(self.source, "streams", None)
        if streams is None:
            return self.stream
        chunk_no = index // CHUNK
        kinds = self._kinds.get(chunk_no)
        if kinds is None:
            start = chunk_no * CHUNK
            kinds = streams(start, min(self.line_count, start + CHUNK))
            self._kinds[chunk_no] = kinds
        offset = index - chunk_no * CHUNK
        return kinds[offset] if offset < len(kinds) else self.stream

    def get_line(self, index: int) -> str:
        if index >= self.line_count:
            k = index - self.line_count
            return self.partials[k][1] if k < len(self.partials) else ""
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
            if self.partials:
                words += " + unfinished"
        if self.wrap:
            words += " · wrap (w)"
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
        self._wrapped.clear()
        self._layout = None
        self.refresh()

    def clear_current(self) -> None:
        """No current match here any more (it moved to another log)."""
        if self.current_match is not None:
            self.current_match = None
            self._strips.clear()
            self._wrapped.clear()
            self._layout = None
            self.refresh()

    def go_to(self, index: int) -> None:
        """Show line ``index`` (a third down the view) and mark it current."""
        self.current_match = index
        self._strips.clear()
        self._wrapped.clear()
        self._layout = None
        # A scroll of ours releases the anchor: the view stays on the match as lines arrive.
        if self.wrap:
            top = max(0, index - 2)  # a line a step: leave room above for context
            self.scroll_to(y=top, animate=False)
            self._set_title()
            self.refresh()
            return
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
        rows = self.row_count
        if rows == 0 or self.source is None:
            if y == 0:
                note = "(empty)" if self.source is not None else "(no file yet)"
                return Strip([Segment(note, base + Style(dim=True))]).crop_extend(0, width, base)
            return Strip.blank(width, base)
        gutter_width = self._gutter_width()
        body_width = max(1, width - gutter_width)
        if self.wrap:
            layout = self._wrap_layout(scroll_y, body_width, base)
            if y >= len(layout):
                return Strip.blank(width, base)
            index, body = layout[y]
            first_row = y == 0 or layout[y - 1][0] != index
            gutter = self._gutter(index if first_row else None, gutter_width, base)
            return Strip.join([gutter, body.crop_extend(0, body_width, base)])
        if index >= rows:
            return Strip.blank(width, base)
        strip = self._strip(index, base)
        # The line number stays put; only the text scrolls sideways.
        body = strip.crop_extend(scroll_x, scroll_x + body_width, base)
        return Strip.join([self._gutter(index, gutter_width, base), body])

    def _gutter(self, index: int | None, gutter_width: int, base: Style) -> Strip:
        style = base + self.get_component_rich_style("filelog--gutter", partial=True)
        if index is None:  # a wrapped line's continuation row
            return Strip([Segment(" " * gutter_width, style)], gutter_width)
        if self.stream_of(index) == "stderr":
            style += self.get_component_rich_style("filelog--stderr", partial=True)
        number = f"{index + 1:>{gutter_width - 1}}" if index < self.line_count else (
            "…".rjust(gutter_width - 1)
        )
        return Strip([Segment(f"{number} ", style)], gutter_width)

    def _strip(self, index: int, base: Style) -> Strip:
        key = (index, 1 if index == self.current_match else 0)
        strip = self._strips.get(key)
        if strip is None:
            strip = self._make_strip(index, base)
            self._strips[key] = strip
        return strip

    def _wrapped_strips(self, index: int, width: int, base: Style) -> list[Strip]:
        key = (index, width, 1 if index == self.current_match else 0)
        strips = self._wrapped.get(key)
        if strips is None:
            text = self._styled_text(index)
            lines = text.wrap(self.app.console, width, overflow="fold", no_wrap=False)
            strips = [
                Strip(Segment.apply_style(list(line.render(self.app.console)), base))
                for line in lines
            ] or [Strip.blank(width, base)]
            self._wrapped[key] = strips
        return strips

    def _wrap_layout(self, top: int, width: int, base: Style) -> list[tuple[int, Strip]]:
        """The rows on screen with wrapping: (line, row strip) from line ``top`` down; when
        that would leave the screen's foot empty, the rows that end with the last line."""
        height = self.scrollable_content_region.height
        key = (top, width, height, self.row_count)
        if self._layout is not None and self._layout[0] == key:
            return self._layout[1]
        rows = self.row_count
        out: list[tuple[int, Strip]] = []
        index = min(top, rows)
        while index < rows and len(out) < height:
            out += [(index, strip) for strip in self._wrapped_strips(index, width, base)]
            index += 1
        if len(out) < height and top > 0:
            # Near the end: fill the screen up to the last line (following shows the tail).
            out = []
            index = rows - 1
            while index >= 0 and len(out) < height:
                strips = self._wrapped_strips(index, width, base)
                out = [(index, strip) for strip in strips] + out
                index -= 1
            out = out[-height:]
        else:
            out = out[:height]
        self._layout = (key, out)
        return out

    def _styled_text(self, index: int) -> Text:
        text = display_text(self.get_line(index))
        if index < self.line_count and self.stream_of(index) == "stdin":
            # A line a person typed (a merged source that reads stdin.log says "stdin").
            style = self.get_component_rich_style("filelog--typed", partial=True)
            text = Text.assemble((TYPED_MARK, style), text.copy(), no_wrap=True)
            text.stylize(style)
        if index >= self.line_count:
            text = text.copy()
            text.stylize(self.get_component_rich_style("filelog--partial", partial=True))
        if self._pattern is not None:
            text = text.copy()
            name = "filelog--current" if index == self.current_match else "filelog--match"
            style = self.get_component_rich_style(name, partial=True)
            for match in self._pattern.finditer(text.plain):
                if match.end() > match.start():
                    text.stylize(style, match.start(), match.end())
        return text

    def _make_strip(self, index: int, base: Style) -> Strip:
        text = self._styled_text(index)
        if text.cell_len > self._width:
            self._width = min(text.cell_len, 100_000)
            self.call_later(self._update_virtual_size)
        segments = list(text.render(self.app.console))
        return Strip(Segment.apply_style(segments, base), text.cell_len)

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._strips.clear()
        self._wrapped.clear()
        self._layout = None


def _partials(source: LogSource | None, stream: str) -> list[tuple[str, str]]:
    """The source's unfinished last lines as (stream, text)."""
    if source is None:
        return []
    many = getattr(source, "partials", None)
    if callable(many):
        return list(many())
    text = getattr(source, "partial", "")
    return [(stream, text)] if text else []
