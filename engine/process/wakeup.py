"""A self-pipe: how one thread wakes another that sleeps in ``poll``, ``select`` or ``epoll``.

The sleeper waits on ``fd`` beside what it really waits for (pidfds, a socket, inotify); any
other thread, or a signal handler, calls ``wake``. Both ends are non-blocking and
close-on-exec, so a rank never inherits them and ``wake`` never blocks: a full pipe means a
wake-up is pending anyway. The monitor thread, the exit watcher, the output pump's wakers,
the control client's reader, the torchrun handle's watcher and the signal inbox each hold one.
"""

from __future__ import annotations

import os

__all__ = ["Wakeup"]


class Wakeup:
    """A non-blocking self-pipe; poll ``fd`` for reading, ``drain`` it once it is ready."""

    def __init__(self) -> None:
        self.fd, self._write_fd = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        """The end to poll for reading (-1 once closed)."""

    def wake(self) -> None:
        """Make the next (or current) wait return; thread-safe and safe from a signal handler."""
        try:
            os.write(self._write_fd, b"!")
        except OSError:
            pass  # full (a wake-up is pending anyway) or closed (the sleeper is done)

    @property
    def write_fd(self) -> int:
        """The end ``wake`` writes to (-1 once closed): for a writer that is not Python's,
        as the C-level signal handler is (``signal_inbox``)."""
        return self._write_fd

    def drain(self) -> bytes:
        """Read every pending byte; returns them (a signal inbox reads what they say).

        Raises:
            OSError: the pipe was closed (a sleeper may take that as its signal to stop).
        """
        chunks = []
        try:
            while data := os.read(self.fd, 4096):
                chunks.append(data)
        except BlockingIOError:
            pass
        return b"".join(chunks)

    def close(self) -> None:
        """Close both ends (idempotent)."""
        for fd in (self.fd, self._write_fd):
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self.fd = self._write_fd = -1
