"""A console sink for the output pump: prefixed, whole lines, one writer lock.

``ConsoleSink(dst, name="trainer")`` is a callable that ``OutputPump`` (or anything that has
``RankOutput`` / ``TextBatch`` objects) can call with a batch; it writes every line as
``f"[{name}{rank}]:{line}\\n"`` (or the prefix given for the rank) to the text stream ``dst``
and flushes once per batch. This is what ``rankvisor run --headless`` and ``TailLog`` print.

- Complete lines only: a partial line is not printed until it ends (or the pump stops and
  turns it into a final line), so lines of two ranks are never glued together.
- One lock around each batch's write: several pumps (stdout and stderr tailers) may share a
  ``dst`` through the same ``ConsoleSink`` or through ``ConsoleSink.lock_for(dst)``, and no
  line is lost or interleaved with another.
- Sanitised by default (SGR colours kept, other escapes neutralised, see
  ``engine.output.sanitize``), even if the pump ran with ``sanitize=False``; ``raw=True`` writes the
  text as it came (still decoded and ``\\r``-collapsed).
- ``line_filter(line) -> bool`` keeps only the lines it accepts; for torch compatibility it is
  called with the line *including* its ``\\n``, like torch's ``log_line_filter``.
- ``streams`` limits the sink to some streams (e.g. ``{"stdout"}``); None takes all.
"""

from __future__ import annotations

import codecs
import threading
import weakref
from typing import Any, Callable, Collection, Iterable, TextIO, Union

from engine.events import RankOutput
from engine.output.sanitize import sanitize
from engine.output.text_batch import Prefixes, TextBatch, prefix_for

__all__ = ["ConsoleSink"]

_locks: weakref.WeakKeyDictionary[object, threading.Lock] = weakref.WeakKeyDictionary()
_locks_guard = threading.Lock()


class ConsoleSink:
    """Write batches of rank lines to ``dst`` with a per-rank prefix.

    Args:
        dst: a text stream (``sys.stdout``, an open file).
        name: default prefix ``f"[{name}{rank}]:"`` (no trailing space, as torch).
        prefixes: per-rank prefixes (dict or callable); missing ranks use the default.
        raw: write escape sequences as they came instead of sanitising.
        line_filter: keep only lines for which it returns True (called with ``line + "\\n"``).
        streams: streams to print (None: all).
        flush: flush ``dst`` after each batch (console output should not sit in a buffer).
        presanitized: the batches come from a pump that sanitises already (skips a
            second, redundant check).
    """

    def __init__(
        self,
        dst: TextIO,
        *,
        name: str = "",
        prefixes: Prefixes = None,
        raw: bool = False,
        line_filter: Callable[[str], bool] | None = None,
        streams: Collection[str] | None = None,
        flush: bool = True,
        presanitized: bool = False,
    ) -> None:
        self._dst = dst
        self._name = name
        self._prefixes = prefixes
        self._cache: dict[int, str] = {}
        self._bcache: dict[int, bytes] = {}
        self._raw_out: Any = None
        """``dst``'s binary buffer when it is a UTF-8 text stream; False if it has none."""
        self._raw = raw
        self._check = not raw and not presanitized
        self._filter = line_filter
        self._streams = None if streams is None else frozenset(streams)
        self._flush = flush
        self.lock = self.lock_for(dst)
        """The lock every ``ConsoleSink`` writing to this ``dst`` shares."""
        self.lines_written = 0

    @staticmethod
    def lock_for(dst: object) -> threading.Lock:
        """The one lock for writes to ``dst`` (shared by every sink of this process)."""
        with _locks_guard:
            try:
                lock = _locks.get(dst)
            except TypeError:  # not weak-referenceable: fall back to a lock of our own
                return threading.Lock()
            if lock is None:
                lock = threading.Lock()
                _locks[dst] = lock
            return lock

    def prefix(self, rank: int) -> str:
        """The header written before each line of ``rank``."""
        p = self._cache.get(rank)
        if p is None:
            # A prefix template or role name could carry escapes too: never raw to a terminal.
            p = self._cache[rank] = sanitize(prefix_for(self._prefixes, self._name, rank))
        return p

    def __call__(self, batch: Iterable[Union[RankOutput, TextBatch]], /) -> None:
        """Write the complete lines of ``batch`` (partials are not printed)."""
        out: list[bytes] = []
        count = 0
        for item in batch:
            if self._streams is not None and item.stream not in self._streams:
                continue
            data: bytes | None = None
            if isinstance(item, TextBatch):
                if not item.data:
                    continue
                if self._filter is None and not self._check:
                    data, n = item.data, item.count
                else:
                    lines = item.lines
            else:
                lines = item.lines
            if data is None:
                if self._filter is not None:
                    lines = tuple(x for x in lines if self._filter(x + "\n"))
                if not lines:
                    continue
                text = "\n".join(lines) + "\n"
                if self._check:
                    text = sanitize(text)
                data, n = text.encode("utf-8", "surrogatepass"), len(lines)
            header = self._encoded_prefix(item.rank)
            # One C-level replace on bytes instead of a per-line loop: the hot path of a busy
            # console (bytes.replace is about twice as fast as str.replace here).
            out.append(header)
            out.append(data.replace(b"\n", b"\n" + header)[: -len(header) or None])
            count += n
        if not out:
            return
        data = b"".join(out)
        with self.lock:
            self._write(data)
            self.lines_written += count

    def _encoded_prefix(self, rank: int) -> bytes:
        p = self._bcache.get(rank)
        if p is None:
            p = self._bcache[rank] = self.prefix(rank).encode("utf-8", "surrogatepass")
        return p

    def _write(self, data: bytes) -> None:
        """Write UTF-8 ``data``: to the binary buffer under a UTF-8 text stream (after
        flushing the text layer, so the order is kept), else decoded through ``write``."""
        dst = self._dst
        raw = self._raw_out
        if raw is None:
            raw = self._raw_out = _binary_buffer(dst) or False
        if raw:
            dst.flush()
            raw.write(data)
            if self._flush:
                raw.flush()
            return
        text = data.decode("utf-8", "surrogatepass")
        try:
            dst.write(text)
        except UnicodeEncodeError:  # a console that cannot show every character
            enc = getattr(dst, "encoding", None) or "ascii"
            dst.write(text.encode(enc, "replace").decode(enc))
        if self._flush:
            dst.flush()


def _binary_buffer(dst: object) -> Any:
    """The byte stream under a UTF-8 text stream (``sys.stdout.buffer``), or None."""
    buffer = getattr(dst, "buffer", None)
    encoding = getattr(dst, "encoding", None)
    if buffer is None or not encoding or not hasattr(buffer, "write"):
        return None
    try:
        if codecs.lookup(encoding).name != "utf-8":
            return None
    except LookupError:
        return None
    return buffer
