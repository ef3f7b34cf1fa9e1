"""The Supervisor's commands: signal, terminate, kill, restart one rank, restart all, dump
stacks, send a line to ranks' stdin or close it.

Every command runs on the caller's thread. It is checked first, before the state lock is
taken and before anything is sent or recorded: a command that carries a signal must carry a
valid signal number (real-time ones included), and a timeout must be a finite number of
seconds, so that no bad value ever reaches the monitor thread. It then takes the state lock
briefly, sends its signals at once, records any escalation for the monitor thread and
returns a ``CommandResult``. It never waits for a rank to exit, and never raises for a
person's mistake (a bad signal, a rank that does not exist or already exited): those come
back as ``CommandResult(ok=False, message)``.
"""

from __future__ import annotations

from ..handle import (
    CloseInput,
    Command,
    CommandResult,
    DumpStacks,
    KillRanks,
    ReadCollectives,
    RestartAll,
    RestartRank,
    SendInput,
    SignalRanks,
    TerminateRanks,
    command_problem,
    term_timeout,
)
from ..kernel import policy
from ..kernel.policy import Refused
from ..names import refusals as words
from ..process.stdin_pipe import StdinRefused
from .collective_watch import CollectiveWatch
from .input_watch import InputWatch
from .publisher import Publisher
from .rank_slot import RankSlot
from .run_config import SupervisorConfig
from .stack_capture import StackCapture
from .state import RunState, Wakeup
from .stopper import Stopper

__all__ = ["CommandHandler", "Refused", "check_command"]


def _first_error(dump: object) -> str:
    ranks = getattr(dump, "ranks", ())
    errors = [f"rank {r.rank}: {r.error}" for r in ranks if r.error]
    return errors[0] if errors else "no rank could be read"


def check_command(command: Command) -> None:
    """Refuse a command whose values are wrong whatever the run's state.

    Raises:
        Refused: with ``engine.handle.command_problem``'s words.
    """
    problem = command_problem(command)
    if problem is not None:
        raise Refused(problem)


class CommandHandler:
    """Carries out commands: ``execute`` and the checks behind it."""

    def __init__(
        self,
        config: SupervisorConfig,
        state: RunState,
        events: Publisher,
        stopper: Stopper,
        wakeup: Wakeup,
        stacks: StackCapture | None = None,
        input_watch: InputWatch | None = None,
        collectives: CollectiveWatch | None = None,
    ) -> None:
        self._config = config
        self._collectives = collectives
        self._state = state
        self._events = events
        self._stopper = stopper
        self._wakeup = wakeup
        self._stacks = stacks
        self._input = input_watch

    def execute(self, command: Command) -> CommandResult:
        """Carry out ``command`` without blocking for its escalation; safe from any thread.

        ``DumpStacks`` is the exception that waits: for py-spy, bounded, lock released.
        """
        if isinstance(command, DumpStacks):
            return self._dump(command)
        if isinstance(command, ReadCollectives):
            return self._read_collectives()
        try:
            check_command(command)
            with self._state.lock:
                refusal = policy.lifecycle_refusal(
                    started=self._state.started,
                    stopping=self._state.closed or self._state.shutting_down,
                )
                if refusal is not None:
                    raise Refused(refusal)
                result = self._dispatch(command)
        except Refused as e:
            result = CommandResult(False, str(e))
        self._events.flush()
        self._wakeup.wake()
        return result

    def _dispatch(self, command: Command) -> CommandResult:
        if isinstance(command, SignalRanks):
            return self._signal(command)
        if isinstance(command, TerminateRanks):
            return self._terminate(command)
        if isinstance(command, KillRanks):
            return self._kill(command)
        if isinstance(command, RestartRank):
            return self._restart_rank(command)
        if isinstance(command, RestartAll):
            return self._restart_all()
        if isinstance(command, (SendInput, CloseInput)):
            return self._input_command(command)
        # Unreachable: check_command refused anything else (assert_never is 3.11+).
        raise TypeError(f"unknown command {command!r}")

    def _dump(self, cmd: DumpStacks) -> CommandResult:
        """Dump the stacks of the running ranks named: pids under the lock, py-spy outside."""
        try:
            check_command(cmd)
            if self._stacks is None:
                raise Refused("stack dumps are not available in this run")
            with self._state.lock:
                if not self._state.started:
                    raise Refused(words.NOT_STARTED)
                if self._state.closed:
                    raise Refused(words.OVER)
                # Allowed while shutting down: a rank that hangs in its teardown is the
                # very one whose stack a person wants.
                live, note = self._running(self._resolve(cmd.ranks), "dump")
                # Keyed as a person knows the ranks: the dump names them (global on many nodes).
                targets = {self._state.shown(s.rank): s.pid for s in live if s.pid is not None}
        except Refused as e:
            return CommandResult(False, str(e))
        dump = self._stacks.dump(targets, native=cmd.native, nonblocking=cmd.nonblocking)
        if not dump.captured:
            return CommandResult(False, f"no stack dumped: {dump.problem or _first_error(dump)}",
                                 dump.to_dict())
        return CommandResult(True, note, dump.to_dict())

    def _read_collectives(self) -> CommandResult:
        """Ask the running ranks' worker servers: sockets under the lock, the asking outside."""
        watch = self._collectives
        if watch is None:
            return CommandResult(False, words.NO_COLLECTIVES)
        with self._state.lock:
            if not self._state.started:
                return CommandResult(False, words.NOT_STARTED)
            if self._state.closed:
                return CommandResult(False, words.OVER)
            paths = watch.live_paths()
        return CommandResult(True, "", watch.answer("asked", paths))

    # -- resolving ranks ------------------------------------------------------------------

    def _resolve(self, ranks: tuple[int, ...] | None) -> list[RankSlot]:
        """The slots named (all when None); refuse unknown ranks, naming them."""
        slots = self._state.slots
        return [slots[r] for r in policy.resolve(ranks, slots, self._state.shown)]

    def _running(self, slots: list[RankSlot], verb: str) -> tuple[list[RankSlot], str]:
        """The live ones among ``slots``; refuse when none is, say which were skipped."""
        live = {s.rank for s in slots if s.alive and s.proc is not None}
        reached, note = policy.running(
            [s.rank for s in slots], live, {s.rank: s.state for s in slots}, verb,
            self._state.shown,
        )
        return [self._state.slots[r] for r in reached], note

    # -- commands (the caller holds the lock; the command was checked) ----------------------

    def _signal(self, cmd: SignalRanks) -> CommandResult:
        sig = int(cmd.sig)
        live, note = self._running(self._resolve(cmd.ranks), "signal")
        sent = []
        for slot in live:
            # Remember it: if the rank dies of this signal, that death was our doing.
            slot.user_signals.add(sig)
            if slot.proc is not None and slot.proc.send_signal(sig, group=True):
                slot.note_signal(sig, stop=False)
                sent.append(slot.rank)
        if not sent:
            raise Refused(words.exited_before_signal(self._state.shown(s.rank) for s in live))
        self._stopper.record(sent, sig, "signal")
        return CommandResult(True, note)

    def _terminate(self, cmd: TerminateRanks) -> CommandResult:
        live, note = self._running(self._resolve(cmd.ranks), "terminate")
        timeout = term_timeout(cmd.timeout_s, self._config.term_timeout)
        self._stopper.stop_ranks(live, "terminate", int(cmd.sig), timeout)
        return CommandResult(True, note)

    def _kill(self, cmd: KillRanks) -> CommandResult:
        live, note = self._running(self._resolve(cmd.ranks), "kill")
        self._stopper.kill_now(live, "kill")
        return CommandResult(True, note)

    def _restart_rank(self, cmd: RestartRank) -> CommandResult:
        (slot,) = self._resolve((cmd.rank,))
        effects, note = self._state.restart_rank(slot.rank)
        self._stopper.apply(effects)  # the monitor starts it again once it has exited
        return CommandResult(True, note)

    def _restart_all(self) -> CommandResult:
        # The monitor starts attempt n+1 once every rank of attempt n has exited.
        effects, note = self._state.restart_all()
        self._stopper.apply(effects)
        return CommandResult(True, note)

    def _input_command(self, cmd: SendInput | CloseInput) -> CommandResult:
        """A line to each rank's stdin pipe (or EOF): whole or refused, rank by rank."""
        mode = self._config.stdin
        if mode != "pipe" or self._input is None:
            raise Refused(policy.not_piped(mode))
        verb = "send input to" if isinstance(cmd, SendInput) else "close the stdin of"
        live, note = self._running(self._resolve(cmd.ranks), verb)
        shown = self._state.shown
        sent: list[int] = []
        refused: dict[str, str] = {}
        if cmd.ranks is not None:  # a rank named but not running was not reached either
            live_ranks = {s.rank for s in live}
            refused = {str(shown(r)): "not running" for r in sorted(set(cmd.ranks))
                       if r not in live_ranks}
        for slot in live:
            try:
                if isinstance(cmd, SendInput):
                    self._input.send(slot, cmd.text)
                else:
                    self._input.close(slot)
                sent.append(shown(slot.rank))
            except (StdinRefused, OSError) as e:
                refused[str(shown(slot.rank))] = str(e) if isinstance(e, StdinRefused) else (
                    e.strerror or str(e))
        problems = [f"rank {r}: not sent: {why}" for r, why in refused.items()
                    if why != "not running"]
        data = {"sent": sent, "refused": refused}
        if not sent:
            return CommandResult(False, "; ".join(problems) or note, data)
        return CommandResult(True, "; ".join([*problems, *([note] if note else [])]), data)
