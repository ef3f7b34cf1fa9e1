"""ScriptedSupervisor: a ``SupervisorHandle`` that replays a script instead of running ranks.

The UI tests and the screenshots build the app on it (as httpx tests build a client on
``MockTransport``): pids, timestamps and output are fixed by the script, so a snapshot
never shows a real pid, path or clock time. Commands are recorded in ``calls`` and, unless
``react=False``, answered as the real ``engine.supervisor.Supervisor`` answers them: the same
``CommandResult`` (refusals word for word) and the same lifecycle events in the same order per
rank (a terminated rank goes to TERMINATING with an escalation deadline from the injected clock,
a killed rank ends SIGNALLED, a restarted rank comes back with a new pid and fresh log files,
a rank that fails on its own (``rank_exits``) brings the teardown and the restart policy).
tests/test_double_contract.py holds it to the real Supervisor, step by step.

Script events are replayed as given: the script is the truth, so a scripted failure brings no
teardown and no policy (a scenario shows exactly what it lists). Only commands,
``rank_exits`` and ``expire_escalations`` make the double act as the Supervisor would.

Threads: events are delivered synchronously on the thread that calls ``start``, ``advance``,
``emit``, ``execute``, ``rank_exits``, ``expire_escalations`` or ``shutdown`` (the UI calls
commands from worker threads, as it would with the real Supervisor). A lock keeps the
bookkeeping consistent; events are queued under it and delivered in order after it is
released, as the Supervisor does, so a sink may call back into the double.

Scenarios (fixed runs, scripts and tracebacks shared by the tests and the screenshots) live
with the tests, in ``tests/scenarios.py``.
"""

from __future__ import annotations

import collections
import itertools
import math
import os
import signal
import threading
from dataclasses import dataclass, field, replace
from datetime import timezone
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Sequence, Union, cast

from .. import clock
from ..control.server import READ_ONLY_DUMP_REFUSAL, READ_ONLY_REFUSAL
from ..events import (
    AttemptStarted,
    EscalationFinished,
    EscalationScheduled,
    Event,
    EventSink,
    RankInput,
    RankInputWait,
    RankOutput,
    RankRestarted,
    RankStateChanged,
    RunFinished,
    SupervisorNotice,
)
from ..forensics.stacks import (
    Frame,
    RankStack,
    StackDump,
    ThreadStack,
    dump_file_name,
    merge,
    save_dump,
)
from ..handle import (
    CloseInput,
    Command,
    CommandResult,
    DumpStacks,
    KillRanks,
    RankInfo,
    ReadCollectives,
    RestartAll,
    RestartRank,
    RunInfo,
    SendInput,
    SignalRanks,
    TerminateRanks,
    command_problem,
    reads_only,
    term_timeout,
)
from ..kernel import policy
from ..kernel.escalation import EscalationTable
from ..kernel.policy import Refused
from ..names import refusals as words
from ..rundir.arrival import ArrivalWriter, arrival_path
from ..states import RankState
from .prompts import RELEASE, Answer, Prompt, PromptReleased, ScriptedStdin

if TYPE_CHECKING:
    # ScriptedFailure / ScriptedResult stand in for these in the events (duck-typed).
    from ..errors import ProcessFailure
    from ..result import RunProcsResult

__all__ = [
    "BASE_PID",
    "EPOCH",
    "RELEASE",
    "Answer",
    "Checkpoint",
    "Prompt",
    "PromptReleased",
    "ScriptItem",
    "ScriptedFailure",
    "ScriptedResult",
    "ScriptedSupervisor",
    "not_piped",
    "rank_paths",
]

BASE_PID = 41000
"""Scripted pids are BASE_PID + 100 * incarnation + rank: fixed, and plainly not real."""

EPOCH = 1_767_225_600.0
"""Scripted wall-clock origin (2026-01-01 00:00:00 UTC)."""

_FATAL = frozenset(
    {signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGKILL}
)
"""The signals a scripted rank dies of (SIGTERM only with ``obey_term``): those a training
program leaves at their default action; it is taken to handle SIGUSR1/SIGUSR2 (stack dumps)."""


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """A pause in the script: ``start`` stops here, ``advance`` goes on to the next one."""

    label: str = ""


ScriptItem = Union[Event, Checkpoint, Prompt, PromptReleased]



def not_piped(mode: str) -> str:
    """The refusal of ``SendInput`` / ``CloseInput`` in a run whose ``RunInfo.stdin`` is
    ``mode``, not "pipe" (the Supervisor's words)."""
    what = "/dev/null" if mode == "null" else "the terminal rankvisor was started from"
    return (f"not sent: the ranks' stdin is {what} (--stdin {mode}); start the run with "
            "--stdin pipe to type to its ranks")


@dataclass(frozen=True, slots=True)
class ScriptedFailure:
    """The fields of torch's ``ProcessFailure``, without reading anything from disk."""

    local_rank: int
    pid: int
    exitcode: int
    error_file: str
    error_file_data: dict[str, Any] = field(default_factory=dict)
    message: str = ""
    timestamp: int = 0
    caused_by_us: bool = False

    def signal_name(self) -> str:
        if self.exitcode < 0:
            try:
                return signal.Signals(-self.exitcode).name
            except ValueError:
                return "<N/A>"
        return "<N/A>"

    def timestamp_isoformat(self) -> str:
        from datetime import datetime, timezone

        return datetime.fromtimestamp(self.timestamp, tz=timezone.utc).isoformat(sep="_")


@dataclass(frozen=True, slots=True)
class ScriptedResult:
    """The fields of ``RunProcsResult`` the UI reads: ``failures`` holds the ranks that
    failed on their own, ``stopped`` those our own stop ended (as the Supervisor reports)."""

    return_values: dict[int, Any] = field(default_factory=dict)
    failures: dict[int, Any] = field(default_factory=dict)
    stdouts: dict[int, str] = field(default_factory=dict)
    stderrs: dict[int, str] = field(default_factory=dict)
    stopped: dict[int, Any] = field(default_factory=dict)

    def is_failed(self) -> bool:
        return bool(self.failures)


def rank_paths(
    run_dir: str, attempt: int, rank: int, restart: int | None
) -> tuple[str, str, str]:
    """stdout.log, stderr.log and error.json of one incarnation, laid out as the Supervisor
    lays them out (``attempt_<n>/<rank>/``, ``restart_<k>/`` for the k-th restart of a rank
    alone within that attempt)."""
    base = f"{run_dir}/attempt_{attempt}/{rank}"
    if restart:
        base += f"/restart_{restart}"
    return f"{base}/stdout.log", f"{base}/stderr.log", f"{base}/error.json"


@dataclass(slots=True)
class _Life:
    """The Supervisor's bookkeeping of one incarnation (its ``RankSlot`` fields)."""

    stop_reason: str | None = None
    signals_ns: dict[int, int] = field(default_factory=dict)
    """Each signal delivered, at its (scripted) moment: ``exit_is_ours`` reads them."""
    stop_signal_ns: int | None = None
    after_exit: str | None = None
    failure: ScriptedFailure | None = None
    exit_seq: int = 0
    stdin_closed: bool = False
    """EOF was sent (``CloseInput``): its stdin takes no more lines."""

    def sent(self, sig: int, *, stop: bool, at_ns: int = 0) -> None:
        """``sig`` was delivered (a stop signal, or a person's)."""
        self.signals_ns.setdefault(int(sig), at_ns)
        if stop and self.stop_signal_ns is None:
            self.stop_signal_ns = at_ns


class ScriptedSupervisor:
    """Replays ``script`` to its subscribers and records the commands it is given.

    Args:
        info: The run as ``snapshot()`` first reports it (ranks, paths, term timeout).
        script: Events to deliver, split into steps by ``Checkpoint`` markers.
        clock: The monotonic clock escalation deadlines are computed from (inject a fixed
            one in snapshot tests; the app must be given the same).
        react: Answer commands as the Supervisor would; if False every command is
            recorded and answered ``CommandResult(True)`` with no event.
        obey_term: Ranks die of SIGTERM. If False (the default) they ignore it, as a rank
            that traps SIGTERM does: terminate, restart and restart-all leave them in
            TERMINATING / RESTARTING (a test sees the countdown) until
            ``expire_escalations()`` SIGKILLs them as the deadline would; ``shutdown``
            waits that deadline out by itself.
        write_files: Append emitted output to the ranks' log files (paths from ``info``).
        max_restarts: Whole-group restarts when a rank fails on its own, as the
            Supervisor's policy (torch's agent) does.
        teardown_on_failure: Stop the other ranks when one fails on its own.
        detachable: What ``detachable`` says: True stands for a run in a supervisor
            process of its own (quitting may leave it running).
        stacks: A recorded dump ``DumpStacks`` answers with (the running ranks' part of
            it, merged again); without one each running rank is "in" ``main (train.py:1)``.
            Saved under the run directory with ``write_files``; its path is given either way.
        read_only: Stand for a read-only viewer's handle: every command is refused with the
            control server's words (a nonblocking stack dump and the collectives excepted),
            as over the socket.
        collectives: A recorded answer ``ReadCollectives`` hands back (the JSON of
            ``rankvisor collectives --json``); without one it is refused as a run whose
            ranks serve no Flight Recorder is.

    Input: ``SendInput`` / ``CloseInput`` reach running ranks of a run whose ``info.stdin``
    is "pipe", each publishing ``RankInput``; a rank waiting at a scripted ``Prompt`` answers
    the line (``engine.testing.prompts``). ``RankInfo.input_wait`` follows the waits.
    """

    def __init__(
        self,
        info: RunInfo,
        script: Iterable[ScriptItem] = (),
        *,
        clock: Callable[[], float] | None = None,
        react: bool = True,
        obey_term: bool = False,
        write_files: bool = False,
        max_restarts: int = 0,
        teardown_on_failure: bool = True,
        detachable: bool = False,
        stacks: StackDump | None = None,
        read_only: bool = False,
        collectives: Mapping[str, Any] | None = None,
    ) -> None:
        self._detachable = detachable
        self.read_only = read_only
        """As a ``RemoteHandle`` of a read-only viewer says it (the app reads it)."""
        self._stdin = ScriptedStdin()
        self._stacks = stacks
        self._collectives = collectives
        self._info = info
        self._steps = _split(script)
        self._step = 0
        self._clock = clock or (lambda: 1000.0)
        self._react = react
        self._fatal = _FATAL if obey_term else _FATAL - {signal.SIGTERM}
        self._write_files = write_files
        self._written: dict[str, int] = {}
        """Lines written to each log file (``write_files``)."""
        self._teardown = teardown_on_failure
        self._restarts_left = max_restarts
        self._lock = threading.RLock()
        self._dispatch_lock = threading.RLock()
        self._queue: collections.deque[Event] = collections.deque()
        self._sinks: list[EventSink] = []
        self._ranks: dict[int, RankInfo] = {r.rank: r for r in info.ranks}
        self._life: dict[int, _Life] = {r: _Life() for r in self._ranks}
        self._escalations = EscalationTable(kill_wait_s=0.0)
        """Every stop in flight (its deadline passes at ``expire_escalations``)."""
        self._exits = itertools.count(1)
        self._attempt = info.attempt
        self._finished = info.finished
        self._attempt_pending = False
        self._shutting_down = False
        self._incarnations = 0
        self._alone: dict[int, int] = {}
        """Restarts of each rank alone within the current attempt (its ``restart_<k>``)."""
        self.started = False
        self.calls: list[Command | tuple[str, float | None]] = []
        """Every command given to ``execute``, and ``("shutdown", timeout)``, in order."""
        self.emitted: list[Event] = []

    # -- SupervisorHandle ------------------------------------------------------------------

    @property
    def detachable(self) -> bool:
        """As configured (``detachable=``): a script can stand for a run in this process or
        for one in a supervisor process of its own."""
        return self._detachable

    def watch(self, sink: EventSink) -> tuple[RunInfo, Callable[[], None]]:
        unsubscribe = self.subscribe(sink)
        return self.snapshot(), unsubscribe

    def detach(self) -> None:
        with self._dispatch_lock:
            self._sinks.clear()
        with self._lock:
            self.calls.append(("detach", None))

    def subscribe(self, sink: EventSink) -> Callable[[], None]:
        with self._dispatch_lock:
            self._sinks.append(sink)

        def unsubscribe() -> None:
            with self._dispatch_lock:
                if sink in self._sinks:
                    self._sinks.remove(sink)

        return unsubscribe

    def start(self) -> None:
        """Deliver the script up to its first checkpoint (idempotent)."""
        with self._lock:
            if self.started:
                return
            self.started = True
        self.advance()

    def advance(self) -> bool:
        """Deliver the next step of the script; False when the script is over."""
        with self._lock:
            if self._step >= len(self._steps):
                return False
            step = self._steps[self._step]
            self._step += 1
        self.emit(*step)
        return True

    def execute(self, command: Command) -> CommandResult:
        handlers: dict[type, Callable[[Any], CommandResult]] = {
            SignalRanks: self._cmd_signal,
            TerminateRanks: self._cmd_terminate,
            KillRanks: self._cmd_kill,
            RestartRank: self._cmd_restart_rank,
            RestartAll: self._cmd_restart_all,
            DumpStacks: self._cmd_dump_stacks,
            ReadCollectives: self._cmd_collectives,
            SendInput: self._cmd_input,
            CloseInput: self._cmd_input,
        }
        with self._lock:
            self.calls.append(command)
            if not self._react:
                return CommandResult(True)
            if self.read_only and not reads_only(command):
                # As the control server answers a read-only viewer, before anything else.
                refusal = READ_ONLY_DUMP_REFUSAL if isinstance(command, DumpStacks) else (
                    READ_ONLY_REFUSAL)
                return CommandResult(False, refusal)
            handler = handlers.get(type(command))
            try:
                problem = command_problem(command)
                if problem is not None or handler is None:
                    raise Refused(problem or f"unknown command {command!r}")
                if not self.started:
                    raise Refused(words.NOT_STARTED)
                if self._shutting_down:
                    # The real one dumps while shutting down; this one's shutdown is over
                    # as soon as it is asked for.
                    raise Refused(words.OVER if isinstance(command, (DumpStacks,
                                                                      ReadCollectives))
                                   else words.SHUTTING_DOWN)
                result = handler(command)
                self._settle()
            except Refused as refused:
                result = CommandResult(False, str(refused))
        self._flush()
        return result

    def snapshot(self) -> RunInfo:
        with self._lock:
            ranks = tuple(self._ranks[r] for r in sorted(self._ranks))
            return replace(self._info, ranks=ranks, attempt=self._attempt, finished=self._finished)

    def shutdown(self, timeout_s: float | None = None) -> None:
        """Stop every live rank as the Supervisor's ``shutdown`` does; the SIGKILL deadline
        of ranks that ignore SIGTERM passes at once (nothing here waits)."""
        timeout = term_timeout(timeout_s, self._info.term_timeout_s)
        with self._lock:
            self.calls.append(("shutdown", timeout_s))
            if self._shutting_down:
                return
            self._shutting_down = True
            if self.started:
                self._attempt_pending = False
                self._restarts_left = 0
                for life in self._life.values():
                    life.after_exit = None
                self._stop(self._live(), "shutdown", signal.SIGTERM, timeout)
                self._expire()
                self._settle()
        self._flush()

    # -- test helpers ----------------------------------------------------------------------

    def emit(self, *events: Event | Prompt | PromptReleased) -> None:
        """Deliver ``events`` now, in order, updating what ``snapshot()`` reports (a
        ``Prompt`` or ``PromptReleased`` becomes the events a real rank's wait makes)."""
        with self._lock:
            for item in events:
                if isinstance(item, Prompt):
                    made = self._stdin.begin(item, EPOCH + 60)
                elif isinstance(item, PromptReleased):
                    made = self._stdin.release(item.rank, item.attempt)
                else:
                    made = [item]
                for event in made:
                    self._track(event)
                    self._queue.append(event)
        self._flush()

    def rank_exits(self, rank: int, exitcode: int) -> None:
        """Rank ``rank`` exits by itself with ``exitcode`` (negative: a signal from
        elsewhere ended it); the Supervisor's consequences follow: the teardown of the
        others after a failure, the restart policy, RunFinished."""
        with self._lock:
            if rank not in self._ranks or not self._ranks[rank].state.is_alive:
                raise ValueError(f"rank {rank} is not running")
            self._exit(rank, exitcode)
            self._settle()
        self._flush()

    def expire_escalations(self) -> None:
        """Every escalation deadline passed: SIGKILL the ranks still stopping."""
        with self._lock:
            self._expire()
            self._settle()
        self._flush()

    # -- events ----------------------------------------------------------------------------

    def _flush(self) -> None:
        """Deliver queued events in order (called with the state lock released)."""
        with self._dispatch_lock:
            while True:
                with self._lock:
                    if not self._queue:
                        return
                    event = self._queue.popleft()
                    self.emitted.append(event)
                    sinks = list(self._sinks)
                for sink in sinks:
                    sink(event)

    def _send(self, event: Event) -> None:
        """Queue an event this double made (its bookkeeping is already done)."""
        self._queue.append(event)

    def _notice(self, message: str, severity: str = "information") -> None:
        self._send(SupervisorNotice(message, severity))  # type: ignore[arg-type]

    def _track(self, event: Event) -> None:
        """Keep the snapshot and the bookkeeping in step with a scripted event."""
        if isinstance(event, RankStateChanged) and event.rank in self._ranks:
            info = self._ranks[event.rank]
            self._ranks[event.rank] = replace(
                info,
                state=event.new,
                pid=event.pid if event.pid is not None else info.pid,
                restart_count=event.restart_count,
                attempt=event.attempt,
                exitcode=event.exitcode if event.new.is_final else None,
                signal_name=event.signal_name if event.new.is_final else None,
            )
            life = self._life[event.rank]
            if event.new.is_final or event.new is RankState.STARTING:
                # Its wait ends with the process (a script lists no release for that).
                self._stdin.release(event.rank)
                self._ranks[event.rank] = replace(self._ranks[event.rank], input_wait=None)
            if event.new is RankState.STARTING:
                self._life[event.rank] = _Life()
            elif event.new.is_final:
                life.exit_seq = next(self._exits)
                life.failure = None
                if event.new is not RankState.SUCCEEDED:
                    life.failure = cast(ScriptedFailure, event.failure) or ScriptedFailure(
                        event.rank,
                        event.pid or 0,
                        event.exitcode or 0,
                        info.error_file,
                        timestamp=int(event.t),
                        caused_by_us=event.caused_by_us,
                    )
        elif isinstance(event, RankRestarted) and event.rank in self._ranks:
            self._ranks[event.rank] = replace(
                self._ranks[event.rank],
                pid=event.pid,
                restart_count=event.restart_count,
                attempt=event.attempt,
                stdout_path=event.stdout_path,
                stderr_path=event.stderr_path,
                error_file=event.error_file,
            )
        elif isinstance(event, AttemptStarted):
            self._attempt = event.attempt
            self._finished = False
        elif isinstance(event, RunFinished):
            self._finished = True
        elif isinstance(event, RankInputWait) and event.rank in self._ranks:
            self._ranks[event.rank] = replace(self._ranks[event.rank], input_wait=event.wait)
        elif isinstance(event, RankOutput) and self._write_files:
            self._write(event)

    def _write(self, event: RankOutput) -> None:
        info = self._ranks.get(event.rank)
        if event.stream == "filtered_stdout":
            path = self._info.filtered_stdout_path
        elif event.stream == "filtered_stderr":
            path = self._info.filtered_stderr_path
        elif info is not None:
            path = info.stdout_path if event.stream == "stdout" else info.stderr_path
        else:
            path = ""
        if not path or not event.lines:
            return
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "a", encoding="utf-8", errors="surrogateescape") as f:
            f.write("".join(line + "\n" for line in event.lines))
        if info is not None and event.stream in ("stdout", "stderr"):
            # The arrival index, as the Supervisor's pump writes it beside the two logs.
            index = arrival_path(info.stdout_path, info.stderr_path)
            count = self._written.get(path, 0) + len(event.lines)
            self._written[path] = count
            if index:
                writer = ArrivalWriter(index)
                try:
                    writer.note(event.stream == "stderr", count)
                finally:
                    writer.close()

    # -- commands (the Supervisor's, word for word) ----------------------------------------

    def _resolve(self, ranks: Sequence[int] | None) -> list[int]:
        return policy.resolve(ranks, self._ranks)

    def _running(self, ranks: list[int], verb: str) -> tuple[list[int], str]:
        return policy.running(ranks, self._live(), self._states(), verb)

    def _states(self) -> dict[int, RankState]:
        return {r: info.state for r, info in self._ranks.items()}

    def _cmd_signal(self, cmd: SignalRanks) -> CommandResult:
        live, note = self._running(self._resolve(cmd.ranks), "signal")
        for r in live:
            self._life[r].sent(int(cmd.sig), stop=False)
        for r in live:
            if cmd.sig in self._fatal:
                self._exit(r, -int(cmd.sig))
        return CommandResult(True, note)

    def _cmd_terminate(self, cmd: TerminateRanks) -> CommandResult:
        live, note = self._running(self._resolve(cmd.ranks), "terminate")
        timeout = term_timeout(cmd.timeout_s, self._info.term_timeout_s)
        self._stop(live, "terminate", int(cmd.sig), timeout)
        return CommandResult(True, note)

    def _cmd_dump_stacks(self, cmd: DumpStacks) -> CommandResult:
        live, note = self._running(self._resolve(cmd.ranks), "dump")
        recorded = {r.rank: r for r in self._stacks.ranks} if self._stacks else {}
        ranks = tuple(
            replace(recorded[r], pid=self._ranks[r].pid or 0) if r in recorded else RankStack(
                r, self._ranks[r].pid or 0,
                (ThreadStack(self._ranks[r].pid or 0, "MainThread",
                             (Frame("main", "train.py", 1),), main=True),),
            )
            for r in live
        )
        when = self._stacks.time if self._stacks else EPOCH
        dump = StackDump(when, ranks, merge(ranks), native=cmd.native,
                         nonblocking=cmd.nonblocking, reason="asked")
        run_dir = self._info.log_dir
        if self._write_files and run_dir:
            dump = save_dump(dump, run_dir, timezone.utc)
        else:
            dump = replace(dump, path=os.path.join(run_dir, "stacks",
                                                   dump_file_name(when, timezone.utc)))
        return CommandResult(True, note, dump.to_dict())

    def _cmd_collectives(self, _cmd: ReadCollectives) -> CommandResult:
        if self._collectives is None:
            raise Refused(words.NO_COLLECTIVES)
        return CommandResult(True, "", {**self._collectives, "source": "live", "path": ""})

    def _cmd_input(self, cmd: SendInput | CloseInput) -> CommandResult:
        """A line (or EOF) to each running rank named, rank by rank, as the Supervisor does:
        every rank reached is a ``RankInput``; the answer's data says who was and who not."""
        mode = self._info.stdin
        if mode != "pipe":
            raise Refused(not_piped(mode))
        send = isinstance(cmd, SendInput)
        live, note = self._running(
            self._resolve(cmd.ranks), "send input to" if send else "close the stdin of"
        )
        sent: list[int] = []
        refused: dict[str, str] = {}
        # When the line went: fixed, but the wall clock where files are written (their
        # arrival index has real times, and the zoom places typed lines among them by time).
        when = clock.wall() if self._write_files else EPOCH + 60
        if cmd.ranks is not None:  # a rank named but not running was not reached either
            refused = {str(r): "not running" for r in sorted(set(cmd.ranks)) if r not in live}
        for rank in live:
            life, attempt = self._life[rank], self._ranks[rank].attempt
            if life.stdin_closed:
                refused[str(rank)] = (
                    "its stdin was closed (EOF was sent)" if send else "its stdin is closed already"
                )
                continue
            if send:
                made: list[Event] = [RankInput(rank, cmd.text, when, attempt)]
                made += self._stdin.answer(rank, cmd.text, EPOCH + 60)
            else:
                life.stdin_closed = True
                made = [RankInput(rank, "", when, attempt, eof=True)]
                # It reads EOF: what it does then (pdb quits, input() raises) is the script's.
                made += self._stdin.release(rank, attempt)
            for event in made:
                self._track(event)
                self._send(event)
            sent.append(rank)
        problems = [f"rank {r}: not sent: {why}" for r, why in refused.items()
                    if why != "not running"]
        data: dict[str, Any] = {"sent": sent, "refused": refused}
        if not sent:
            return CommandResult(False, "; ".join(problems) or note, data)
        return CommandResult(True, "; ".join([*problems, *([note] if note else [])]), data)

    def _cmd_kill(self, cmd: KillRanks) -> CommandResult:
        live, note = self._running(self._resolve(cmd.ranks), "kill")
        self._kill(live, "kill")
        return CommandResult(True, note)

    def _cmd_restart_rank(self, cmd: RestartRank) -> CommandResult:
        (rank,) = self._resolve((cmd.rank,))
        info, life = self._ranks[rank], self._life[rank]
        refusal = policy.restart_rank_refusal(
            rank, driven=False, attempt_pending=self._attempt_pending,
            restarting=life.after_exit == "restart" or info.state is RankState.RESTARTING,
        )
        if refusal is not None:
            raise Refused(refusal)
        life.after_exit = "restart"
        if info.state.is_alive:
            # Started again once this incarnation has exited.
            self._stop([rank], "restart", signal.SIGTERM, self._info.term_timeout_s)
            return CommandResult(True)
        # Already exited: nothing to stop, it starts again at once.
        return CommandResult(
            True, f"rank {rank} had exited ({info.state.value}): starting it again"
        )

    def _cmd_restart_all(self, cmd: RestartAll) -> CommandResult:
        refusal = policy.restart_all_refusal(pending=self._attempt_pending)
        if refusal is not None:
            raise Refused(refusal)
        self._attempt_pending = True
        for life in self._life.values():
            life.after_exit = None  # a single-rank restart is folded into the new attempt
        self._stop(self._live(), "attempt", signal.SIGTERM, self._info.term_timeout_s)
        return CommandResult(True)

    # -- the Supervisor's mechanics --------------------------------------------------------

    def _live(self) -> list[int]:
        return [r for r in sorted(self._ranks) if self._ranks[r].state.is_alive]

    def _stop(self, ranks: list[int], reason: str, sig: int, timeout: float) -> None:
        """Send ``sig`` now, SIGKILL at the deadline (``expire_escalations``)."""
        ranks = [r for r in ranks if self._ranks[r].state.is_alive]
        if not ranks:
            return
        for r in ranks:
            self._life[r].stop_reason = reason
            target = policy.stop_move(self._ranks[r].state, reason)
            if target is not None:
                self._move(r, target)
        for r in ranks:
            self._life[r].sent(sig, stop=True)
        esc = self._escalations.add(tuple(ranks), sig, timeout, self._clock())
        self._send(EscalationScheduled(tuple(ranks), _signame(sig), timeout, esc.deadline))
        for r in ranks:
            if sig in self._fatal:
                self._exit(r, -sig)

    def _kill(self, ranks: list[int], reason: str) -> None:
        """SIGKILL at once: TERMINATING first, then the exit."""
        ranks = [r for r in ranks if self._ranks[r].state.is_alive]
        for r in ranks:
            life = self._life[r]
            if life.stop_reason is None:
                life.stop_reason = reason
            target = policy.kill_move(self._ranks[r].state)
            if target is not None:
                self._move(r, target)
        for r in ranks:
            self._life[r].sent(signal.SIGKILL, stop=True)
        for r in ranks:
            self._exit(r, -signal.SIGKILL)

    def _expire(self) -> None:
        """Every deadline passes now (``math.inf``): SIGKILL whoever outlived it."""
        doomed: set[int] = set()
        for esc, survivors in self._escalations.due(math.inf):
            doomed.update(survivors)
            if survivors:
                self._notice(words.outlived_deadline(survivors, esc.timeout_s,
                                                     _signame(esc.sig)), "warning")
        for r in sorted(doomed):
            self._life[r].sent(signal.SIGKILL, stop=True)
        for r in sorted(doomed):
            if self._ranks[r].state.is_alive:
                self._exit(r, -signal.SIGKILL)

    def _exit(self, rank: int, exitcode: int) -> None:
        """The rank's process ended with ``exitcode``: record it as the monitor does."""
        info, life = self._ranks[rank], self._life[rank]
        # A scripted exit has no moment of its own: it comes after every signal sent.
        caused = policy.exit_is_ours(exitcode, None, life.signals_ns, life.stop_signal_ns, None)
        if caused and life.stop_reason is None:
            life.stop_reason = "signal"
        name = _signame(-exitcode) if exitcode < 0 else None
        life.failure = None
        if exitcode != 0:
            life.failure = ScriptedFailure(
                rank,
                info.pid or 0,
                exitcode,
                info.error_file,
                message=f"Signal {-exitcode} ({name}) received by PID {info.pid}" if name else "",
                timestamp=int(EPOCH + 60),
                caused_by_us=caused,
            )
        life.exit_seq = next(self._exits)
        new = (
            RankState.SUCCEEDED
            if exitcode == 0
            else (RankState.SIGNALLED if exitcode < 0 else RankState.FAILED)
        )
        self._move(
            rank,
            new,
            exitcode=exitcode,
            signal_name=name,
            failure=life.failure,
            caused_by_us=caused,
        )
        for esc in self._escalations.rank_gone(rank):
            self._send(EscalationFinished(esc.ranks, tuple(esc.killed)))
        if exitcode != 0 and not caused:
            if self._teardown and not self._shutting_down:
                # The others would hang in their next collective: stop them.
                others = policy.teardown_targets(
                    self._live(), {r: life.stop_reason for r, life in self._life.items()}
                )
                if others:
                    self._notice(f"{policy.failure_notice(rank, exitcode)}: stopping the "
                                 "other ranks", "warning")
                self._stop(others, "teardown", signal.SIGTERM, self._info.term_timeout_s)

    def _settle(self) -> None:
        """What the monitor does after exits: restarts, the new attempt, the end."""
        restarts = [r for r, life in self._life.items() if life.after_exit == "restart"]
        settlement = policy.settle(self._states(), restarts, shutting_down=self._shutting_down,
                                   attempt_pending=self._attempt_pending)
        for r in settlement.respawn:
            self._respawn(r)
        if settlement.new_attempt:
            self._start_attempt()
        end = policy.end_of_run(
            self._states(), [r for r, life in self._life.items() if life.after_exit],
            started=self.started, finished=self._finished,
            attempt_pending=self._attempt_pending, driven=False,
            # Only failures still on record count: a failed rank restarted by hand no
            # longer is one (RunFinished would not list it either).
            real_failure=any(life.failure is not None and not life.failure.caused_by_us
                             for life in self._life.values()),
            restarts_left=self._restarts_left, shutting_down=self._shutting_down,
        )
        if end == "wait":
            return
        if end == "restart":
            self._restarts_left -= 1
            self._notice(policy.restart_notice(self._attempt + 1, self._restarts_left),
                         "warning")
            self._start_attempt()
            return
        self._finished = True
        self._send(self._run_finished())

    def _run_finished(self) -> RunFinished:
        ended = [(r, life.failure) for r, life in sorted(self._life.items()) if life.failure]
        # A rank our own signal ended did not fail: it is reported apart, as stopped.
        failures = {r: failure for r, failure in ended if not failure.caused_by_us}
        stopped = {r: failure for r, failure in ended if failure.caused_by_us}
        root = min(failures, key=lambda r: self._life[r].exit_seq, default=None)
        result = ScriptedResult(
            failures=failures,
            stopped=stopped,
            stdouts={r: i.stdout_path for r, i in self._ranks.items()},
            stderrs={r: i.stderr_path for r, i in self._ranks.items()},
        )
        return RunFinished(cast("RunProcsResult", result), self._attempt, root)

    def _respawn(self, rank: int) -> None:
        """Start one rank again, alone, into ``restart_<k>/`` of its attempt (k counts the
        restarts alone within the attempt; the restart count counts them all)."""
        self._incarnations += 1
        count = self._ranks[rank].restart_count + 1
        alone = self._alone.get(rank, 0) + 1
        self._alone[rank] = alone
        self._finished = False
        self._begin(rank, count, rank_paths(self._info.log_dir, self._attempt, rank, alone))
        self._started(rank, whole_attempt=False)

    def _start_attempt(self) -> None:
        """Every rank into a fresh ``attempt_<n+1>``."""
        self._attempt += 1
        self._attempt_pending = False
        self._finished = False
        self._incarnations += 1
        self._alone.clear()
        for r in sorted(self._ranks):
            count = self._ranks[r].restart_count + 1
            self._begin(r, count, rank_paths(self._info.log_dir, self._attempt, r, None))
        for r in sorted(self._ranks):
            self._started(r, whole_attempt=True)
        pids = tuple(self._pid(r) for r in sorted(self._ranks))
        attempt_dir = f"{self._info.log_dir}/attempt_{self._attempt}"
        self._send(AttemptStarted(self._attempt, attempt_dir, pids))

    def _begin(self, rank: int, count: int, paths: tuple[str, str, str]) -> None:
        self._life[rank] = _Life()
        out, err, error_file = paths
        self._ranks[rank] = replace(
            self._ranks[rank],
            restart_count=count,
            attempt=self._attempt,
            stdout_path=out,
            stderr_path=err,
            error_file=error_file,
        )

    def _started(self, rank: int, *, whole_attempt: bool) -> None:
        """final -> STARTING, RankRestarted, STARTING -> RUNNING: the Supervisor's order."""
        pid = self._pid(rank)
        self._ranks[rank] = replace(self._ranks[rank], pid=pid)
        self._move(rank, RankState.STARTING, t=EPOCH + 61)
        info = self._ranks[rank]
        self._send(
            RankRestarted(
                rank,
                pid,
                info.restart_count,
                info.attempt,
                whole_attempt,
                info.stdout_path,
                info.stderr_path,
                info.error_file,
            )
        )
        self._move(rank, RankState.RUNNING, t=EPOCH + 61)
        line = f"rank {rank} started again (restart {info.restart_count})"
        self._send(RankOutput(rank, "stdout", (line,)))

    def _pid(self, rank: int) -> int:
        return BASE_PID + 100 * self._incarnations + rank

    def _move(
        self,
        rank: int,
        new: RankState,
        *,
        exitcode: int | None = None,
        signal_name: str | None = None,
        failure: ScriptedFailure | None = None,
        caused_by_us: bool = False,
        t: float = EPOCH + 60,
    ) -> None:
        info = self._ranks[rank]
        if new.is_final or new is RankState.STARTING:
            # A process that ended reads nothing: its wait is over.
            for event in self._stdin.release(rank, info.attempt):
                self._track(event)
                self._send(event)
            info = self._ranks[rank]
        self._ranks[rank] = replace(info, state=new, exitcode=exitcode, signal_name=signal_name)
        self._send(
            RankStateChanged(
                rank,
                info.state,
                new,
                info.pid,
                exitcode=exitcode,
                signal_name=signal_name,
                restart_count=info.restart_count,
                attempt=info.attempt,
                failure=cast("ProcessFailure | None", failure),
                caused_by_us=caused_by_us,
                t=t,
            )
        )


def _signame(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:
        return f"signal {sig}"


def _split(script: Iterable[ScriptItem]) -> list[list[Event]]:
    steps: list[list[Event]] = [[]]
    for item in script:
        if isinstance(item, Checkpoint):
            steps.append([])
        else:
            steps[-1].append(item)
    return steps
