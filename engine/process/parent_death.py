"""Die with the parent: PR_SET_PDEATHSIG for the calling process itself.

A process that must never outlive the one that started it (a function rank, a browser
session's app under ``rankvisor serve``) asks the kernel, as its first act, to SIGKILL it
when its parent thread dies. The parent may already have died between the fork and that
request, and then no signal would ever come: the caller passes the pid its parent had, and a
different ``getppid()`` (we were reparented) means exit at once.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Final

__all__ = ["PDEATHSIG", "die_with_parent"]

_PR_SET_PDEATHSIG: Final = 1
"""From <linux/prctl.h>."""

PDEATHSIG: Final = signal.SIGKILL
"""What the kernel sends: SIGKILL rather than torch's SIGINT for its ranks, so no handler the
process installs (torch's SIGINT becomes a swallowed KeyboardInterrupt) can keep it alive."""


def die_with_parent(parent_pid: int | None) -> bool:
    """Have the kernel SIGKILL this process when its parent thread dies.

    Args:
        parent_pid: the pid of the parent that started us; if ``getppid()`` is already
            another (the parent died before the request took effect), exit now with
            ``128 + SIGKILL``. None skips that check.

    Returns:
        True if the death signal is set, False where it cannot be (not Linux, no libc).
    """
    if not sys.platform.startswith("linux"):
        return False
    from ..redirects import get_libc

    libc = get_libc()
    if libc is None or libc.prctl(_PR_SET_PDEATHSIG, int(PDEATHSIG), 0, 0, 0) != 0:
        return False
    if parent_pid is not None and os.getppid() != parent_pid:
        os._exit(128 + int(PDEATHSIG))
    return True
