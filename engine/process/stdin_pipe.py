"""``RankStdin``: the pipe one incarnation of a rank reads as its stdin, held by its supervisor.

A pipe rather than a PTY: the rank's stdout and stderr stay plain files holding exactly the
rank's own bytes (a PTY would echo the typed lines into them, turn ``\\n`` into ``\\r\\n`` and
make every rank "interactive"); pdb, ``input()`` and ``torch.distributed.breakpoint()`` all
read a pipe line by line. The read end goes to the rank as fd 0 and is closed here once the
rank holds it; the write end stays open for the rank's whole life, so the rank reads EOF only
when a person asks for it (``close``) or the rank has exited.

Writes never block the supervisor: the write end is non-blocking and one line is written
whole or not at all. A line longer than the pipe holds (a pasted tensor, a 60 KiB JSON
answer to ``input()``) grows the pipe to hold it once the rank has read what came before,
up to ``LINE_LIMIT`` bytes of pipe (the kernel's ``/proc/sys/fs/pipe-max-size`` where that
is less); the pipe is the only buffer, so nothing waits in the supervisor's memory. A line
that cannot fit (earlier lines are still unread: the rank is not reading; or the line is
over the limit) is refused with words that say so and name the limit, never queued out of
sight or lost silently. ``inode`` names the pipe as ``/proc/PID/fd/N`` shows it (``pipe:[INODE]``),
which is how a reader of it is recognised whichever fd it uses.
"""

from __future__ import annotations

import errno
import fcntl
import os
import struct
import termios
import threading

__all__ = ["LINE_LIMIT", "RankStdin", "StdinRefused", "longest_line"]

_F_GETPIPE_SZ = getattr(fcntl, "F_GETPIPE_SZ", 1032)
_F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)
_PIPE_BUF = 4096
"""Writes of at most this many bytes are atomic on a pipe (POSIX's PIPE_BUF on Linux)."""
LINE_LIMIT = 1 << 20
"""The most a rank's stdin pipe grows to (1 MiB, as a control message's limit): with a page
kept free, the longest line one send takes is ``longest_line()``."""
_MAX_SIZE_FILE = "/proc/sys/fs/pipe-max-size"


class StdinRefused(Exception):
    """The line could not go to the rank; the message says why, for a person."""


class RankStdin:
    """One incarnation's stdin pipe: ``read_fd`` for the spawn, the write end kept here."""

    def __init__(self) -> None:
        self.read_fd, self._write_fd = os.pipe2(os.O_CLOEXEC)
        os.set_blocking(self._write_fd, False)
        self.inode = os.fstat(self._write_fd).st_ino
        self._lock = threading.Lock()
        self._closed = False

    def spawned(self) -> None:
        """The rank holds its copy of the read end: ours goes (EOF then needs our close)."""
        if self.read_fd >= 0:
            os.close(self.read_fd)
            self.read_fd = -1

    @property
    def closed(self) -> bool:
        """True once the rank was sent EOF (or the incarnation ended)."""
        return self._closed

    def unread(self) -> int:
        """Bytes written that the rank has not read yet."""
        with self._lock:
            if self._closed:
                return 0
            return _unread(self._write_fd)

    def send(self, data: bytes) -> None:
        """Write ``data`` (one line, newline included) whole, without blocking.

        Raises:
            StdinRefused: the stdin was closed, the rank closed its end (it exited), or
                the pipe has no room for the line (the rank is not reading).
        """
        with self._lock:
            if self._closed:
                raise StdinRefused("its stdin was closed (EOF was sent)")
            if len(data) > _PIPE_BUF:
                # Not atomic: write only if it surely fits in what is free.
                self._make_room(len(data))
            view = memoryview(data)
            while view:
                try:
                    n = os.write(self._write_fd, view)
                except BlockingIOError:
                    if len(view) == len(data):
                        raise _full(len(data), self._write_fd) from None
                    # Past the check above, yet the pipe filled: the rest would be lost.
                    raise StdinRefused(
                        f"its stdin pipe filled while the line was written: "
                        f"{len(data) - len(view)} of {len(data)} bytes went"
                    ) from None
                except BrokenPipeError:
                    raise StdinRefused("it closed its stdin (or exited)") from None
                view = view[n:]

    def _make_room(self, size: int) -> None:
        """Grow the pipe so that ``size`` more bytes surely fit, or refuse the line."""
        unread = _unread(self._write_fd)
        capacity = fcntl.fcntl(self._write_fd, _F_GETPIPE_SZ)
        needed = unread + size + _PIPE_BUF  # a page spare: partly used pages are not free
        if needed <= capacity:
            return
        if unread:  # the rank has not read the earlier lines: it is not reading now
            raise _full(size, self._write_fd)
        limit = _pipe_limit()
        if needed > limit:
            raise StdinRefused(
                f"the line ({size} bytes) is longer than a rank's stdin takes in one line "
                f"(at most {limit - _PIPE_BUF} bytes): send it in parts, or through a file")
        grown = 1 << (needed - 1).bit_length()  # the kernel rounds to a power of two pages
        try:
            fcntl.fcntl(self._write_fd, _F_SETPIPE_SZ, min(grown, limit))
        except OSError as e:  # EPERM: this user's pipes are over the kernel's soft limit
            raise StdinRefused(
                f"its stdin pipe ({capacity} bytes) cannot grow to hold the line ({size} "
                f"bytes): {e.strerror}; send it in parts") from None

    def close(self) -> None:
        """Close the write end: the rank reads EOF once it has read what was sent."""
        with self._lock:
            if not self._closed:
                self._closed = True
                os.close(self._write_fd)
        self.spawned()


def _pipe_limit() -> int:
    """The most our pipes may grow to: ``LINE_LIMIT``, or the kernel's smaller bound."""
    try:
        with open(_MAX_SIZE_FILE, "rb") as f:
            kernel = int(f.read().strip() or 0)
    except (OSError, ValueError):
        return LINE_LIMIT
    return min(LINE_LIMIT, kernel) if kernel > 0 else LINE_LIMIT


def longest_line() -> int:
    """The longest line (newline included) one send takes into an empty pipe."""
    return _pipe_limit() - _PIPE_BUF


def _unread(fd: int) -> int:
    try:
        raw = fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0")
    except OSError as e:
        if e.errno == errno.EBADF:
            return 0
        raise
    return int(struct.unpack("i", raw)[0])


def _full(size: int, fd: int) -> StdinRefused:
    return StdinRefused(
        f"its stdin pipe is full ({_unread(fd)} bytes sent earlier are still unread: it is "
        f"not reading its stdin); the line ({size} bytes) was not sent"
    )
