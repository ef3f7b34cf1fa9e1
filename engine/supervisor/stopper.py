"""Stopping ranks: signal now, SIGKILL the survivors at the deadline, never block.

``stop_ranks`` sends the stop signal to each rank's process group and descendants at once
and records an escalation in the ``EscalationTable``; the monitor thread calls
``run_deadlines`` whenever it wakes (it also wakes at the nearest deadline), which SIGKILLs
whoever outlived its deadline and, after a bounded wait, gives up on ranks the kernel does
not reap. Commands, the monitor and ``shutdown`` all stop ranks through here, holding the
state lock; events are queued on the publisher and delivered after the lock is released.
"""

from __future__ import annotations

import logging
import signal
from collections.abc import Callable
from typing import Literal

from .. import clock
from ..events import EscalationFinished, EscalationScheduled, RanksSignalled
from ..forensics.suspect import SignalRecord
from ..kernel import policy
from ..kernel.escalation import EscalationTable
from ..names import refusals as words
from ..names.signals import signal_name
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
    """Sends stop signals and owns the escalation table (SIGTERM -> SIGKILL deadlines).

    Args:
        state: The run (its lock is held by every caller).
        events: Where stop and escalation events are queued.
        kill_wait_s: How long to wait for a reap after SIGKILL before giving up on a rank.
        before_kill: Started at each escalation's capture time (see
            ``engine.supervisor.stack_capture``) with its ranks still alive; None: nothing.
        captures: When each escalation's ``before_kill`` is due (None: never).
    """

    def __init__(
        self,
        state: RunState,
        events: Publisher,
        kill_wait_s: float,
        before_kill: BeforeKill | None = None,
        captures: CaptureSchedule | None = None,
    ) -> None:
        self._state = state
        self._events = events
        self._escalations = EscalationTable(kill_wait_s=kill_wait_s)
        self._before_kill = before_kill
        self._captures = captures if before_kill is not None else None

    def next_deadline(self) -> float | None:
        """When the monitor must wake next for an escalation (``clock.monotonic()``): a
        SIGKILL, the end of the wait after one, or the start of a capture before one."""
        deadline = self._escalations.next_deadline()
        capture = self._captures.next_time() if self._captures is not None else None
        if capture is not None and (deadline is None or capture < deadline):
            return capture
        return deadline

    def stop_ranks(
        self, slots: list[RankSlot], reason: StopReason, sig: int, timeout: float
    ) -> None:
        """Send ``sig`` to each rank's group now, SIGKILL whoever is alive at the deadline.

        ``reason`` says why: "terminate", "restart", "attempt", "teardown" or "shutdown".
        The exit counts as caused by us only if the signal reached the rank before it
        exited (``RankSlot.exit_caused_by_us``). ``sig`` must be a valid signal number
        (commands are checked before they get here). The caller holds the lock.
        """
        slots = [s for s in slots if s.alive and s.proc is not None]
        if not slots:
            return
        for slot in slots:
            slot.stop_reason = reason
            # RUNNING -> TERMINATING: asked to stop (a person, teardown or shutdown)
            # RUNNING -> RESTARTING: stopping in order to start again
            # TERMINATING -> RESTARTING: a restart was asked while it was stopping
            target = policy.stop_move(slot.state, reason)
            if target is not None:
                self._events.emit(slot.move(target))
        signalled = self.signal_slots(slots, sig)
        if not signalled:
            return  # every one of them had already exited: the monitor will record it
        self.record(signalled, sig, reason)
        if sig not in (signal.SIGKILL, signal.SIGCONT):
            self._continue_stopped([self._state.slots[r] for r in signalled], sig)
        ranks = tuple(signalled)
        now = clock.monotonic()
        esc = self._escalations.add(ranks, int(sig), timeout, now)
        self._events.emit(EscalationScheduled(ranks, signal_name(sig), timeout, esc.deadline))
        if self._captures is not None and sig != signal.SIGKILL:
            self._captures.add(esc, now, reason)

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
                f"sent SIGCONT so that they can act on {_name_or_number(sig)}",
                "information",
            )

    def kill_now(self, slots: list[RankSlot], reason: StopReason) -> None:
        """SIGKILL each rank's group at once (no escalation: there is nothing after it)."""
        slots = [s for s in slots if s.alive and s.proc is not None]
        for slot in slots:
            if slot.stop_reason is None:
                slot.stop_reason = reason
            target = policy.kill_move(slot.state)
            if target is not None:
                # RUNNING -> TERMINATING: killed; SIGNALLED follows when it is reaped
                self._events.emit(slot.move(target))
        killed = self.signal_slots(slots, signal.SIGKILL)
        if killed:
            self.record(killed, signal.SIGKILL, reason)

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
        name = _name_or_number(sig)
        self._state.signal_log.append(SignalRecord(ranks_t, name, by, reason, now))
        self._events.emit(RanksSignalled(ranks_t, name, by, reason, now / 1e9))

    def _start_captures(self, now: float) -> None:
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

    def rank_gone(self, rank: int) -> None:
        """``rank`` exited: finish every escalation that was waiting only for it."""
        for esc in self._escalations.rank_gone(rank):
            self._events.emit(EscalationFinished(esc.ranks, tuple(esc.killed)))

    def run_deadlines(self, now: float) -> None:
        """SIGKILL the ranks whose deadline passed; give up on those SIGKILL did not end.

        Each escalation is handled on its own: a problem with one (logged) must not keep
        the ranks of the others due in the same pass from their SIGKILL. Captures due are
        started first, on threads of their own: they never delay a SIGKILL.
        """
        self._start_captures(now)
        for esc, ranks in self._escalations.due(now):
            try:
                # Deadline passed and these ranks still live: SIGKILL them and their groups.
                slots = [self._state.slots[r] for r in ranks]
                killed = self.signal_slots(
                    [s for s in slots if s.alive and s.proc is not None], signal.SIGKILL
                )
                if killed:
                    self.record(killed, signal.SIGKILL, "escalation")
                if ranks:
                    shown = map(self._state.shown, ranks)
                    self._events.notice(words.outlived_deadline(
                        shown, esc.timeout_s, _name_or_number(esc.sig)), "warning")
            except Exception:  # noqa: BLE001 - the next escalation's SIGKILL must still go
                log.exception("escalation of rank(s) %s failed", self._state.ranks_text(ranks))
        for esc in self._escalations.overdue(now):
            self._events.emit(EscalationFinished(esc.ranks, tuple(esc.killed)))
            if esc.stuck:
                # Uninterruptible sleep (D state) delays even SIGKILL; we stop waiting,
                # the kernel will reap them when their I/O returns.
                self._events.notice(
                    f"rank(s) {self._state.ranks_text(esc.stuck)} did not exit after SIGKILL",
                    "error",
                )


def _name_or_number(sig: int) -> str:
    """A signal's name for a message; its number if it has none (a message never fails)."""
    try:
        return signal_name(sig)
    except ValueError:
        return f"signal {sig}"
