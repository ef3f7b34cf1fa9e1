"""``LogStore``: one rank's log file as the UI sees it: any line on demand, the tail in memory.

Why the file is the buffer (as in Toolong): the store keeps only a compact index of where
lines start (``engine.logfile.line_index``, about 1 MB per GB of log) and reads the lines a
view asks for from disk, so a multi-GB log costs the memory of a small one, and the UI can
show any line of a run that printed for days. Line numbers count the file's complete lines
from 0, as ``RankOutput.first_line`` does, so a line seen live is found again here; a line
reads as the output pump would show it (``engine.output.lines``), so scrollback and the live
pane agree. The file is never written.

Threads: every method may be called from any thread; one lock guards the index and the
tail, and reads use ``os.pread`` on their own offsets, so a search thread and the UI thread
do not disturb each other. ``refresh`` reads every new byte once (about 0.3 s for 300 MB
here): call it off the UI thread when a big file is opened.
"""

from __future__ import annotations

import os
import threading
from collections import deque
from typing import TYPE_CHECKING, Final, Iterator

from ..output.lines import DEFAULT_MAX_LINE_CHARS, collapse_cr, cut_marker
from ..output.sanitize import sanitize as _sanitize
from .line_index import DEFAULT_BLOCK_SIZE, LineIndex
from .search import search_file

if TYPE_CHECKING:
    import re

__all__ = ["LogStore"]

_READ: Final = 1 << 20


class LogStore:
    """Index, scrollback and search for one log file.

    Display text: decoded UTF-8 (invalid bytes as U+FFFD), ``\\r`` redraws collapsed to the
    last frame, sanitised (SGR kept) unless ``sanitize=False``, cut at ``max_line_chars``
    with a marker. ``tail`` holds the last ``tail_lines`` display lines, ``partial`` the
    unterminated last line.

    Args:
        path: the log file (it may not exist yet).
        tail_lines: how many of the last display lines ``tail`` keeps.
        max_line_chars: display cap of one line.
        sanitize: neutralise escape sequences but SGR (False: return them raw).
        block_size: index granularity in bytes (memory: 16 bytes a block at most).
    """

    def __init__(
        self,
        path: str,
        *,
        tail_lines: int = 10_000,
        max_line_chars: int = DEFAULT_MAX_LINE_CHARS,
        sanitize: bool = True,
        block_size: int = DEFAULT_BLOCK_SIZE,
    ) -> None:
        self.path = path
        self._cap = max_line_chars
        self._byte_cap = 4 * max_line_chars
        """UTF-8 needs at most 4 bytes a character: this many bytes give ``cap`` chars."""
        self._sanitize = sanitize
        self._block_size = block_size
        self._lock = threading.RLock()
        self._index = LineIndex(block_size)
        self._fd: int | None = None
        self._ino = 0
        self.tail: deque[str] = deque(maxlen=tail_lines)
        """The last ``tail_lines`` display lines, oldest first (updated by ``refresh``)."""

    # -- indexing ----------------------------------------------------------------------

    @property
    def line_count(self) -> int:
        """Complete lines indexed so far."""
        return self._index.line_count

    @property
    def size(self) -> int:
        """Bytes indexed so far."""
        return self._index.end

    @property
    def index_bytes(self) -> int:
        """Memory held by the line index."""
        return self._index.nbytes()

    def refresh(self) -> int:
        """Index the bytes appended since the last call; return ``line_count``.

        A file truncated or replaced (same path, new inode) is started over; one that does
        not exist yet has no lines.
        """
        with self._lock:
            if not self._ensure_open():
                return 0
            assert self._fd is not None
            before = self._index.line_count
            pos = self._index.end
            while True:
                data = os.pread(self._fd, _READ, pos)
                if not data:
                    break
                self._index.feed(data)
                pos += len(data)
            after = self._index.line_count
            if after > before:
                first = max(before, after - (self.tail.maxlen or 0))
                self.tail.extend(self.get_lines(first, after))
            return after

    def _ensure_open(self) -> bool:
        if self._fd is not None:
            try:
                st = os.stat(self.path)
            except OSError:
                return True  # deleted: keep what we have open
            if st.st_ino == self._ino and st.st_size >= self._index.end:
                return True
            # Replaced or truncated: the lines we indexed are gone.
            self.close()
            self._index = LineIndex(self._block_size)
            self.tail.clear()
        try:
            self._fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return False
        self._ino = os.fstat(self._fd).st_ino
        return True

    def close(self) -> None:
        """Release the file descriptor (a later ``refresh`` opens it again)."""
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    def __enter__(self) -> LogStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- reading lines -----------------------------------------------------------------

    def get_lines(self, start: int, stop: int) -> list[str]:
        """Display text of lines ``[start, stop)``, clipped to the indexed lines."""
        return self.lines_and_end(start, stop)[0]

    def lines_and_end(self, start: int, stop: int) -> tuple[list[str], int]:
        """``get_lines``, and the byte offset just past the last line's newline (-1: no
        line): how much of the file the lines reach, for a batch's ``end_byte``."""
        with self._lock:
            stop = min(stop, self._index.line_count)
            start = max(0, start)
            if start >= stop or self._fd is None:
                return [], -1
            fd = self._fd
            raw, end = self._raw_lines(fd, start, stop)
        return self._display(raw), (end if raw else -1)

    @property
    def partial(self) -> str:
        """The unterminated last line as displayed ("" if the file ends with a newline)."""
        with self._lock:
            if self._fd is None or self._index.end <= self._index.last_line_end:
                return ""
            start = self._index.last_line_end
            size = self._index.end - start
            data = os.pread(self._fd, min(size, self._byte_cap), start)
        return self._display([(data, size - len(data))])[0]

    def _raw_lines(
        self, fd: int, start: int, stop: int
    ) -> tuple[list[tuple[bytes, int]], int]:
        """(head bytes, bytes cut) of each line in ``[start, stop)``, and the offset just
        past the last one's newline."""
        index = self._index
        cp = index.checkpoint_for(start)
        pos = cp.offset
        # Skip to line `start`: it begins less than one block after the checkpoint.
        pos += self._skip(fd, pos, start - cp.line)
        out: list[tuple[bytes, int]] = []
        buf = b""
        base = pos  # file offset of buf[0]
        line = start
        limit = self._byte_cap
        while line < stop:
            i = buf.find(b"\n", pos - base)
            if i >= 0 and i - (pos - base) <= limit:
                out.append((buf[pos - base : i], 0))
                pos = base + i + 1
                line += 1
                continue
            if len(buf) - (pos - base) > limit:
                # A line longer than the read cap: keep its head, find its end via the index
                # (a line longer than a block is always followed by a checkpoint).
                head = buf[pos - base : pos - base + limit]
                nxt = index.checkpoint_after(line)
                end = nxt.offset if nxt is not None and nxt.line == line + 1 else None
                if end is None:
                    end = self._find_line_end(fd, pos + limit)
                out.append((head, end - 1 - pos - limit))
                pos = end
                line += 1
                buf, base = b"", pos
                continue
            more = os.pread(fd, max(65536, limit + 1), base + len(buf))
            if not more:
                break  # the file shrank under us; refresh() will notice
            buf = buf[pos - base :] + more
            base = pos
        return out, pos

    def _skip(self, fd: int, pos: int, lines: int) -> int:
        """Bytes from ``pos`` (a line start) to the start of the ``lines``-th line after it.

        The target starts in the checkpoint's block, so one block-sized read is enough.
        """
        if lines <= 0:
            return 0
        window = os.pread(fd, self._block_size, pos)
        rest = window.split(b"\n", lines)[-1]
        return len(window) - len(rest)

    def _find_line_end(self, fd: int, pos: int) -> int:
        """Offset just after the next newline at or after ``pos`` (bounded reads)."""
        while True:
            data = os.pread(fd, _READ, pos)
            if not data:
                return pos + 1
            i = data.find(b"\n")
            if i >= 0:
                return pos + i + 1
            pos += len(data)

    def _display(self, raw: list[tuple[bytes, int]]) -> list[str]:
        """Decode, collapse, sanitise and cap a run of lines, as one text where possible."""
        if not raw:
            return []
        if all(cut == 0 for _, cut in raw):
            text = b"\n".join(data for data, _ in raw).decode("utf-8", "replace")
            if "\r" in text:
                text = collapse_cr(text)
            if self._sanitize:
                text = _sanitize(text)
            lines = text.split("\n")
        else:
            lines = [self._display_one(data) for data, _ in raw]
        cap = self._cap
        result = []
        for (_, cut), line in zip(raw, lines, strict=True):
            if cut:
                hidden = len(line[cap:].encode("utf-8", "surrogatepass")) + cut
                line = line[:cap] + f"…[+{hidden} bytes]"
            elif len(line) > cap:
                line = line[:cap] + cut_marker(len(line) - cap)
            result.append(line)
        return result

    def _display_one(self, data: bytes) -> str:
        text = collapse_cr(data.decode("utf-8", "replace"))
        return _sanitize(text) if self._sanitize else text

    # -- search ------------------------------------------------------------------------

    def search(
        self,
        pattern: str | re.Pattern[str],
        *,
        regex: bool = False,
        case_sensitive: bool = False,
        start: int = 0,
        backwards: bool = False,
        cancel: threading.Event | None = None,
    ) -> Iterator[int]:
        """Yield the numbers of lines that match, each once, forwards from ``start`` (or
        backwards); stop early once ``cancel`` is set.

        Reads the file in 1 MiB chunks (never all of it), matching the text with SGR colours
        removed and ``\\r`` redraws collapsed; covers the complete lines indexed so far.
        """
        with self._lock:
            if self._fd is None:
                return iter(())
            end = self._index.last_line_end
            count = self._index.line_count
            start = min(max(0, start), max(0, count - 1))
            cp = self._index.checkpoint_for(start)
            offset = cp.offset + self._skip(self._fd, cp.offset, start - cp.line)
        return search_file(
            self.path,
            pattern,
            regex=regex,
            case_sensitive=case_sensitive,
            offset=offset,
            line=start,
            end=end,
            backwards=backwards,
            cancel=cancel,
        )

