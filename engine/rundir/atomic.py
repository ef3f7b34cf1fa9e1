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
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from typing import BinaryIO

__all__ = ["atomic_file", "write_atomic"]


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
