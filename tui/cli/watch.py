"""Waiting on a run's files: ``logs -f`` and ``wait`` sleep until a file changes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

__all__ = ["watch"]

_WAKE_S: Final = 1.0
"""How often a waiting command looks again without a change notification: the supervisor
can die without touching any file, and only this look notices that the run went stale."""


def watch(paths: Callable[[], list[str]], step: Callable[[], bool]) -> None:
    """Call ``step`` until it returns True; between calls, sleep until one of ``paths()``
    changes (inotify where there is one) or ``_WAKE_S`` passes."""
    from ...engine.output.wakeups import make_waker

    waker = make_waker("inotify", poll_interval=_WAKE_S, debounce=0.02)
    watched: set[str] = set()
    try:
        while True:
            for path in paths():
                if path not in watched:
                    waker.watch(path)
                    watched.add(path)
            if step():
                return
            waker.wait(_WAKE_S)
    finally:
        waker.close()
