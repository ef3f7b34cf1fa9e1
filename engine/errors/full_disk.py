"""Is a failed rank's log directory on a full file system? Then its report must say so.

A rank writes its own stdout/stderr files (they are its file descriptors 1 and 2): when
their file system fills up, its ``print`` fails with ENOSPC, its traceback cannot be written
either (same file system), nor can its error.json, and all that is left is "exit code 1".
The engine never sees the failing write (it is the rank's), so it looks when a rank fails:
one ``statvfs`` of the rank's log directory per failure, nothing on any hot path. It looks
at the moment of failure, before anything is cleaned up, which is when it tells the truth.
"""

from __future__ import annotations

import os

__all__ = ["full_disk_note"]


def full_disk_note(directory: str) -> str | None:
    """A sentence saying ``directory``'s file system is full (no space or no inodes left
    for an unprivileged writer), or None if it is not, or cannot be looked at."""
    if not directory:
        return None
    try:
        st = os.statvfs(directory)
    except OSError:
        return None
    if st.f_blocks and st.f_bavail == 0:
        what = "no space"
    elif st.f_files and st.f_favail == 0:
        what = "no free inodes"
    else:
        return None
    return (
        f"The file system of the rank's log directory {directory} is full ({what} left on "
        "device): the rank could not write its output there, which may be why it failed"
    )
