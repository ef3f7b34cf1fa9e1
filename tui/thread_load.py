"""How much of the wall time the calling thread wanted a CPU: ran, or waited for one.

A thread's CPU time alone under-reads a starved UI thread: on two cores shared with 64
flooding ranks and the supervisor, the UI thread ran a third of the time and waited to run
most of the rest, and its CPU share (0.35) said "not busy" while keys waited 0.5 s. Linux
counts both in ``/proc/thread-self/schedstat`` (run time, run-queue wait, in ns); elsewhere
the thread's CPU time is all there is.
"""

from __future__ import annotations

import os

from ..engine import clock

__all__ = ["busy_seconds"]

_SCHEDSTAT = "/proc/thread-self/schedstat"


def busy_seconds() -> float:
    """Seconds the calling thread ran or waited to run so far (only differences mean
    anything); its CPU time where the kernel does not say."""
    try:
        fd = os.open(_SCHEDSTAT, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return clock.thread_cpu()
    try:
        fields = os.read(fd, 128).split()
        return (int(fields[0]) + int(fields[1])) / 1e9
    except (OSError, ValueError, IndexError):
        return clock.thread_cpu()
    finally:
        os.close(fd)
