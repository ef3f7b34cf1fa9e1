"""Search a log file for lines that match, chunk by chunk, cancellable, on or off a thread.

``search_file`` is the engine of ``LogStore.search``: it reads 1 MiB at a time (cut at a line
end) with ``os.pread``, so memory stays flat for any file size, and looks for the pattern in
the text as displayed (SGR colours removed, ``\\r`` redraws collapsed; line breaks kept, so
line numbers stay exact). A plain pattern uses ``str.find`` (C speed); a regex uses
``re.search`` over the chunk (``^``/``$`` match at line ends). Each matching line is yielded
once. A match is not found across a chunk boundary inside one line longer than 1 MiB.

``SearchJob`` runs a search on a daemon thread and reports matches through ``on_match``
(called on the search thread) or its ``matches`` queue, then ``on_done``; ``cancel()`` stops
it within one chunk.
"""

from __future__ import annotations

import os
import queue
import re
import threading
from typing import Any, Callable, Final, Iterator, Protocol

from ..output.lines import collapse_cr
from ..output.sanitize import strip_sgr

__all__ = ["SearchJob", "Searchable", "compile_pattern", "search_file"]

CHUNK: Final = 1 << 20


def compile_pattern(
    pattern: str | re.Pattern[str], *, regex: bool, case_sensitive: bool
) -> Callable[[str, int], int]:
    """A function ``find(text, pos) -> index of the next match or -1``."""
    if isinstance(pattern, re.Pattern):
        rx = pattern
    elif regex:
        flags = re.MULTILINE | (0 if case_sensitive else re.IGNORECASE)
        rx = re.compile(pattern, flags)
    else:
        needle = pattern if case_sensitive else pattern.lower()
        if not needle:
            return lambda text, pos: pos if pos <= len(text) else -1
        if case_sensitive:
            return lambda text, pos: text.find(needle, pos)
        # Callers lower-case the chunk once (see _prepare); the needle is lowered here.
        return lambda text, pos: text.find(needle, pos)

    def find(text: str, pos: int) -> int:
        m = rx.search(text, pos)
        return -1 if m is None else m.start()

    return find


def _prepare(data: bytes, lower: bool) -> str:
    text = data.decode("utf-8", "replace")
    if "\x1b" in text:
        text = strip_sgr(text)
    if "\r" in text:
        text = collapse_cr(text)
    return text.lower() if lower else text


def _matches(text: str, find: Callable[[str, int], int], first_line: int) -> Iterator[int]:
    """Line numbers (``first_line`` + index) of matching lines of ``text``, ascending."""
    pos = 0
    counted = 0
    line = first_line
    size = len(text)
    while pos <= size:
        i = find(text, pos)
        if i < 0 or i >= size:
            return
        line += text.count("\n", counted, i)
        yield line
        nl = text.find("\n", i)
        if nl < 0:
            return
        counted = nl + 1
        line += 1
        pos = nl + 1


def search_file(
    path: str,
    pattern: str | re.Pattern[str],
    *,
    regex: bool = False,
    case_sensitive: bool = False,
    offset: int = 0,
    line: int = 0,
    end: int | None = None,
    backwards: bool = False,
    cancel: threading.Event | None = None,
) -> Iterator[int]:
    """Yield matching line numbers of ``path``.

    Args:
        path: the file.
        pattern: text or regex (a compiled ``re.Pattern`` is used as is).
        regex: ``pattern`` is a regular expression.
        case_sensitive: match case exactly (default: ignore case).
        offset: byte offset of line ``line`` (where a forward search starts; a backward
            search covers the lines up to and including ``line``).
        line: line number at ``offset``.
        end: stop at this byte offset (the end of the last complete line); None: file end.
        backwards: yield lines ``line, line-1, ...`` instead of ``line, line+1, ...``.
        cancel: stop as soon as it is set (checked once per chunk).
    """
    lower = not case_sensitive and not regex and not isinstance(pattern, re.Pattern)
    find = compile_pattern(pattern, regex=regex, case_sensitive=case_sensitive)
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        if end is None:
            end = os.fstat(fd).st_size
        if backwards:
            yield from _backwards(fd, find, lower, offset, line, end, cancel)
            return
        pos = offset
        while pos < end:
            if cancel is not None and cancel.is_set():
                return
            data = os.pread(fd, min(CHUNK, end - pos), pos)
            if not data:
                return
            cut = data.rfind(b"\n") + 1
            if 0 < cut < len(data):
                data = data[:cut]  # whole lines only, the rest comes with the next chunk
            yield from _matches(_prepare(data, lower), find, line)
            line += data.count(b"\n")
            pos += len(data)
    finally:
        os.close(fd)


def _backwards(
    fd: int,
    find: Callable[[str, int], int],
    lower: bool,
    offset: int,
    line: int,
    end: int,
    cancel: threading.Event | None,
) -> Iterator[int]:
    stop = offset  # search the lines up to the end of line `line`
    while stop < end:
        data = os.pread(fd, min(CHUNK, end - stop), stop)
        i = data.find(b"\n")
        if i >= 0 or not data:
            stop += i + 1 if i >= 0 else 0
            break
        stop += len(data)
    stop = min(stop, end)
    last_line = line
    """Number of the line that holds byte ``stop - 1``."""
    while stop > 0:
        if cancel is not None and cancel.is_set():
            return
        start = max(0, stop - CHUNK)
        data = os.pread(fd, stop - start, start)
        at_line_start = start == 0
        if start > 0:
            i = data.find(b"\n")
            if 0 <= i < len(data) - 1:  # begin at the first line start inside the chunk
                data = data[i + 1 :]
                start += i + 1
                at_line_start = True
        first_line = last_line - data.count(b"\n", 0, len(data) - 1)
        hits = list(_matches(_prepare(data, lower), find, first_line))
        yield from reversed(hits)
        # Inside one long line the next chunk back still belongs to the same line.
        last_line = first_line - 1 if at_line_start else first_line
        stop = start


class Searchable(Protocol):
    """What ``SearchJob`` needs of a store (``LogStore`` is one): its ``search``."""

    def search(
        self,
        pattern: str,
        *,
        regex: bool = False,
        case_sensitive: bool = False,
        start: int = 0,
        backwards: bool = False,
        cancel: threading.Event | None = None,
    ) -> Iterator[int]: ...


class SearchJob:
    """A ``LogStore.search`` running on its own thread, cancellable.

    Args:
        store: the store to search (anything with ``LogStore.search``'s signature).
        pattern: what to look for.
        on_match: called with each matching line number, on the search thread (must be
            quick and thread-safe, e.g. ``app.call_from_thread`` or a queue put). Without
            it, matches go to ``matches``.
        on_done: called once at the end (finished, cancelled or failed), on the search
            thread, with the job.
        max_results: stop after this many matches (None: all).
        **search_kwargs: ``regex``, ``case_sensitive``, ``start``, ``backwards``.
    """

    def __init__(
        self,
        store: Searchable,
        pattern: str,
        *,
        on_match: Callable[[int], None] | None = None,
        on_done: Callable[[SearchJob], None] | None = None,
        max_results: int | None = None,
        **search_kwargs: Any,
    ) -> None:
        self._store = store
        self._pattern = pattern
        self._kwargs = search_kwargs
        self._on_match = on_match
        self._on_done = on_done
        self._max = max_results
        self._cancel = threading.Event()
        self.matches: queue.SimpleQueue[int] = queue.SimpleQueue()
        """Matching line numbers, in search order (when no ``on_match`` is given)."""
        self.count = 0
        """Matches found so far."""
        self.error: BaseException | None = None
        """What stopped the search if it failed (a bad regex: ``re.error``)."""
        self.done = threading.Event()
        """Set when the search is over, for whatever reason."""
        self._thread = threading.Thread(target=self._run, name="rankvisor-search", daemon=True)

    def start(self) -> SearchJob:
        """Start the thread; returns self."""
        self._thread.start()
        return self

    def cancel(self) -> None:
        """Ask the search to stop (it stops within one chunk); does not wait."""
        self._cancel.set()

    @property
    def cancelled(self) -> bool:
        """True if ``cancel()`` was called."""
        return self._cancel.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for the end; True if the search is over."""
        return self.done.wait(timeout)

    def _run(self) -> None:
        try:
            for line in self._store.search(self._pattern, cancel=self._cancel, **self._kwargs):
                if self._cancel.is_set():
                    break
                self.count += 1
                if self._on_match is not None:
                    self._on_match(line)
                else:
                    self.matches.put(line)
                if self._max is not None and self.count >= self._max:
                    break
        except BaseException as e:  # reported through .error: a thread has nowhere to raise
            self.error = e
        finally:
            self.done.set()
            if self._on_done is not None:
                self._on_done(self)
