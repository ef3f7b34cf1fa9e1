"""Stopping ranks, as the kernel decides: signal now, SIGKILL the survivors at the deadline,
never block.

The run kernel (``engine.kernel.run``, which ``RunState`` is) decides who stops, where each
moves, when each escalation's SIGKILL is due and when to give up on a rank the kernel of
the OS does not reap; the Stopper carries its effects out over real processes: it sends
each stop signal to the rank's process group and descendants, notes when it went, says so
(``RanksSignalled``), continues stopped ranks, and starts a stack capture before a SIGKILL.
The monitor's loop wakes at the nearest deadline, starts the captures due and hands the
kernel a ``Tick`` (its SIGKILLs come back here as ``KillSurvivors``). Commands, the monitor
and ``shutdown`` all stop ranks through here, holding the state lock; events are queued on
the publisher and delivered after the lock is released.
"""

from __future__ import annotations

import logging
import signal
from collections.abc import Callable, Iterable
from typing import Literal

from .. import clock
from ..events import EscalationFinished, EscalationScheduled, RanksSignalled
from ..forensics.suspect import SignalRecord
from ..kernel.run import (
    Deliver,
    Effect,
    EscalationDone,
    KillSurvivors,
    Moved,
    Say,
    Scheduled,
    signame,
)
from ..process.proc_table import is_stopped
from ..process.rank_process import send_signal_all
from .publisher import Publisher
from .rank_slot import RankSlot, StopReason
from .stack_capture import CaptureSchedule
from .state import RunState

__all__ = ["Stopper"]

log = logging.getLogger(__name__)

BeforeKill = Callable[[dict[int, int], float, str], None]
"""Called (lock held) shortly before an escalation's SIGKILL with the ranks still alive
(rank -> pid), the deadline and why they were stopped; must only start work elsewhere."""


class Stopper:
    """Carries out the kernel's stops and escalations (SIGTERM -> SIGKILL deadlines).

    Args:
        state: The run and its kernel (its lock is held by every caller).
        events: Where stop and escalation events are queued.
        before_kill: Started at each escalation's capture time (see
            ``engine.supervisor.stack_capture``) with its ranks still alive; None: nothing.
        captures: When each escalation's ``before_kill`` is due (None: never).
    """

    def __init__(
        self,
        state: RunState,
        events: Publisher,
        before_kill: BeforeKill | None = None,
        captures: CaptureSchedule | None = None,
    ) -> None:
        self._state = state
        self._events = events
        self._before_kill = before_kill
        self._captures = captures if before_kill is not None else None

    def next_deadline(self) -> float | None:
        """When the monitor must wake next for an escalation (``clock.monotonic()``): a
        SIGKILL, the end of the wait after one, or the start of a capture before one."""
        deadline = self._state.next_deadline()
        capture = self._captures.next_time() if self._captures is not None else None
        if capture is not None and (deadline is None or capture < deadline):
            return capture
        return deadline

    def stop_ranks(
        self, slots: list[RankSlot], reason: StopReason, sig: int, timeout: float
    ) -> None:
        """Send ``sig`` to each rank's group now, SIGKILL whoever is alive at the deadline.

        ``reason`` says why: "terminate", "restart", "attempt", "teardown" or "shutdown".
        ``sig`` must be a valid signal number (commands are checked before they get here).
        The caller holds the lock.
        """
        self.apply(self._state.stop([s.rank for s in slots], reason, sig, timeout))

    def kill_now(self, slots: list[RankSlot], reason: StopReason) -> None:
        """SIGKILL each rank's group at once (no escalation: there is nothing after it)."""
        self.apply(self._state.kill([s.rank for s in slots], reason))

    def apply(self, effects: Iterable[Effect]) -> list[Effect]:
        """Carry out the kernel's effects in order (lock held); those that are not a
        stop's (a respawn, a new attempt, the end) come back, for the monitor."""
        rest: list[Effect] = []
        for effect in effects:
            if isinstance(effect, Moved):
                self._events.emit(self._state.slots[effect.rank].changed(effect.old, effect.new))
            elif isinstance(effect, Deliver):
                self._deliver(effect)
            elif isinstance(effect, KillSurvivors):
                self._kill_survivors(effect)
            elif isinstance(effect, EscalationDone):
                esc = effect.escalation
                self._events.emit(EscalationFinished(esc.ranks, tuple(esc.killed)))
            elif isinstance(effect, Say):
                self._events.notice(effect.text, effect.severity)
            else:
                rest.append(effect)
        return rest

    def _deliver(self, deliver: Deliver) -> None:
        slots = [self._state.slots[r] for r in deliver.ranks]
        signalled = self.signal_slots(slots, deliver.sig)
        if not signalled:
            return  # every one of them had already exited: the monitor will record it
        self.record(signalled, deliver.sig, deliver.reason)
        if deliver.sig not in (signal.SIGKILL, signal.SIGCONT):
            self._continue_stopped([self._state.slots[r] for r in signalled], deliver.sig)
        now = clock.monotonic()
        for effect in self._state.delivered(deliver, signalled, now):
            assert isinstance(effect, Scheduled)
            esc = effect.escalation
            self._events.emit(EscalationScheduled(esc.ranks, signame(esc.sig), esc.timeout_s,
                                                  esc.deadline))
            if self._captures is not None and esc.sig != signal.SIGKILL:
                self._captures.add(esc, now, effect.reason)

    def _kill_survivors(self, effect: KillSurvivors) -> None:
        """Deadline passed and these ranks still live: SIGKILL them and their groups. A
        problem with one escalation (logged) must not keep the next from its SIGKILL."""
        try:
            slots = [self._state.slots[r] for r in effect.ranks]
            killed = self.signal_slots(
                [s for s in slots if s.alive and s.proc is not None], signal.SIGKILL
            )
            if killed:
                self.record(killed, signal.SIGKILL, "escalation")
        except Exception:  # noqa: BLE001 - the next escalation's SIGKILL must still go
            log.exception("escalation of rank(s) %s failed",
                          self._state.ranks_text(effect.ranks))

    def signal_slots(self, slots: list[RankSlot], sig: int) -> list[int]:
        """Send a stop signal to every slot's process group and descendants; the ranks
        that got it (each records when, so that only exits after it count as ours).

        One /proc scan serves all of them (``send_signal_all``): with 32 ranks, a scan per
        rank was most of the time from "terminate all" to the last exit.
        """
        by_proc = {id(s.proc): s for s in slots if s.proc is not None}
        procs = [s.proc for s in slots if s.proc is not None]
        got = [by_proc[id(p)] for p in send_signal_all(procs, sig)]
        for slot in got:
            slot.note_signal(sig, stop=True)
        return sorted(s.rank for s in got)

    def _continue_stopped(self, slots: list[RankSlot], sig: int) -> None:
        """SIGCONT the ranks that are stopped (SIGSTOP, Ctrl-Z, a debugger), and say so.

        A stopped process does not act on SIGTERM until it is continued, so without this a
        stopped rank always costs the whole term timeout and then dies of SIGKILL, with no
        chance to run its handler. The stop signal is already pending: SIGCONT lets it act.
        """
        stopped = [s for s in slots if s.proc is not None and is_stopped(s.proc.pid)]
        for slot in stopped:
            assert slot.proc is not None
            slot.proc.send_signal(signal.SIGCONT, group=True)
        if stopped:
            self._events.notice(
                f"rank(s) {self._state.ranks_text(s.rank for s in stopped)} were stopped: "
                f"sent SIGCONT so that they can act on {signame(sig)}",
                "information",
            )

    def record(self, ranks: list[int], sig: int, reason: str) -> None:
        """Note who sent ``sig`` to ``ranks`` and why, and say so (``RanksSignalled``).

        rankvisor's own signals (the teardown after a failure, the escalation's SIGKILL) are
        told apart from a person's commands: only the latter can be evidence against a rank.
        """
        by: Literal["person", "rankvisor"] = (
            "rankvisor" if reason in ("teardown", "escalation") else "person"
        )
        now = clock.wall_ns()
        ranks_t = tuple(ranks)
        name = signame(sig)
        self._state.signal_log.append(SignalRecord(ranks_t, name, by, reason, now))
        self._events.emit(RanksSignalled(ranks_t, name, by, reason, now / 1e9))

    def start_captures(self, now: float) -> None:
        """The stack captures due before an escalation's SIGKILL, each on a thread of its
        own (``before_kill``): started before the kernel's deadlines, never delaying them."""
        if self._captures is None or self._before_kill is None:
            return
        for targets, deadline, why in self._captures.due(now, self._live_pid):
            try:
                self._before_kill(targets, deadline, why)
            except Exception:  # noqa: BLE001 - a capture must never cost a SIGKILL
                log.exception("stack capture of rank(s) %s failed to start",
                              self._state.ranks_text(targets))

    def _live_pid(self, rank: int) -> int | None:
        slot = self._state.slots[rank]
        return slot.pid if slot.alive else None
