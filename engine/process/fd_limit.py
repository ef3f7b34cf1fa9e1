"""File descriptors: the supervisor's soft limit raised, and a run that cannot fit refused.

A supervisor holds about six descriptors a rank for the rank's whole life (its pidfd, the
write end of its stdin pipe, its stdout.log, stderr.log and arrival.idx followed by the pump,
its ``/proc/<pid>/syscall`` for the stdin probe), measured as 17 + 6 a rank with ``ls
/proc/<pid>/fd`` for 1, 16 and 64 ranks; more come and go (a spawn's pipes, a worker
server asked, a viewer's socket). A soft limit of 1024 (a common default) then runs out
near 160 ranks, and what fails first is a socket or a log no one sees. So the supervisor
raises its soft limit to the hard one at its start (``raise_soft_limit``; the ranks inherit
it, as under a shell whose ``ulimit -n`` was raised), and a run whose ranks cannot fit under
the hard limit is refused before anything starts (``check_fits``).
"""

from __future__ import annotations

import resource
from typing import Final

__all__ = ["FDS_BASE", "FDS_PER_RANK", "check_fits", "fds_needed", "raise_soft_limit"]

FDS_PER_RANK: Final = 8
"""Six held for a rank's life, and two for what comes and goes (a worker server asked, a
sample of its /proc files)."""
FDS_BASE: Final = 64
"""The supervisor's own (17 measured: its sockets, logs, inotify, epoll) with room for
viewers, the cluster door and a restart's spawn."""
_NR_OPEN: Final = "/proc/sys/fs/nr_open"


def fds_needed(nprocs: int) -> int:
    """Descriptors a supervisor of ``nprocs`` ranks needs, at most."""
    return FDS_BASE + FDS_PER_RANK * nprocs


def _ceiling(hard: int) -> int:
    """The most the soft limit may be: the hard limit, or the kernel's when that is
    unlimited (``fs.nr_open``)."""
    if hard != resource.RLIM_INFINITY:
        return hard
    try:
        with open(_NR_OPEN) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return 1 << 20  # Linux's default nr_open


def raise_soft_limit() -> int:
    """Raise RLIMIT_NOFILE's soft limit to the hard one (never lowers it); the soft limit
    now. A refusal (a sandbox) leaves it as it was."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    top = _ceiling(hard)
    if soft == resource.RLIM_INFINITY or soft >= top:
        return soft
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (top, hard))
    except (OSError, ValueError):
        return soft
    return top


def check_fits(nprocs: int) -> None:
    """Raise ValueError, in one line, when ``nprocs`` ranks cannot fit under the hard limit
    of open files (what ``raise_soft_limit`` can reach)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    top = max(_ceiling(hard), soft if soft != resource.RLIM_INFINITY else _ceiling(hard))
    need = fds_needed(nprocs)
    if need > top:
        most = max(0, (top - FDS_BASE) // FDS_PER_RANK)
        raise ValueError(
            f"--nproc-per-node {nprocs}: the supervisor needs about {need} open files "
            f"({FDS_PER_RANK} a rank), and the hard limit allows {top} (ranks that fit: "
            f"{most}); raise it (ulimit -Hn, limits.conf) or run fewer ranks")
