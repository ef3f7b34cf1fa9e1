"""A console sink for the output pump: prefixed, whole lines, one writer lock.

``ConsoleSink(dst, name="trainer")`` is a callable that ``OutputPump`` (or anything that has
``RankOutput`` / ``TextBatch`` objects) can call with a batch; it writes every line as
``f"[{name}{rank}]:{line}\\n"`` (or the prefix given for the rank) to the text stream ``dst``
and flushes once per batch. This is what ``rankvisor run --headless`` and ``TailLog`` print.

- Complete lines only: a partial line is not printed until it ends (or the pump stops and
  turns it into a final line), so lines of two ranks are never glued together. Unless
  ``frames_every`` is given: then the current frame of an unfinished line (a progress bar
  redrawn with ``\r``) is printed at most that often per rank and stream, as a line of its
  own when ``dst`` is not a terminal, and on a terminal in place (``\r``, cut to the width),
  wiped before anything else is written there. Without it a tqdm-only rank looks frozen.
- One lock around each batch's write, the same for every ``ConsoleSink`` of a ``dst``: several
  pumps (stdout and stderr tailers) may share it, and no line is lost or interleaved with another.
- Sanitised by default (SGR colours kept, other escapes neutralised, see
  ``engine.output.sanitize``), even if the pump ran with ``sanitize=False``; ``raw=True`` writes the
  text as it came (still decoded and ``\\r``-collapsed).
- ``line_filter(line) -> bool`` keeps only the lines it accepts; for torch compatibility it is
  called with the line *including* its ``\\n``, like torch's ``log_line_filter``.
- ``streams`` limits the sink to some streams (e.g. ``{"stdout"}``); None takes all.
- A console is a view; the log files are the record. So a destination that fails (a closed
  pipe: ``rankvisor ... | head``; any other write error) is written no more, quietly, and
  ``stopped`` says why. Writes to a pipe, a socket or a terminal never block in the kernel:
  they wait for room in slices (back-pressure, as a blocking write would), and after
  ``shutting_down()`` a destination that takes nothing for ``grace_s`` is given up, so a
  console nobody reads cannot hold up the end of a run.
"""

from __future__ import annotations

import codecs
import errno
import os
import re
import select
import socket
import stat
import threading
import weakref
from typing import Any, Callable, Collection, Iterable, TextIO, Union

from .. import clock
from ..events import RankOutput
from .sanitize import sanitize
from .text_batch import LineBlock, Prefixes, TextBatch, prefix_for

__all__ = ["ConsoleSink"]

_WAIT_SLICE_MS = 100
"""A write waiting for room looks this often whether it should give up."""

_SGR = re.compile(r"\x1b\[[0-9;:]*m")
_WIPE = b"\r\x1b[K"
"""Back to the start of the line and erase it: where an in-place frame stood."""


class _Frame:
    """The unfinished line of one rank's stream, and when it was last printed."""

    __slots__ = ("text", "shown", "at")

    def __init__(self) -> None:
        self.text = ""
        self.shown = ""
        self.at: float | None = None


class _Channel:
    """One destination as every sink of this process writes to it: its lock, whether it is
    still written, and (for pipes, sockets, terminals) a way to write without blocking."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.stopped: str | None = None
        """Why the destination is written no more; None while it is."""
        self.grace_s: float | None = None
        """Set by ``shutting_down``: give up after this long without progress."""
        self.grace_from = 0.0
        self._probed = False
        self._fd: int | None = None
        """Our own non-blocking open file description of the same pipe or terminal."""
        self._sock: socket.socket | None = None

    def nonblocking(self, dst: object) -> bool:
        """Whether writes to ``dst`` can go through ``send`` (found out once)."""
        if not self._probed:
            self._probed = True
            try:
                fd = dst.fileno()  # type: ignore[attr-defined]
                self._fd, self._sock = _open_nonblocking(fd)
            except BrokenPipeError:
                raise
            except (AttributeError, OSError, ValueError):
                pass  # no descriptor, or one we cannot reopen: plain blocking writes
        return self._fd is not None or self._sock is not None

    def send(self, data: bytes) -> bool:
        """Write all of ``data``; False if we gave up waiting for room (see ``grace_s``).

        Raises OSError (BrokenPipeError: the reader is gone) as ``os.write`` does.
        """
        view = memoryview(data)
        fd = self._fd if self._fd is not None else self._sock.fileno()  # type: ignore[union-attr]
        poller = select.poll()
        poller.register(fd, select.POLLOUT)
        progress = clock.monotonic()
        while view:
            try:
                if self._sock is not None:
                    n = self._sock.send(view, socket.MSG_DONTWAIT)
                else:
                    n = os.write(fd, view)
            except BlockingIOError:
                n = 0
            if n:
                view = view[n:]
                progress = clock.monotonic()
                continue
            # Full: nobody reads at the moment. Wait for room like a blocking write would
            # (back-pressure), but in slices, so that once shutdown started we stop waiting.
            grace = self.grace_s
            if grace is not None and clock.monotonic() - max(progress, self.grace_from) >= grace:
                return False
            poller.poll(_WAIT_SLICE_MS)
        return True

    def stop(self, why: str, dst: object) -> None:
        """Write no more to ``dst``; a dead pipe's descriptor is pointed at /dev/null."""
        self.stopped = why
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        if why == "closed":
            # Its reader is gone for good: nothing written to it can ever be read. On
            # /dev/null, later writes (a print, the interpreter's flush at exit) are quiet
            # instead of raising BrokenPipeError where nobody catches it.
            try:
                fd = dst.fileno()  # type: ignore[attr-defined]
                null = os.open(os.devnull, os.O_WRONLY | os.O_CLOEXEC)
                try:
                    os.dup2(null, fd, inheritable=os.get_inheritable(fd))
                finally:
                    os.close(null)
            except (AttributeError, OSError, ValueError):
                pass


def _open_nonblocking(fd: int) -> tuple[int | None, socket.socket | None]:
    """A non-blocking way to write to what ``fd`` is, without changing ``fd`` itself.

    O_NONBLOCK belongs to the open file description, which ``fd`` shares with the shell and
    whoever else holds it: setting it there would break them. A pipe or a terminal opened
    again through /proc is a description of our own; a socket takes MSG_DONTWAIT per call.
    Regular files and /dev/null need neither (a write to them does not wait for a reader).
    """
    st = os.fstat(fd)
    mode = st.st_mode
    if stat.S_ISSOCK(mode):
        return None, socket.socket(fileno=os.dup(fd))
    if not (stat.S_ISFIFO(mode) or (stat.S_ISCHR(mode) and os.isatty(fd))):
        return None, None
    try:
        own = os.open(
            f"/proc/self/fd/{fd}", os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY
        )
    except OSError as e:
        if e.errno == errno.ENXIO and stat.S_ISFIFO(mode):
            raise BrokenPipeError(errno.EPIPE, "no reader") from e  # its reader is gone
        return None, None
    check = os.fstat(own)
    if (check.st_dev, check.st_ino) != (st.st_dev, st.st_ino):
        os.close(own)
        return None, None
    return own, None


_channels: weakref.WeakKeyDictionary[object, _Channel] = weakref.WeakKeyDictionary()
_channels_guard = threading.Lock()


def _channel_for(dst: object) -> _Channel:
    with _channels_guard:
        try:
            channel = _channels.get(dst)
        except TypeError:  # not weak-referenceable: a channel of our own
            return _Channel()
        if channel is None:
            channel = _channels[dst] = _Channel()
        return channel


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
        frames_every: print the current frame of an unfinished line at most once per this
            many seconds per rank and stream (None: complete lines only).
        in_place: draw those frames over each other on one line; None: when ``dst`` is a
            terminal.
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
        frames_every: float | None = None,
        in_place: bool | None = None,
    ) -> None:
        self._dst = dst
        self._frames_every = frames_every
        self._frames: dict[tuple[int, str], _Frame] = {}
        if in_place is None and frames_every is not None:
            try:
                in_place = dst.isatty()
            except (AttributeError, OSError, ValueError):
                in_place = False
        self._in_place = bool(in_place)
        self._frame_up = False
        """An in-place frame stands on the terminal's last line: wipe it before writing."""
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
        self._channel = _channel_for(dst)
        self.lock = self._channel.lock
        """The lock every ``ConsoleSink`` writing to this ``dst`` shares."""
        self.lines_written = 0

    @property
    def stopped(self) -> str | None:
        """Why ``dst`` is written no more: "closed" (its reader is gone), "not read"
        (given up after ``shutting_down``), or the error; None while it is written."""
        return self._channel.stopped

    def shutting_down(self, grace_s: float = 1.0) -> None:
        """From now on, give ``dst`` up when it takes nothing for ``grace_s`` seconds.

        For every sink of this ``dst``, and for a write already waiting; idempotent. Until this is
        called, a destination that is not read holds the writer back (as a blocking write
        would); the end of a run must not wait on it.
        """
        channel = self._channel
        if channel.grace_s is None:  # the first call counts: the grace does not restart
            channel.grace_from = clock.monotonic()
            channel.grace_s = grace_s

    def write_text(self, text: str) -> bool:
        """Write ``text`` as it is (a notice, a report), with the same care as lines;
        False if ``dst`` is written no more."""
        with self.lock:
            return self._write(self._wiped(text.encode("utf-8", "surrogatepass")))

    def wipe_frame(self) -> None:
        """Erase an in-place frame, if one stands on ``dst`` (before another writer that
        shares the terminal, such as stderr beside stdout, writes to it).

        Never waits long: a writer that holds the lock is stuck on a full terminal (it wipes
        the frame itself when it gets through), and the other stream must not wait on it.
        """
        if not self._frame_up:  # read without the lock: only ever set in place, on a tty
            return
        if not self.lock.acquire(timeout=0.1):
            return
        try:
            if self._frame_up:
                self._write(self._wiped(b""))
        finally:
            self.lock.release()

    def frames_waiting(self) -> bool:
        """Whether a rank's unfinished line is not on the console yet (``flush_frames`` owes
        it once its time comes). Read without the lock: a hint for when to look again."""
        if self._frames_every is None:
            return False
        return any(f.text and f.text != f.shown for f in list(self._frames.values()))

    def flush_frames(self) -> None:
        """Print the frames whose time has come though no new output arrived since (the
        last redraw of a rank that went quiet would otherwise wait for its next one)."""
        if self._frames_every is None or not self._frames:
            return
        # Not waiting: the lock is held by a write stuck on a console nobody reads (which
        # must not stall our caller, the loop that watches for signals); try next time.
        if not self.lock.acquire(blocking=False):
            return
        try:
            data = self._due_frames()
            if data:
                self._write(data)
        finally:
            self.lock.release()

    def _wiped(self, data: bytes) -> bytes:
        """``data`` preceded by the wiping of an in-place frame, if one stands."""
        if not self._frame_up:
            return data
        self._frame_up = False
        return _WIPE + data

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
        noted: list[Union[RankOutput, TextBatch]] = []
        for item in batch:
            if self._streams is not None and item.stream not in self._streams:
                continue
            if self._frames_every is not None:
                noted.append(item)
            shown = self._frame_printed(item)
            data: bytes | None = None
            if isinstance(item, TextBatch):
                if not item.data:
                    continue
                if self._filter is None and not self._check:
                    data, n = item.data, item.count
                else:
                    lines = item.lines
            elif type(item.lines) is LineBlock and self._filter is None and not self._check:
                if not item.lines:
                    continue
                data, n = item.lines.read_data(), item.lines.count  # as the pump read it
            else:
                lines = item.lines
            if shown:
                # Its first line was printed already, as its unfinished frame.
                if data is not None:
                    data, n = data[data.index(b"\n") + 1:], n - 1
                    if not data:
                        continue
                else:
                    lines = lines[1:]
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
        if not out and not noted:
            return
        data = b"".join(out)
        with self.lock:
            if out and self._write(self._wiped(data)):
                self.lines_written += count
            if noted:
                for item in noted:
                    self._note_frame(item)
                frames = self._due_frames()
                if frames:
                    self._write(frames)

    def _frame_printed(self, item: RankOutput | TextBatch) -> bool:
        """Whether ``item``'s first complete line is the frame of its rank's stream already
        printed as a line (a pipe, a file). An unbuffered Python rank writes a print's text
        and its newline apart; a read between the two saw an unfinished line, printed as its
        frame at once, and the line it became would be printed a second time."""
        if self._frames_every is None or self._in_place:
            return False
        frame = self._frames.get((item.rank, item.stream))
        if frame is None or not frame.shown:
            return False
        data = item.data if isinstance(item, TextBatch) else getattr(item.lines, "data", None)
        if isinstance(data, bytes):
            end = data.find(b"\n")
            return end >= 0 and data[:end].decode("utf-8", "surrogatepass") == frame.shown
        return bool(item.lines) and item.lines[0] == frame.shown

    def _note_frame(self, item: RankOutput | TextBatch) -> None:
        """Keep the rank's current unfinished line (after this batch's complete lines;
        caller holds the lock)."""
        frame = self._frames.get((item.rank, item.stream))
        if frame is None:
            frame = self._frames[(item.rank, item.stream)] = _Frame()
        if item.count if isinstance(item, TextBatch) else item.lines:
            frame.shown = ""  # the line it drew is complete now, printed as a line
        frame.text = item.partial
        if self._filter is not None and frame.text and not self._filter(frame.text + "\n"):
            frame.text = ""

    def _due_frames(self) -> bytes:
        """The frames to print now (caller holds the lock): changed since last printed,
        and not printed within ``frames_every``; as lines, or (in place) the newest one
        over the last."""
        every = self._frames_every
        assert every is not None
        now = clock.monotonic()
        ready = [
            (rank, frame)
            for (rank, _stream), frame in self._frames.items()
            if frame.text and frame.text != frame.shown
            and (frame.at is None or now - frame.at >= every)
        ]
        if self._in_place and ready:
            # One line shows one frame: the rank whose frame waited longest gets it, so
            # every rank's progress is seen in turn.
            ready = [min(ready, key=lambda item: item[1].at or 0.0)]
        due: list[tuple[int, str]] = []
        for rank, frame in ready:
            frame.shown = frame.text
            frame.at = now
            due.append((rank, frame.text if not self._check else sanitize(frame.text)))
        if not due:
            return b""
        if not self._in_place:
            return self._wiped(b"".join(
                self._encoded_prefix(rank) + text.encode("utf-8", "surrogatepass") + b"\n"
                for rank, text in due
            ))
        # One line on a terminal, without colours (a cut must not split
        # an escape) and cut to the width, so "\r" really goes back to its start.
        rank, text = due[-1]
        line = self.prefix(rank) + _SGR.sub("", text)
        width = self._columns()
        if width and len(line) >= width:
            line = line[: width - 1]
        self._frame_up = True
        return _WIPE + line.encode("utf-8", "surrogatepass")

    def _columns(self) -> int:
        try:
            return os.get_terminal_size(self._dst.fileno()).columns
        except (AttributeError, OSError, ValueError):
            return 0

    def _encoded_prefix(self, rank: int) -> bytes:
        p = self._bcache.get(rank)
        if p is None:
            p = self._bcache[rank] = self.prefix(rank).encode("utf-8", "surrogatepass")
        return p

    def _write(self, data: bytes) -> bool:
        """Write UTF-8 ``data`` (caller holds the lock); False if ``dst`` is written no more.

        To the binary buffer under a UTF-8 text stream (after flushing the text layer, so the
        order is kept), through our non-blocking description when ``dst`` is a pipe, socket
        or terminal; else decoded through ``write``. A failing ``dst`` is given up quietly:
        the files are the record, and a traceback per batch helps nobody.
        """
        channel = self._channel
        if channel.stopped is not None:
            return False
        dst = self._dst
        try:
            raw = self._raw_out
            if raw is None:
                raw = self._raw_out = _binary_buffer(dst) or False
            if raw:
                dst.flush()
                if channel.nonblocking(dst):
                    if not channel.send(data):
                        channel.stop("not read", dst)
                        return False
                    return True
                raw.write(data)
                if self._flush:
                    raw.flush()
                return True
            text = data.decode("utf-8", "surrogatepass")
            try:
                dst.write(text)
            except UnicodeEncodeError:  # a console that cannot show every character
                enc = getattr(dst, "encoding", None) or "ascii"
                dst.write(text.encode(enc, "replace").decode(enc))
            if self._flush:
                dst.flush()
        except BrokenPipeError:
            channel.stop("closed", dst)
            return False
        except (OSError, ValueError) as e:  # ValueError: written to after being closed
            channel.stop(str(e) or type(e).__name__, dst)
            return False
        return True


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
