"""Opening a file a run left on disk as hostile input: a regular file, never a link, capped.

A run's directory (status.json, events.ndjson, error.json, a registry entry) can hold
anything its owner or a rank put there: a FIFO whose open blocks until a writer comes, a
link to /dev/zero that never ends, a file of gigabytes. ``open_regular`` opens with
O_NOFOLLOW | O_NONBLOCK (a FIFO's open returns at once) and refuses, on the opened descriptor
(no window for a swap), anything but a regular file; ``read_regular`` reads at most a cap.
"""

from __future__ import annotations

import errno
import os
import stat
from typing import BinaryIO

__all__ = ["NotRegular", "TooBig", "open_regular", "read_regular"]


class NotRegular(OSError):
    """The path is there but is a link or not a regular file (the message says which)."""


class TooBig(ValueError):
    """The file holds more than the cap allows a reader to take."""


def _kind_name(mode: int) -> str:
    for test, name in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return name
    return "not a file"


def open_regular(path: str) -> BinaryIO:
    """``path`` opened for reading (binary) if it is a regular file, never following a link.

    Raises:
        NotRegular: a symbolic link, a FIFO, a device, a directory...
        OSError: it cannot be opened (missing, no permission).
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise NotRegular("is a symbolic link (not followed)") from None
        raise
    try:
        kind = os.fstat(fd).st_mode
        if not stat.S_ISREG(kind):
            raise NotRegular(f"is not a regular file ({_kind_name(kind)})")
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, "rb")


def read_regular(path: str, cap: int) -> bytes:
    """The whole of ``path`` (a regular file, see ``open_regular``), at most ``cap`` bytes.

    Raises:
        TooBig: it holds more than ``cap`` bytes (nothing past the cap is read).
        NotRegular, OSError: as ``open_regular``.
    """
    with open_regular(path) as f:
        data = f.read(cap + 1)
    if len(data) > cap:
        raise TooBig(f"is larger than {cap} bytes")
    return data
