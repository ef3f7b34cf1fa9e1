"""SIGTERM -> SIGKILL escalation, as data: who was asked to stop, and by when.

torch's ``PContext.close`` escalates inline: send the death signal, *block* until a shared
deadline, SIGKILL the survivors, block again. A supervisor driven from a UI cannot block
its caller for 30 s, so here an escalation is a record kept in a table; whoever carries the
run out (the Supervisor's monitor thread, which already wakes on every rank exit) also
wakes at the nearest deadline, and, with the time passed in:

1. ``rank_gone`` removes a rank from every escalation waiting on it; an escalation with no
   rank left is finished ("they exited in time");
2. ``due`` hands back the escalations whose deadline passed, with the ranks still alive,
   which the caller SIGKILLs; each then waits ``kill_wait_s`` more for the kernel to reap
   them (a rank stuck in uninterruptible sleep, D state, ignores even SIGKILL until its I/O
   returns);
3. after that bounded wait, ``overdue`` gives up on the stragglers so the escalation is
   reported finished, instead of waiting for ever as torch would block.

Not thread-safe on its own: the Supervisor holds its lock around every call.
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass, field

__all__ = ["Escalation", "EscalationTable"]


@dataclass(slots=True)
class Escalation:
    """One request to stop ``ranks`` with ``sig``, SIGKILL at ``deadline``."""

    id: int
    ranks: tuple[int, ...]
    sig: int
    timeout_s: float
    deadline: float
    """``clock.monotonic()`` at which survivors get SIGKILL."""
    alive: set[int] = field(default_factory=set)
    """Ranks not yet seen exiting."""
    killed: list[int] = field(default_factory=list)
    """Ranks that outlived the deadline and were SIGKILLed."""
    kill_deadline: float | None = None
    """Once SIGKILL was sent: when to stop waiting for the reap."""
    stuck: list[int] = field(default_factory=list)
    """Ranks still not reaped at ``kill_deadline`` (reported, then given up on)."""

    @property
    def done(self) -> bool:
        return not self.alive


class EscalationTable:
    """Every escalation in flight, ordered by its next deadline.

    Args:
        kill_wait_s: How long to wait for a reap after SIGKILL before giving up.
    """

    def __init__(self, kill_wait_s: float = 5.0) -> None:
        self._kill_wait_s = kill_wait_s
        self._ids = itertools.count(1)
        self._live: dict[int, Escalation] = {}
        self._heap: list[tuple[float, int]] = []

    def __len__(self) -> int:
        return len(self._live)

    def add(self, ranks: tuple[int, ...], sig: int, timeout_s: float, now: float) -> Escalation:
        """Record that ``sig`` was just sent to ``ranks``; SIGKILL after ``timeout_s``."""
        esc = Escalation(
            id=next(self._ids),
            ranks=ranks,
            sig=sig,
            timeout_s=timeout_s,
            deadline=now + timeout_s,
            alive=set(ranks),
        )
        self._live[esc.id] = esc
        heapq.heappush(self._heap, (esc.deadline, esc.id))
        return esc

    def rank_gone(self, rank: int) -> list[Escalation]:
        """``rank`` exited: drop it everywhere; return the escalations this finished."""
        finished = []
        for esc in list(self._live.values()):
            if rank in esc.alive:
                esc.alive.discard(rank)
                if esc.done:
                    finished.append(self._live.pop(esc.id))
        return finished

    def next_deadline(self) -> float | None:
        """The earliest moment something is due (SIGKILL or give-up), None if nothing is."""
        while self._heap and not self._current(*self._heap[0]):
            heapq.heappop(self._heap)  # finished early, or its SIGKILL went: a stale entry
        return self._heap[0][0] if self._heap else None

    def _current(self, when: float, esc_id: int) -> bool:
        """Whether a heap entry is its escalation's next deadline: a SIGKILL not yet sent,
        or the end of the wait after one (the SIGKILL's own entry, once it was sent, must
        not be woken for again: a wake-up at a time long past is a busy loop)."""
        esc = self._live.get(esc_id)
        if esc is None:
            return False
        return when == (esc.deadline if esc.kill_deadline is None else esc.kill_deadline)

    def due(self, now: float) -> list[tuple[Escalation, list[int]]]:
        """Escalations whose SIGKILL deadline passed, with the ranks to SIGKILL now.

        Each returned escalation moves to its bounded post-SIGKILL wait.
        """
        out = []
        for esc in list(self._live.values()):
            if esc.kill_deadline is None and esc.deadline <= now:
                survivors = sorted(esc.alive)
                esc.killed.extend(survivors)
                esc.kill_deadline = now + self._kill_wait_s
                heapq.heappush(self._heap, (esc.kill_deadline, esc.id))
                out.append((esc, survivors))
        return out

    def overdue(self, now: float) -> list[Escalation]:
        """Escalations whose post-SIGKILL wait ran out: given up on and removed.

        Their ``stuck`` lists the ranks the kernel still had not reaped.
        """
        out = []
        for esc in list(self._live.values()):
            if esc.kill_deadline is not None and esc.kill_deadline <= now:
                esc.stuck = sorted(esc.alive)
                out.append(self._live.pop(esc.id))
        return out

    def deadlines(self) -> dict[int, float]:
        """For each rank under escalation, its earliest pending SIGKILL deadline."""
        out: dict[int, float] = {}
        for esc in self._live.values():
            if esc.kill_deadline is None:
                for r in esc.alive:
                    out[r] = min(out.get(r, esc.deadline), esc.deadline)
        return out
