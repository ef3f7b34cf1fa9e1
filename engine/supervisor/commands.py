"""The Supervisor's commands: signal, terminate, kill, restart one rank, restart all.

Every command runs on the caller's thread, takes the state lock briefly, sends its signals
at once, records any escalation for the monitor thread and returns a ``CommandResult``. It
never waits for a rank to exit, and never raises for a person's mistake (a rank that does
not exist, or already exited): those come back as ``CommandResult(ok=False, message)``.

A mixin of ``engine.supervisor.core.Supervisor``; the attributes it uses are set there.
"""

from __future__ import annotations

import signal
import time
from typing import Any

from engine.events import EscalationScheduled
from engine.handle import (
    Command,
    CommandResult,
    KillRanks,
    RestartAll,
    RestartRank,
    SignalRanks,
    TerminateRanks,
)
from engine.states import RankState
from engine.supervisor.rank_slot import RankSlot

__all__ = ["CommandsMixin"]


class _Refused(Exception):
    """A command that cannot be carried out; the message is for a person."""


def _words(ranks: list[int]) -> str:
    return ", ".join(map(str, ranks))


def _signame(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:
        return f"signal {sig}"


class CommandsMixin:
    """``execute`` and the helpers that stop ranks."""

    _lock: Any
    _slots: dict[int, RankSlot]

    def execute(self: Any, command: Command) -> CommandResult:
        """Carry out ``command`` without blocking for its escalation; safe from any thread."""
        handlers = {
            SignalRanks: self._cmd_signal,
            TerminateRanks: self._cmd_terminate,
            KillRanks: self._cmd_kill,
            RestartRank: self._cmd_restart_rank,
            RestartAll: self._cmd_restart_all,
        }
        handler = handlers.get(type(command))
        if handler is None:
            return CommandResult(False, f"unknown command {command!r}")
        try:
            with self._lock:
                if not self._started:
                    raise _Refused("the run has not started")
                if self._closed or self._shutting_down:
                    raise _Refused("the run is shutting down")
                result: CommandResult = handler(command)
        except _Refused as e:
            result = CommandResult(False, str(e))
        self._flush()
        self._wake()
        return result

    # -- resolving ranks ------------------------------------------------------------------

    def _resolve(self: Any, ranks: tuple[int, ...] | None) -> list[RankSlot]:
        """The slots named (all when None); refuse unknown ranks, naming them."""
        if ranks is None:
            return list(self._slots.values())
        unknown = sorted({r for r in ranks if r not in self._slots})
        if unknown:
            raise _Refused(
                f"no rank {_words(unknown)} (ranks are 0..{len(self._slots) - 1})"
            )
        return [self._slots[r] for r in sorted(set(ranks))]

    def _running(self: Any, slots: list[RankSlot], verb: str) -> tuple[list[RankSlot], str]:
        """The live ones among ``slots``; refuse when none is, say which were skipped."""
        live = [s for s in slots if s.alive and s.proc is not None]
        gone = [s for s in slots if s not in live]
        if not live:
            if len(gone) == 1:
                s = gone[0]
                raise _Refused(f"rank {s.rank} is not running ({s.state.value}): nothing to {verb}")
            raise _Refused(f"no running rank to {verb}")
        note = f"skipped rank(s) {_words([s.rank for s in gone])}: not running" if gone else ""
        return live, note

    # -- commands -------------------------------------------------------------------------

    def _cmd_signal(self: Any, cmd: SignalRanks) -> CommandResult:
        if cmd.sig not in signal.valid_signals():
            raise _Refused(f"{cmd.sig} is not a signal number")
        live, note = self._running(self._resolve(cmd.ranks), "signal")
        sent = []
        for slot in live:
            # Remember it: if the rank dies of this signal, that death was our doing.
            slot.user_signals.add(int(cmd.sig))
            if slot.proc.send_signal(cmd.sig, group=True):
                slot.note_signal(cmd.sig, stop=False)
                sent.append(slot.rank)
        if not sent:
            raise _Refused(f"rank(s) {_words([s.rank for s in live])} exited before the signal")
        return CommandResult(True, note)

    def _cmd_terminate(self: Any, cmd: TerminateRanks) -> CommandResult:
        live, note = self._running(self._resolve(cmd.ranks), "terminate")
        timeout = self.config.term_timeout if cmd.timeout_s is None else float(cmd.timeout_s)
        self._stop_ranks(live, "terminate", cmd.sig, timeout)
        return CommandResult(True, note)

    def _cmd_kill(self: Any, cmd: KillRanks) -> CommandResult:
        live, note = self._running(self._resolve(cmd.ranks), "kill")
        self._kill_now(live, "kill")
        return CommandResult(True, note)

    def _cmd_restart_rank(self: Any, cmd: RestartRank) -> CommandResult:
        (slot,) = self._resolve((cmd.rank,))
        if self._attempt_pending:
            raise _Refused("all ranks are being restarted already")
        if slot.after_exit == "restart" or slot.state is RankState.RESTARTING:
            raise _Refused(f"rank {slot.rank} is already restarting")
        slot.after_exit = "restart"
        if slot.alive and slot.proc is not None:
            # The monitor starts it again once this incarnation has exited.
            self._stop_ranks([slot], "restart", signal.SIGTERM, self.config.term_timeout)
            return CommandResult(True)
        # Already exited: nothing to stop, the monitor starts it again at once.
        return CommandResult(
            True, f"rank {slot.rank} had exited ({slot.state.value}): starting it again"
        )

    def _cmd_restart_all(self: Any, cmd: RestartAll) -> CommandResult:
        if self._attempt_pending:
            raise _Refused("all ranks are being restarted already")
        self._attempt_pending = True
        for slot in self._slots.values():
            slot.after_exit = None  # a single-rank restart is folded into the new attempt
        live = [s for s in self._slots.values() if s.alive and s.proc is not None]
        # The monitor starts attempt n+1 once every rank of attempt n has exited.
        self._stop_ranks(live, "attempt", signal.SIGTERM, self.config.term_timeout)
        return CommandResult(True)

    # -- stopping (shared with the monitor) -------------------------------------------------

    def _stop_ranks(
        self: Any, slots: list[RankSlot], reason: str, sig: int, timeout: float
    ) -> None:
        """Send ``sig`` to each rank's group now, SIGKILL whoever is alive at the deadline.

        ``reason`` says why: "terminate", "restart", "attempt", "teardown" or "shutdown".
        The exit counts as caused by us only if the signal reached the rank before it
        exited (``RankSlot.exit_caused_by_us``). The caller holds the lock.
        """
        slots = [s for s in slots if s.alive and s.proc is not None]
        if not slots:
            return
        target = RankState.RESTARTING if reason in ("restart", "attempt") else RankState.TERMINATING
        for slot in slots:
            slot.stop_reason = reason
            if slot.state is not target and slot.state in (RankState.STARTING, RankState.RUNNING):
                # RUNNING -> TERMINATING: asked to stop (a person, teardown or shutdown)
                # RUNNING -> RESTARTING: stopping in order to start again
                self._emit(slot.move(target))
            elif slot.state is RankState.TERMINATING and target is RankState.RESTARTING:
                # TERMINATING -> RESTARTING: a restart was asked while it was stopping
                self._emit(slot.move(target))
        signalled = self._signal_slots(slots, sig)
        if not signalled:
            return  # every one of them had already exited: the monitor will record it
        ranks = tuple(signalled)
        esc = self._escalations.add(ranks, int(sig), timeout, time.monotonic())
        self._emit(EscalationScheduled(ranks, _signame(sig), timeout, esc.deadline))

    def _signal_slots(self: Any, slots: list[RankSlot], sig: int) -> list[int]:
        """Send a stop signal to every slot's process group and descendants; the ranks
        that got it (each records when, so that only exits after it count as ours).

        One /proc scan serves all of them (``send_signal_all``): with 32 ranks, a scan per
        rank was most of the time from "terminate all" to the last exit.
        """
        from engine.process.rank_process import send_signal_all

        by_proc = {id(s.proc): s for s in slots}
        got = [by_proc[id(p)] for p in send_signal_all([s.proc for s in slots], sig)]
        for slot in got:
            slot.note_signal(sig, stop=True)
        return sorted(s.rank for s in got)

    def _kill_now(self: Any, slots: list[RankSlot], reason: str) -> None:
        """SIGKILL each rank's group at once (no escalation: there is nothing after it)."""
        slots = [s for s in slots if s.alive and s.proc is not None]
        for slot in slots:
            if slot.stop_reason is None:
                slot.stop_reason = reason
            if slot.state in (RankState.STARTING, RankState.RUNNING):
                # RUNNING -> TERMINATING: killed; SIGNALLED follows when it is reaped
                self._emit(slot.move(RankState.TERMINATING))
        self._signal_slots(slots, signal.SIGKILL)
