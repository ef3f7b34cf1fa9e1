"""Redirect a standard stream to a file at the file-descriptor level.

``redirect_stdout("out.log")`` points file descriptor 1 itself at the file, so that
everything written to it lands there: Python's ``print``, C code calling ``printf`` (its
``FILE *`` buffer is flushed before each switch), and child processes started with
``os.system`` or ``subprocess`` (they inherit the descriptor). The names and the error for an
unknown stream follow ``torch.distributed.elastic.multiprocessing.redirects``.

Differences from torch, on purpose:

* libc is found with ``ctypes.util.find_library`` (falling back to the symbols already
  loaded into the interpreter), lazily, so importing this module never fails on musl
  (Alpine) where there is no ``libc.so.6`` (torch's import fails there). Without a usable libc the
  redirect still works; only C-level buffers are not flushed at the switch.
* C buffers are flushed with ``fflush(NULL)`` (every output stream) instead of looking up the
  ``stdout``/``stderr`` data symbols, whose names differ between C libraries.
* When ``sys.stdout`` writes to a descriptor other than 1 (pytest's capture does that), that
  descriptor is redirected too, so Python-level output is not lost from the file.

A redirect changes process-wide state: descriptors are shared by every thread. Use it in a
process that owns its streams (a rank), not in a multi-threaded supervisor.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import sys
from contextlib import contextmanager
from typing import Any, Callable, ContextManager, Final, Iterator

__all__ = ["redirect", "redirect_stderr", "redirect_stdout"]

_STD_FDS: Final[dict[str, int]] = {"stdout": 1, "stderr": 2}
"""The descriptor each standard stream has in every POSIX process."""

_VALID_STD: Final = set(_STD_FDS)


@functools.lru_cache(maxsize=1)
def get_libc() -> Any | None:
    """The C library, or None when it cannot be loaded (then C buffers are not flushed).

    Looked up on first use, not at import: a missing ``libc.so.6`` (musl) must not make
    ``import engine`` fail.
    """
    names: list[str | None] = [ctypes.util.find_library("c"), None]
    for name in names:
        try:
            # CDLL(None) is dlopen(NULL): the symbols already loaded into this process,
            # which include the C library on glibc and musl alike.
            libc = ctypes.CDLL(name)
            libc.fflush  # noqa: B018 - raises AttributeError if the symbol is missing
        except (OSError, AttributeError):
            continue
        return libc
    return None


def _flush_c_streams() -> None:
    """Write out C stdio buffers (``printf`` output not yet flushed) before a switch."""
    libc = get_libc()
    if libc is not None:
        # fflush(NULL) flushes every open output stream; it does not need the stdout
        # symbol, whose name is libc-specific.
        libc.fflush(None)


def _python_fd(std: str) -> int | None:
    """The descriptor behind ``sys.stdout``/``sys.stderr``, or None if it has none."""
    stream = getattr(sys, std, None)
    try:
        return stream.fileno() if stream is not None else None
    except (AttributeError, OSError, ValueError):
        # io.UnsupportedOperation (a StringIO) is an OSError and a ValueError.
        return None


def _flush_python(std: str) -> None:
    stream = getattr(sys, std, None)
    if stream is not None:
        try:
            stream.flush()
        except (OSError, ValueError):
            # A closed or broken stream: nothing we could write anyway.
            pass


@contextmanager
def redirect(std: str, to_file: str) -> Iterator[None]:
    """Redirect ``std`` ("stdout" or "stderr") to the file at ``to_file`` within the block.

    The file is created or truncated; its directory must exist. Output written before the
    block (Python and C buffers) is flushed to the old destination first, output written
    inside the block is flushed to the file before the old descriptor comes back.

    Raises:
        ValueError: ``std`` is not one of the two standard streams (torch's message).
    """
    if std not in _VALID_STD:
        raise ValueError(f"unknown standard stream <{std}>, must be one of {_VALID_STD}")
    fds = [_STD_FDS[std]]
    extra = _python_fd(std)
    if extra is not None and extra not in fds and extra not in _STD_FDS.values():
        fds.append(extra)

    # Open first: a bad path raises before anything has been switched.
    # O_APPEND: the rank and any children it starts share one file offset and never
    # overwrite each other, even if something truncates the file meanwhile.
    dst = os.open(to_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
    saved: list[int] = []
    try:
        # Flush before switching so nothing written earlier ends up in the file.
        _flush_c_streams()
        _flush_python(std)
        saved.extend(os.dup(fd) for fd in fds)
        for fd in fds:
            os.dup2(dst, fd)
        try:
            yield
        finally:
            # Flush what was written inside the block into the file, then switch back.
            _flush_c_streams()
            _flush_python(std)
            for fd, orig in zip(fds, saved, strict=True):
                os.dup2(orig, fd)
    finally:
        os.close(dst)
        for orig in saved:
            os.close(orig)


redirect_stdout: Callable[[str], ContextManager[None]] = functools.partial(redirect, "stdout")
"""``redirect("stdout", to_file)``."""

redirect_stderr: Callable[[str], ContextManager[None]] = functools.partial(redirect, "stderr")
"""``redirect("stderr", to_file)``."""
