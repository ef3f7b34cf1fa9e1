"""torch's uninterruptible-sleep rule: a rank stuck in D-state marks its group unhealthy.

A rank wedged in the kernel (a dead NFS mount, a GPU or NIC driver that does not return)
sits in Linux's uninterruptible sleep, where no signal but SIGKILL reaches it and nothing it
holds is given back. torch 2.13's ``LocalElasticAgent`` reads
``TORCHELASTIC_UNINTERRUPTIBLE_STATE_TIMEOUT`` (seconds; unset, unparsable or not positive:
off): a worker seen continuously in state ``D`` that long makes the group UNHEALTHY and
restarts are disabled (a fresh worker would fight the wedged one for the same device), so
the group is stopped. This module reads the same variable the same way and watches the
ranks' ``/proc/<pid>/stat`` from a thread of its own; what to do when it fires is the
Supervisor's (``on_stuck``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping

from .. import clock as engine_clock

__all__ = ["TIMEOUT_ENV", "UninterruptibleWatch", "proc_state", "timeout_from_env"]

TIMEOUT_ENV = "TORCHELASTIC_UNINTERRUPTIBLE_STATE_TIMEOUT"

Stuck = tuple[int, int, float]
"""(rank, pid, seconds in D-state so far)."""


def timeout_from_env(env: Mapping[str, str]) -> float:
    """The timeout in seconds as torch resolves it; 0.0 means the rule is off."""
    raw = env.get(TIMEOUT_ENV, "")
    try:
        value = float(raw) if raw else 0.0
    except ValueError:
        return 0.0
    return value if value > 0 else 0.0


def proc_state(pid: int) -> str | None:
    """The one-letter state of ``pid`` from ``/proc/<pid>/stat`` (None when unreadable)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            text = f.read().decode(errors="replace")
    except OSError:
        return None
    # The command name is in parentheses and may hold anything: the state follows the last.
    rest = text[text.rfind(")") + 1:].split()
    return rest[0] if rest else None


class UninterruptibleWatch:
    """Each live rank's time in D-state, and a call once one is past the timeout.

    Args:
        timeout: Seconds (> 0).
        pids: The live ranks now, rank -> pid (called from the watch's thread).
        on_stuck: Called once with every rank past the timeout; the watch then stops
            (the group is being stopped, without restarts).
        read_state: A pid's state letter (``proc_state``; a table in tests).
        clock: Monotonic seconds.
    """

    def __init__(self, timeout: float, pids: Callable[[], dict[int, int]],
                 on_stuck: Callable[[list[Stuck]], None], *,
                 read_state: Callable[[int], str | None] = proc_state,
                 clock: Callable[[], float] = engine_clock.monotonic) -> None:
        self.timeout = timeout
        self._pids = pids
        self._on_stuck = on_stuck
        self._read_state = read_state
        self._clock = clock
        self._first_seen: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.interval = min(1.0, max(0.1, timeout / 10))
        """How often the ranks are looked at (torch: every monitor interval, 0.1 s)."""

    @classmethod
    def from_env(cls, env: Mapping[str, str], pids: Callable[[], dict[int, int]],
                 on_stuck: Callable[[list[Stuck]], None]) -> UninterruptibleWatch | None:
        """A watch when ``TORCHELASTIC_UNINTERRUPTIBLE_STATE_TIMEOUT`` turns the rule on."""
        timeout = timeout_from_env(env)
        return cls(timeout, pids, on_stuck) if timeout > 0 else None

    def check(self) -> list[Stuck]:
        """One look: the ranks continuously in D-state for at least the timeout."""
        now = self._clock()
        live = self._pids()
        pids = set(live.values())
        for pid in list(self._first_seen):
            if pid not in pids:
                del self._first_seen[pid]
        stuck: list[Stuck] = []
        for rank, pid in sorted(live.items()):
            state = self._read_state(pid)
            if state is None or not state.startswith("D"):
                self._first_seen.pop(pid, None)
                continue
            elapsed = now - self._first_seen.setdefault(pid, now)
            if elapsed >= self.timeout:
                stuck.append((rank, pid, elapsed))
        return stuck

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="rankvisor-dstate", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=2.0)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            stuck = self.check()
            if stuck:
                self._on_stuck(stuck)
                return
