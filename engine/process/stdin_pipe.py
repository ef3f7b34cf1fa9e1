"""``RankStdin``: the pipe one incarnation of a rank reads as its stdin, held by its supervisor.

A pipe rather than a PTY: the rank's stdout and stderr stay plain files holding exactly the
rank's own bytes (a PTY would echo the typed lines into them, turn ``\\n`` into ``\\r\\n`` and
make every rank "interactive"); pdb, ``input()`` and ``torch.distributed.breakpoint()`` all
read a pipe line by line. The read end goes to the rank as fd 0 and is closed here once the
rank holds it; the write end stays open for the rank's whole life, so the rank reads EOF only
when a person asks for it (``close``) or the rank has exited.

Writes never block the supervisor: the write end is non-blocking and one line is written
whole or not at all. A line that does not fit in what the pipe has free (the rank has not
read the earlier ones) is refused with words that say so, never queued out of sight or
lost silently. ``inode`` names the pipe as ``/proc/PID/fd/N`` shows it (``pipe:[INODE]``),
which is how a reader of it is recognised whichever fd it uses.
"""

from __future__ import annotations

import errno
import fcntl
import os
import struct
import termios
import threading

__all__ = ["RankStdin", "StdinRefused"]

_F_GETPIPE_SZ = getattr(fcntl, "F_GETPIPE_SZ", 1032)
_PIPE_BUF = 4096
"""Writes of at most this many bytes are atomic on a pipe (POSIX's PIPE_BUF on Linux)."""


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
                free = fcntl.fcntl(self._write_fd, _F_GETPIPE_SZ) - _unread(self._write_fd)
                if len(data) + _PIPE_BUF > free:
                    raise _full(len(data), self._write_fd)
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

    def close(self) -> None:
        """Close the write end: the rank reads EOF once it has read what was sent."""
        with self._lock:
            if not self._closed:
                self._closed = True
                os.close(self._write_fd)
        self.spawned()


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
