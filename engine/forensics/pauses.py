"""Ranks a person paused: at a prompt on their stdin, stopped by a SIGSTOP sent through
rankvisor, or waiting for a person's debugger to attach, until the answer, the SIGCONT or the
debugger: ``PauseLog``.

A paused rank is silent because a person is reading its state, not because it hangs: its
silence must never make it a straggler or a silence suspect, and its peers that wait for it
in a collective are waiting for a person, not silent. ``PauseLog`` folds the events that say
so (``RankInputWait``, ``RankDebuggerWait``, a person's ``RanksSignalled``,
``RankRestarted`` and ``AttemptStarted``) into the pauses of the current attempt, from
whichever thread publishes them; the monitor asks which were in force at the first failure
(``at``), the suspect names them. Thread-safe; a few entries per rank at most.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, replace
from typing import Final

from .. import clock
from ..events import (
    AttemptStarted,
    Event,
    RankDebuggerWait,
    RankInputWait,
    RankRestarted,
    RanksSignalled,
)

__all__ = ["Pause", "PauseLog", "paused_words"]

_STOPS: Final = frozenset({"SIGSTOP", "SIGTSTP"})
_KEEP: Final = 8
"""Ended pauses kept per rank (the suspect looks only at those near the first failure)."""


@dataclass(frozen=True, slots=True)
class Pause:
    """One rank paused by a person from ``since_ns`` until ``until_ns`` (None: still)."""

    rank: int
    since_ns: int
    how: str
    """"prompt" (it waits for a line on its stdin), "debugger" (for a debugger to attach) or
    the signal's name ("SIGSTOP")."""
    prompt: str = ""
    where: str = ""
    """For pdb: where it stopped ("job.py:7 in <module>")."""
    until_ns: int | None = None


def paused_words(pause: Pause) -> str:
    """``"at a prompt"``, ``"waiting for a debugger"`` or ``"stopped by SIGSTOP"``: how a
    peer's wait for it is worded ("waiting for rank 0 (at a prompt)")."""
    if pause.how == "prompt":
        return "at a prompt"
    if pause.how == "debugger":
        return "waiting for a debugger"
    return f"stopped by {pause.how}"


class PauseLog:
    """The person's pauses of the current attempt (see the module docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._attempt = 0
        self._open: dict[tuple[int, str], Pause] = {}
        self._ended: list[Pause] = []

    def observe(self, event: Event, t_ns: int | None = None) -> None:
        """Fold one published event in (a sink of the Supervisor's own events)."""
        now = clock.wall_ns() if t_ns is None else t_ns
        with self._lock:
            if isinstance(event, AttemptStarted):
                self._attempt = event.attempt
                self._open.clear()
                self._ended.clear()
            elif isinstance(event, RankInputWait):
                if event.attempt < self._attempt:
                    return
                if event.wait is None:
                    self._end(event.rank, "prompt", now)
                else:
                    self._end(event.rank, "prompt", now)
                    self._open[(event.rank, "prompt")] = Pause(
                        event.rank, int(event.wait.since * 1e9), "prompt",
                        event.wait.prompt, event.wait.where,
                    )
            elif isinstance(event, RankDebuggerWait):
                if event.attempt < self._attempt:
                    return
                self._end(event.rank, "debugger", now)
                if event.since is not None:
                    self._open[(event.rank, "debugger")] = Pause(
                        event.rank, int(event.since * 1e9), "debugger")
            elif isinstance(event, RanksSignalled) and event.by == "person":
                t = int(event.t * 1e9)
                for rank in event.ranks:
                    if event.signal_name in _STOPS:
                        if (rank, "stop") not in self._open:
                            self._open[(rank, "stop")] = Pause(rank, t, event.signal_name)
                    elif event.signal_name == "SIGCONT" or event.reason != "signal":
                        self._end(rank, "stop", t)  # continued, or stopped for good
            elif isinstance(event, RankRestarted):
                # A new process: whatever paused the old one is over.
                for key in ("prompt", "stop", "debugger"):
                    self._end(event.rank, key, now)

    def _end(self, rank: int, key: str, t_ns: int) -> None:
        pause = self._open.pop((rank, key), None)
        if pause is not None:
            self._ended.append(replace(pause, until_ns=t_ns))
            del self._ended[: -_KEEP * 4]

    def paused(self) -> dict[int, Pause]:
        """The ranks paused now, each with its earliest pause in force."""
        with self._lock:
            found: dict[int, Pause] = {}
            for pause in sorted(self._open.values(), key=lambda p: p.since_ns):
                found.setdefault(pause.rank, pause)
            return found

    def released(self) -> dict[int, int]:
        """When each rank's latest pause of this attempt ended (ranks never paused, or
        paused still and never before, are left out): its peers waited for it till then."""
        with self._lock:
            out: dict[int, int] = {}
            for pause in self._ended:
                if pause.until_ns is not None:
                    out[pause.rank] = max(out.get(pause.rank, 0), pause.until_ns)
            return out

    def at(self, t_ns: int, grace_ns: int = 0) -> list[Pause]:
        """The pauses that began before ``t_ns`` and had not ended ``grace_ns`` before it,
        earliest first (what a person was doing when the first failure came)."""
        with self._lock:
            every = [*self._ended, *self._open.values()]
        return sorted(
            (p for p in every
             if p.since_ns < t_ns and (p.until_ns is None or p.until_ns >= t_ns - grace_ns)),
            key=lambda p: (p.since_ns, p.rank),
        )
