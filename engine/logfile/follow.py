"""``FileFollower``: the newest lines of log files that grow faster than events can follow.

Why: under a flood (64 ranks x 10k lines/s on two cores) the line events a viewer gets fall
seconds behind the files: the supervisor's pump shares the cores with the writers, and every
line on its way is cut, encoded, sent, decoded and buffered. A pane shows a few dozen rows and
nobody reads 10k lines a second; the file is the buffer. So the viewer tells the follower,
once a frame, which files it shows; a file that grows faster than ``flood_rate`` bytes a
second, or one the viewer follows already, is read from its end (at most ``max_bytes``,
never the whole file: under a flood the viewer has little CPU), and its new complete lines,
read as the pump shows them (``engine.output.lines``), come back for this frame, with its
unfinished last line. From one read to the next the follower goes on
where it stopped (a byte offset), so a followed file's lines come once, in order, with a gap
only where more was written between two frames than ``max_bytes`` holds. A pane's lag is then
bounded by the frame, not by the rate.

Threads: one follower belongs to one thread (the viewer's UI thread: a look is a ``stat``,
and a read is bounded, so it takes less than a frame's slice; a thread of its own would only
add a frame of lag).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable, Final, Hashable

from .. import clock as engine_clock
from ..output.lines import LineAssembler

__all__ = ["FLOOD_RATE", "FileFollower", "FileTail", "LAST_LINES_BYTES", "TAIL_BYTES"]

FLOOD_RATE: Final = 256 * 1024
"""Bytes a second past which a file is read from its end (about 2,500 lines of 100 bytes a
second: more than anybody reads, fewer than a flood writes)."""
TAIL_BYTES: Final = 16 * 1024
"""The most of a file's end read at a time (about 160 lines of 100 bytes: a pane's rows)."""
LAST_LINES_BYTES: Final = 2 * 1024
"""The most read at a time of a file whose rank is shown by its last line only (a tile):
enough for its last line and the lines its progress is read from."""
_MIN_WINDOW_S: Final = 0.05
"""Two looks closer than this are measured over this long (no rate from a few bytes)."""


@dataclass(frozen=True, slots=True)
class FileTail:
    """New lines of a followed file."""

    key: Hashable
    path: str
    lines: tuple[str, ...]
    """Complete lines after those handed out before (display text, oldest first)."""
    start: int
    """Byte offset of ``lines[0]`` in the file."""
    partial: str
    """The unfinished last line ("" if the file ends with a newline)."""
    gap: bool
    """Lines were written between the last tail and these that are in neither (more than
    ``max_bytes`` came in between), or this is the first tail of the file."""


class _Followed:
    __slots__ = ("at", "end", "path", "size")

    def __init__(self, path: str) -> None:
        self.path = path
        self.size = -1
        """Size at the last look (-1: never looked)."""
        self.at = 0.0
        self.end = -1
        """Byte offset after the last complete line handed out (-1: none yet)."""


class FileFollower:
    """Reads the new lines of fast-growing files from their end (see the module docstring).

    Args:
        flood_rate: growth in bytes a second from which a file is read from its end.
        max_bytes: the most read of a file at a time.
        clock: monotonic seconds (tests).
    """

    def __init__(
        self,
        flood_rate: float = FLOOD_RATE,
        max_bytes: int = TAIL_BYTES,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.flood_rate = flood_rate
        self.max_bytes = max_bytes
        self._clock = clock or engine_clock.monotonic
        self._files: dict[Hashable, _Followed] = {}
        self.reads = 0
        """Reads so far (a test can tell that a quiet file was never read)."""

    def look(self, key: Hashable, path: str, *, follow: bool = False,
             max_bytes: int | None = None, after: int = -1) -> FileTail | None:
        """Look at ``path`` (under ``key``) now: its new lines if it grows faster than
        ``flood_rate`` since the last look, or if ``follow`` and it grew; else None.

        ``after``: where the lines shown so far end, while the caller shows the file from
        elsewhere (its events: the last batch's ``end_byte``); -1 once it shows what this
        follower reads, or when unknown. A read goes on from there: its tail repeats none of
        those lines, and has no gap if no more than ``max_bytes`` came since. Otherwise each
        read goes on from the last.

        Cheap: one ``stat``, and at most ``max_bytes`` (default: the follower's) read and
        cut into lines: a rank shown only by its last line needs far less than a pane."""
        if not path:
            return None
        try:
            size = os.stat(path).st_size
        except OSError:
            return None
        now = self._clock()
        state = self._files.get(key)
        if state is None or state.path != path:
            state = self._files[key] = _Followed(path)
        if after >= 0:
            state.end = after
        grown = size - state.size if state.size >= 0 else 0
        rate = grown / max(now - state.at, _MIN_WINDOW_S)
        state.size, state.at = size, now
        if not (rate >= self.flood_rate or (follow and size != state.end)):
            return None
        return self._read(key, state, self.max_bytes if max_bytes is None else max_bytes)

    def forget(self, key: Hashable) -> None:
        """Stop following ``key``."""
        self._files.pop(key, None)

    def _read(self, key: Hashable, state: _Followed, max_bytes: int) -> FileTail | None:
        try:
            with open(state.path, "rb") as f:
                size = f.seek(0, os.SEEK_END)
                if size < state.end:
                    state.end = -1  # truncated: start again from its end
                start = max(state.end, size - max_bytes, 0)
                f.seek(start)
                data = f.read(size - start)
                at_line_start = start == 0 or start == state.end
                if not at_line_start:
                    f.seek(start - 1)
                    at_line_start = f.read(1) == b"\n"
        except OSError:
            return None  # gone or unreadable: the events still carry the lines
        self.reads += 1
        gap = start != state.end
        if not at_line_start:  # the first line is cut: it begins before what was read
            cut = data.find(b"\n") + 1
            if not cut:
                return None
            data = data[cut:]
            start += cut
        last = data.rfind(b"\n") + 1
        asm = LineAssembler()
        lines = asm.feed(data)
        partial = asm.partial
        if not lines and not partial and not gap:
            return None
        state.end = start + last
        return FileTail(key, state.path, tuple(lines), start, partial, gap)
