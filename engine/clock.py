"""The one clock of rankvisor: every "now" that engine/ and tui/ read comes from here.

Why one door: a rule that depends on time (an escalation's deadline, how long a rank has been
quiet, whether status.json is stale) can then be tried at given moments with a ``FakeClock``
instead of with real seconds on a loaded machine, and ruff's TID251 ban on the time module's
clock functions everywhere else in the packages keeps this the only door.

Three kinds of now, never mixed: ``monotonic`` for durations and deadlines (it never jumps,
and it is the clock ``poll`` and ``select`` time-outs count on); ``wall`` for what a person or
another host reads (timestamps in files, events and the record); ``thread_cpu`` for what the
calling thread itself has spent (the UI's measure of its own load).

The exceptions are the modules that run outside the package, where nothing of ours can be
imported: the bootstrap around a Python rank (``process/py_bootstrap.py``) and the demo's
training job (``tui/cli/demo_job.py``), each a rank's own script, and the cgroup code the
guard program loads from beside itself (``process/cgroups.py``).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Protocol

__all__ = [
    "Clock",
    "FakeClock",
    "local_stamp",
    "SystemClock",
    "monotonic",
    "monotonic_ns",
    "since_boot",
    "thread_cpu",
    "using",
    "wall",
    "wall_ns",
]


class Clock(Protocol):
    """What a clock answers; seconds as floats, nanoseconds as ints."""

    def monotonic(self) -> float: ...

    def monotonic_ns(self) -> int: ...

    def wall(self) -> float: ...

    def wall_ns(self) -> int: ...

    def thread_cpu(self) -> float: ...

    def since_boot(self) -> float: ...


def _boottime() -> float:
    return time.clock_gettime(time.CLOCK_BOOTTIME)


class SystemClock:
    """The machine's clocks (the process's clock unless a test put a fake in its place)."""

    monotonic = staticmethod(time.monotonic)
    monotonic_ns = staticmethod(time.monotonic_ns)
    wall = staticmethod(time.time)
    wall_ns = staticmethod(time.time_ns)
    thread_cpu = staticmethod(time.thread_time)
    since_boot = staticmethod(_boottime)


class FakeClock:
    """A clock that moves only when told to: ``advance(seconds)``.

    The monotonic and wall readings move together, kept in integer nanoseconds so that a
    test's arithmetic is exact; CPU time moves only by ``spend``. Safe to read from several
    threads (a test may drive parts that read it from their own).

    Args:
        monotonic: The first monotonic reading, in seconds.
        wall: The first wall reading, in seconds since the epoch.
    """

    def __init__(self, monotonic: float = 1000.0, wall: float = 1_700_000_000.0) -> None:
        self._lock = threading.Lock()
        self._mono_ns = round(monotonic * 1e9)
        self._wall_ns = round(wall * 1e9)
        self._cpu_ns = 0

    def advance(self, seconds: float) -> None:
        """Move both clocks forward by ``seconds`` (never back: a clock that goes back is
        a bug a test must not be able to write)."""
        if seconds < 0:
            raise ValueError(f"a clock does not go back ({seconds} s)")
        step = round(seconds * 1e9)
        with self._lock:
            self._mono_ns += step
            self._wall_ns += step

    def spend(self, seconds: float) -> None:
        """Count ``seconds`` of CPU time for ``thread_cpu`` (and as much wall time)."""
        self.advance(seconds)
        with self._lock:
            self._cpu_ns += round(seconds * 1e9)

    def monotonic(self) -> float:
        return self._mono_ns / 1e9

    def monotonic_ns(self) -> int:
        return self._mono_ns

    def wall(self) -> float:
        return self._wall_ns / 1e9

    def wall_ns(self) -> int:
        return self._wall_ns

    def thread_cpu(self) -> float:
        return self._cpu_ns / 1e9

    def since_boot(self) -> float:
        return self._mono_ns / 1e9  # a machine a test never suspends


_clock: Clock = SystemClock()


def monotonic() -> float:
    """Seconds on the monotonic clock: for durations and deadlines."""
    return _clock.monotonic()


def monotonic_ns() -> int:
    """The monotonic clock in nanoseconds."""
    return _clock.monotonic_ns()


def wall() -> float:
    """Seconds since the epoch: for timestamps a person or another host reads."""
    return _clock.wall()


def wall_ns() -> int:
    """The wall clock in nanoseconds (events and records that order within a second)."""
    return _clock.wall_ns()


def thread_cpu() -> float:
    """CPU seconds the calling thread has used."""
    return _clock.thread_cpu()


def since_boot() -> float:
    """Seconds since the machine booted, suspends included: the clock of /proc's process
    start times (which is why a start time read against it is exact, where the kernel's
    whole-second boot time is up to a second off and moves as the wall clock is slewed)."""
    return _clock.since_boot()


def local_stamp(fmt: str, at: float | None = None) -> str:
    """``at`` (the wall clock's now when None) formatted in local time, as ``strftime``."""
    return time.strftime(fmt, time.localtime(wall() if at is None else at))


@contextlib.contextmanager
def using(clock: Clock) -> Iterator[Clock]:
    """Read ``clock`` instead of the machine's within the block (tests of timed rules)."""
    global _clock
    previous, _clock = _clock, clock
    try:
        yield clock
    finally:
        _clock = previous
