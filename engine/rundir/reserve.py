"""Space held back on the log file system so that a full disk never loses a run's end.

The ranks write their logs on the file system of the run's directory, as fast as they print;
once it is full, the supervisor's own small writes there (status.json, events.ndjson) fail
too, and a run whose last status says "running" reads as stale to ``wait`` (exit 4, not the
run's code). So at the start the supervisor allocates a file of its own there (blocks given
now, ``posix_fallocate``, not a sparse file) and keeps it while the run lasts; once every rank
has ended nothing else of the run competes for the space, and releasing the file gives back
room for the final status and the events held in memory meanwhile.

Best effort by design: a file system without room for the reserve at the start, or one that
cannot allocate (some network file systems), runs without one, and the ``held`` property says
so.
"""

from __future__ import annotations

import os

__all__ = ["RESERVE_FILE", "SpaceReserve", "reserve_bytes"]

RESERVE_FILE = ".rankvisor-reserve"
"""Its name in the run's directory (a dot file: ``ls`` does not show it)."""

BASE_BYTES = 256 * 1024
PER_RANK_BYTES = 2 * 1024
MAX_BYTES = 8 * 1024 * 1024


def reserve_bytes(ranks: int) -> int:
    """How much to hold for a run of ``ranks`` ranks: its final status (about 400 bytes a
    rank), the run as it ended in events.ndjson (as much again) and the events of the end."""
    return min(MAX_BYTES, BASE_BYTES + PER_RANK_BYTES * max(0, ranks))


class SpaceReserve:
    """The held space of one run directory: ``hold`` at the start, ``release`` at the end."""

    def __init__(self, directory: str) -> None:
        self._path = os.path.join(directory, RESERVE_FILE)
        self._held = False

    @property
    def held(self) -> bool:
        return self._held

    def hold(self, size: int) -> bool:
        """Allocate ``size`` bytes; True when they are held (False: no room, or no way)."""
        try:
            fd = os.open(self._path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW
                         | os.O_CLOEXEC, 0o600)
        except OSError:
            return False
        try:
            os.posix_fallocate(fd, 0, size)
        except OSError:
            os.close(fd)
            self._unlink()
            return False
        os.close(fd)
        self._held = True
        return True

    def release(self) -> bool:
        """Give the space back; True when there was some to give."""
        if not self._held:
            return False
        self._held = False
        self._unlink()
        return True

    def _unlink(self) -> None:
        try:
            os.unlink(self._path)
        except OSError:
            pass
