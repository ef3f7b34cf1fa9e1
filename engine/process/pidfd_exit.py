"""The exit status of a process that is not our child, read through a pidfd we hold.

Only a parent can ``waitpid`` a process; anyone else sees its wait status in /proc only while
it is a zombie, and loses it the moment its parent reaps it. torchrun's agent reaps its
workers within its 0.1 s poll, so a viewer that attached to them, delayed by load, can miss
that window. Since Linux 6.15 the kernel keeps the exit status with the pidfd
(``ioctl(PIDFD_GET_INFO)`` with ``PIDFD_INFO_EXIT``), set when the process is reaped and
readable by whoever holds a pidfd opened before it: the zombie's /proc read covers the time
before the reaping, this covers the time after. Older kernels answer ENOTTY or EINVAL and
the caller stays where it was (status unknown).
"""

from __future__ import annotations

import fcntl
import os
import struct
from typing import Final

__all__ = ["reaped_exit_status"]

_INFO_SIZE: Final = 64
"""``struct pidfd_info`` up to its ``exit_code`` field (the kernel's first version)."""
_PIDFD_GET_INFO: Final = (3 << 30) | (_INFO_SIZE << 16) | (0xFF << 8) | 11
"""``_IOWR(PIDFS_IOCTL_MAGIC, 11, struct pidfd_info)``: the size is part of the request."""
_PIDFD_INFO_EXIT: Final = 1 << 3
_EXIT_CODE_AT: Final = 60
"""Byte offset of ``exit_code`` (a wait status) in ``struct pidfd_info``."""


def reaped_exit_status(pidfd: int) -> int | None:
    """The exit code (negative: the signal that ended it, as in ``Popen``) of the reaped
    process behind ``pidfd``; None while it is not yet reaped, or where the kernel keeps no
    exit status for pidfds."""
    buf = bytearray(_INFO_SIZE)
    struct.pack_into("Q", buf, 0, _PIDFD_INFO_EXIT)
    try:
        fcntl.ioctl(pidfd, _PIDFD_GET_INFO, buf, True)
    except OSError:  # ENOTTY/EINVAL: a kernel before 6.15; ESRCH: not reaped, info asked
        return None
    if not struct.unpack_from("Q", buf, 0)[0] & _PIDFD_INFO_EXIT:
        return None
    status = struct.unpack_from("i", buf, _EXIT_CODE_AT)[0]
    if os.WIFSIGNALED(status):
        return -os.WTERMSIG(status)
    if os.WIFEXITED(status):
        return os.WEXITSTATUS(status)
    return None
