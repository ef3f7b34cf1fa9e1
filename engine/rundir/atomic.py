"""Replacing a file so that a reader, or a crash at any moment, sees the old one or the new one.

Every file the engine rewrites for others to read (status.json, a registry entry, error.json,
a function rank's return value, a bundle) goes through here, with one policy: the bytes go
to a temporary file in the same directory (a rename is atomic only within one file system),
are flushed to disk (``fsync``: a machine that loses power keeps the old file or the new one,
not an empty one), then renamed over the target; on any failure the temporary file is
removed, so nothing is left behind but the old file. The temporary name starts with a dot
and is unique to the writer (pid and random bytes), so two writers never share one.

``durable=False`` leaves out the ``fsync`` (a reader still sees the old file or the new one):
for a rewrite that only refreshes a file whose last durable version says what matters, such
as status.json's once-a-tick refresh while a run lasts, where a flush to disk every second
would wake the writer for the disk each time (and wear it) for figures seconds old.

``SwapWriter`` is that refresh for a file rewritten every few seconds for hours: two inodes
that trade names (``renameat2``'s RENAME_EXCHANGE) instead of a new inode each time. Making
and freeing an inode, and ext4 writing the new one out when it replaces another by rename,
were most of an idle supervisor's cost of keeping status.json fresh (a third of the cost,
measured cold). The inode it rewrites in place is the one the name left two seconds before;
a write lease (``F_SETLEASE``) proves first that no reader still has it open, and where one
has, or where the file system has no exchange or leases (NFS), that write is
``write_atomic``'s.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from typing import BinaryIO, Callable

__all__ = ["SwapWriter", "atomic_file", "write_atomic"]


@contextmanager
def atomic_file(path: str, mode: int = 0o644, *, durable: bool = True) -> Iterator[BinaryIO]:
    """A binary file to write; on leaving the block without an error it replaces ``path``.

    Args:
        path: the file to replace (or create).
        mode: its permission bits, before the umask (``0o666`` gives what ``open(path, "w")``
            gives, as torch's error.json has).

    Raises:
        OSError: the directory is missing or not writable; the temporary file is removed.
    """
    tmp, fd = _temporary(path, mode)
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            if durable:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        _discard(tmp)
        raise


def write_atomic(path: str, data: bytes, mode: int = 0o644, *, durable: bool = True) -> None:
    """Replace ``path`` with ``data`` (see ``atomic_file``), with plain descriptor calls:
    status.json's refresh comes here every two seconds for the whole run, and a Python file
    object around one write is a quarter of that write's cost."""
    tmp, fd = _temporary(path, mode)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        _discard(tmp)
        raise


class SwapWriter:
    """Rewrites ``path`` again and again as ``write_atomic(..., durable=False)`` does for its
    readers (the old bytes or the new, whole), with two inodes that trade names.

    Not thread-safe: one writer at a time (status.json's refresh holds the host's lock). A
    ``write_atomic`` of the same path in between is fine: the next swap trades with that
    file. ``close`` removes the spare name.
    """

    def __init__(self, path: str, mode: int = 0o644) -> None:
        directory, base = os.path.split(os.path.abspath(path))
        self.path = path
        self._spare = os.path.join(directory, f".{base}.swap")
        self._mode = mode
        self._fd: int | None = None
        self._exchange = _exchange_call()
        self.swaps = 0
        """Writes done by trading names (the rest were ``write_atomic``'s)."""

    def write(self, data: bytes) -> None:
        """Replace the file's content with ``data``, not flushed to disk."""
        if self._exchange is not None:
            try:
                if self._swap(data, self._exchange):
                    self.swaps += 1
                    return
            except OSError as e:
                self._drop()
                if e.errno in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.EPERM):
                    self._exchange = None  # this file system cannot: the old way from now
        write_atomic(self.path, data, durable=False)

    def close(self) -> None:
        """Forget the spare inode and remove its name."""
        self._drop()
        _discard(self._spare)

    def _swap(self, data: bytes, exchange: Callable[[str, str], None]) -> bool:
        if self._fd is None:
            self._fd = os.open(self._spare, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC |
                               os.O_NOFOLLOW, self._mode)
        fd = self._fd
        try:
            fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_WRLCK)
        except OSError as e:
            if e.errno != errno.EAGAIN:
                raise
            # A reader opened it while it was the file and has it still: it keeps those
            # bytes, and the next swap starts from a new spare.
            self._drop()
            _discard(self._spare)
            return False
        try:
            view = memoryview(data)
            offset = 0
            while offset < len(data):
                offset += os.pwrite(fd, view[offset:], offset)
            os.ftruncate(fd, len(data))
        finally:
            fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_UNLCK)
        try:
            exchange(self._spare, self.path)
        except FileNotFoundError:
            os.replace(self._spare, self.path)  # the first write: nothing to trade with
        # The spare's name now holds the bytes the file had: next time, that inode.
        self._drop()
        return True

    def _drop(self) -> None:
        if self._fd is not None:
            try:
                os.close(self._fd)
            except OSError:
                pass
            self._fd = None


_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def _exchange_call() -> Callable[[str, str], None] | None:
    """``renameat2(a, b, RENAME_EXCHANGE)`` from the C library, None where it has none (or
    where there are no leases to prove the spare unread)."""
    if not hasattr(fcntl, "F_SETLEASE"):
        return None
    try:
        call = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError):
        return None
    call.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    call.restype = ctypes.c_int

    def exchange(a: str, b: str) -> None:
        if call(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE):
            code = ctypes.get_errno()
            raise OSError(code, os.strerror(code), a)

    return exchange


def _temporary(path: str, mode: int) -> tuple[str, int]:
    """A new temporary file beside ``path``, named for this writer alone: (name, fd)."""
    directory, base = os.path.split(os.path.abspath(path))
    tmp = os.path.join(directory, f".{base}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    return tmp, os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode)


def _discard(tmp: str) -> None:
    try:
        os.unlink(tmp)
    except OSError:
        pass
