"""events.ndjson written whole lines at a time, through a full disk.

A write to a full file system may write part of a line (the blocks there were) and then fail:
a record that ends in a cut line is one no reader can trust past it. So every append either
writes its whole line or is undone (the file is cut back to where the line began, which frees
space and never needs any), and a line that could not be written waits, in order, in a
bounded backlog that each later append and ``retry`` try first: once space comes back (the
supervisor's reserve released at the run's end), the record is whole and in order again.
"""

from __future__ import annotations

import errno
import os
from collections import deque

__all__ = ["BACKLOG_BYTES", "RecordFile"]

BACKLOG_BYTES = 4 * 1024 * 1024
"""At most this much of the record waits in memory for space; older lines past it are
dropped (and counted), the newest kept: the run's end matters most."""


class RecordFile:
    """An append-only file of lines, opened by the caller (``O_APPEND``), never left cut.

    Not thread-safe: its one writer (the status thread) calls it under its own lock.
    """

    def __init__(self, fd: int, *, backlog_bytes: int = BACKLOG_BYTES) -> None:
        self._fd = fd
        self._backlog: deque[bytes] = deque()
        self._backlog_size = 0
        self._limit = backlog_bytes
        self.dropped = 0
        """Lines dropped from a full backlog (never written)."""
        self.last_error: OSError | None = None

    @property
    def waiting(self) -> int:
        """Lines not written yet."""
        return len(self._backlog)

    def append(self, line: bytes) -> bool:
        """Write ``line`` after the waiting ones; True when all are written now."""
        self._backlog.append(line)
        self._backlog_size += len(line)
        while self._backlog_size > self._limit and len(self._backlog) > 1:
            self._backlog_size -= len(self._backlog.popleft())
            self.dropped += 1
        return self.retry()

    def retry(self) -> bool:
        """Write the waiting lines, oldest first; True when none is left."""
        while self._backlog:
            if not self._write_whole(self._backlog[0]):
                return False
            self._backlog_size -= len(self._backlog.popleft())
        return True

    def close(self) -> None:
        os.close(self._fd)

    def _write_whole(self, line: bytes) -> bool:
        start = os.lseek(self._fd, 0, os.SEEK_END)
        done = 0
        try:
            while done < len(line):
                n = os.write(self._fd, line[done:])
                if n <= 0:
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
                done += n
        except OSError as e:
            self.last_error = e
            if done:
                try:
                    os.ftruncate(self._fd, start)
                except OSError:
                    pass
            return False
        return True
