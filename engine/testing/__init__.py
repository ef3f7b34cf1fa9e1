"""ScriptedSupervisor: a ``SupervisorHandle`` that replays a script instead of running ranks.

The UI tests and the screenshots build the app on it (as httpx tests build a client on
``MockTransport``): pids, timestamps and output are fixed by the script, so a snapshot
never shows a real pid, path or clock time. Commands are recorded in ``calls`` and, unless
``react=False``, answered as the real ``engine.supervisor.Supervisor`` answers them: the same
``CommandResult`` (refusals word for word) and the same lifecycle events in the same order per
rank (a terminated rank goes to TERMINATING with an escalation deadline from the injected clock,
a killed rank ends SIGNALLED, a restarted rank comes back with a new pid and fresh log files,
a rank that fails on its own (``rank_exits``) brings the teardown and the restart policy).
It is not a second implementation: what happens to a run is decided by the run kernel
(``engine.kernel.run.RunKernel``), the very object the Supervisor's state is, over a fake
edge (scripted pids, a fixed clock, ranks that die of a signal at once), as an httpx client
runs over a ``MockTransport``. What is the double's own is the edge: the script, the fixed
values, the files it writes, the prompts.

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
from ..kernel.policy import Refused, not_piped
from ..kernel.run import (
    Deliver,
    Effect,
    EscalationDone,
    KillSurvivors,
    Moved,
    NewAttempt,
    Over,
    RankExited,
    RankLife,
    Respawn,
    RunKernel,
    Say,
    Scheduled,
    Tick,
    signame,
)
from ..names import refusals as words
from ..names.signals import exit_signal_name
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
class _Scripted(RankLife):
    """A scripted rank's life: the kernel's record, and what only the double keeps."""

    failure: ScriptedFailure | None = None
    stdin_closed: bool = False
    """EOF was sent (``CloseInput``): its stdin takes no more lines."""


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
        self._lock = threading.RLock()
        self._dispatch_lock = threading.RLock()
        self._queue: collections.deque[Event] = collections.deque()
        self._sinks: list[EventSink] = []
        self._ranks: dict[int, RankInfo] = {r.rank: r for r in info.ranks}
        self._life: dict[int, _Scripted] = {
            r.rank: _Scripted(r.rank, r.state, r.attempt, restart_count=r.restart_count)
            for r in info.ranks
        }
        self._kernel = RunKernel(
            self._life, max_restarts=max_restarts, term_timeout_s=info.term_timeout_s,
            kill_wait_s=0.0, teardown_on_failure=teardown_on_failure,
        )
        """The run's lifecycle (its deadlines pass at ``expire_escalations``)."""
        self._kernel.attempt = info.attempt
        self._finished = info.finished
        self._incarnations = 0
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

    @property
    def started(self) -> bool:
        """Whether ``start`` ran."""
        return self._kernel.started

    def start(self) -> None:
        """Deliver the script up to its first checkpoint (idempotent)."""
        with self._lock:
            if self.started:
                return
            self._kernel.started = True
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
                if self._kernel.shutting_down:
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
            return replace(self._info, ranks=ranks, attempt=self._kernel.attempt,
                           finished=self._finished)

    def shutdown(self, timeout_s: float | None = None) -> None:
        """Stop every live rank as the Supervisor's ``shutdown`` does; the SIGKILL deadline
        of ranks that ignore SIGTERM passes at once (nothing here waits)."""
        timeout = term_timeout(timeout_s, self._info.term_timeout_s)
        with self._lock:
            self.calls.append(("shutdown", timeout_s))
            if self._kernel.shutting_down:
                return
            self._apply(self._kernel.shut_down(timeout))
            if self.started:
                self._apply(self._kernel.expire())
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
            self._apply(self._kernel.expire())
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
            self._kernel.reported(
                event.rank, event.new, attempt=event.attempt,
                restart_count=event.restart_count, exitcode=event.exitcode,
                caused=event.caused_by_us,
            )
            if event.new is RankState.STARTING:
                life.failure, life.stdin_closed = None, False
            elif event.new.is_final:
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
            life = self._life[event.rank]
            life.restart_count, life.attempt = event.restart_count, event.attempt
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
            self._kernel.attempt = event.attempt
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
        return self._kernel.states()

    def _cmd_signal(self, cmd: SignalRanks) -> CommandResult:
        live, note = self._running(self._resolve(cmd.ranks), "signal")
        for r in live:
            self._life[r].noted(int(cmd.sig), 0, stop=False)
        for r in live:
            if cmd.sig in self._fatal:
                self._exit(r, -int(cmd.sig))
        return CommandResult(True, note)

    def _cmd_terminate(self, cmd: TerminateRanks) -> CommandResult:
        live, note = self._running(self._resolve(cmd.ranks), "terminate")
        timeout = term_timeout(cmd.timeout_s, self._info.term_timeout_s)
        self._apply(self._kernel.stop(live, "terminate", int(cmd.sig), timeout))
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
            life = self._life[rank]
            attempt = life.attempt
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
        self._apply(self._kernel.kill(live, "kill"))
        return CommandResult(True, note)

    def _cmd_restart_rank(self, cmd: RestartRank) -> CommandResult:
        (rank,) = self._resolve((cmd.rank,))
        effects, note = self._kernel.restart_rank(rank)
        self._apply(effects)  # started again once this incarnation has exited
        return CommandResult(True, note)

    def _cmd_restart_all(self, cmd: RestartAll) -> CommandResult:
        effects, note = self._kernel.restart_all()
        self._apply(effects)
        return CommandResult(True, note)

    # -- the fake edge: the kernel's effects over scripted ranks ---------------------------

    def _live(self) -> list[int]:
        return sorted(life.rank for life in self._kernel.live())

    def _apply(self, effects: list[Effect]) -> None:
        """Carry out the kernel's effects in order, as the Supervisor's edge does; a rank
        its deadline's SIGKILL ends exits once every effect of the pass was carried out (a
        real one is reaped after its SIGKILL went)."""
        doomed: set[int] = set()
        for effect in effects:
            if isinstance(effect, Moved):
                self._publish_move(effect.rank, effect.old, effect.new)
            elif isinstance(effect, Deliver):
                self._deliver(effect)
            elif isinstance(effect, Scheduled):
                esc = effect.escalation
                self._send(EscalationScheduled(esc.ranks, signame(esc.sig), esc.timeout_s,
                                               esc.deadline))
            elif isinstance(effect, KillSurvivors):
                doomed.update(effect.ranks)
            elif isinstance(effect, EscalationDone):
                esc = effect.escalation
                self._send(EscalationFinished(esc.ranks, tuple(esc.killed)))
            elif isinstance(effect, Say):
                self._notice(effect.text, effect.severity)
            elif isinstance(effect, Respawn):
                self._respawn(effect.rank)
            elif isinstance(effect, NewAttempt):
                self._start_attempt()
            elif isinstance(effect, Over):
                self._finished = True
                self._send(self._run_finished())
        for r in sorted(doomed):
            self._life[r].noted(signal.SIGKILL, 0, stop=True)
        for r in sorted(doomed):
            if self._life[r].alive:
                self._exit(r, -signal.SIGKILL)

    def _deliver(self, deliver: Deliver) -> None:
        """Every scripted rank gets the signal (none has exited unseen); a fatal one ends
        it at once."""
        for r in deliver.ranks:
            self._life[r].noted(deliver.sig, 0, stop=True)
        self._apply(self._kernel.delivered(deliver, deliver.ranks, self._clock()))
        for r in deliver.ranks:
            if deliver.sig in self._fatal and self._life[r].alive:
                self._exit(r, -deliver.sig)

    def _exit(self, rank: int, exitcode: int) -> None:
        """The rank's process ended with ``exitcode``: record it as the monitor does."""
        info, life = self._ranks[rank], self._life[rank]
        # A scripted exit has no moment of its own: it comes after every signal sent.
        caused = life.exit_is_ours(exitcode, None)
        name = exit_signal_name(exitcode)
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
        self._apply(self._kernel.step(RankExited(rank, exitcode, None, caused), self._clock()))

    def _settle(self) -> None:
        """What the monitor does after exits: restarts, the new attempt, the end (one more
        look once ranks were started, as the monitor takes)."""
        while True:
            # A scripted run's deadlines pass only at ``expire_escalations``: none is due here.
            effects = self._kernel.step(Tick(finished=self._finished), _NOTHING_DUE)
            self._apply(effects)
            if not any(isinstance(e, (Respawn, NewAttempt)) for e in effects):
                return

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
        return RunFinished(cast("RunProcsResult", result), self._kernel.attempt, root)

    def _respawn(self, rank: int) -> None:
        """Start one rank again, alone, into ``restart_<k>/`` of its attempt (k counts the
        restarts alone within the attempt; the restart count counts them all)."""
        self._incarnations += 1
        self._kernel.begin_respawn(rank)
        self._finished = False
        life = self._life[rank]
        self._begin(rank, rank_paths(self._info.log_dir, self._kernel.attempt, rank,
                                     life.incarnation))
        self._started(rank, whole_attempt=False)

    def _start_attempt(self) -> None:
        """Every rank into a fresh ``attempt_<n+1>``."""
        self._kernel.begin_attempt(first=False)
        attempt = self._kernel.attempt
        self._finished = False
        self._incarnations += 1
        for r in sorted(self._ranks):
            self._begin(r, rank_paths(self._info.log_dir, attempt, r, None))
        for r in sorted(self._ranks):
            self._started(r, whole_attempt=True)
        pids = tuple(self._pid(r) for r in sorted(self._ranks))
        self._send(AttemptStarted(attempt, f"{self._info.log_dir}/attempt_{attempt}", pids))

    def _begin(self, rank: int, paths: tuple[str, str, str]) -> None:
        life = self._life[rank]
        life.reset(self._kernel.attempt, life.incarnation)
        life.failure, life.stdin_closed = None, False
        out, err, error_file = paths
        self._ranks[rank] = replace(
            self._ranks[rank],
            restart_count=life.restart_count,
            attempt=life.attempt,
            stdout_path=out,
            stderr_path=err,
            error_file=error_file,
        )

    def _started(self, rank: int, *, whole_attempt: bool) -> None:
        """final -> STARTING, RankRestarted, STARTING -> RUNNING: the Supervisor's order."""
        pid = self._pid(rank)
        self._ranks[rank] = replace(self._ranks[rank], pid=pid)
        life = self._life[rank]
        self._publish_move(rank, life.to(RankState.STARTING), RankState.STARTING, t=EPOCH + 61)
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
        self._publish_move(rank, life.to(RankState.RUNNING), RankState.RUNNING, t=EPOCH + 61)
        line = f"rank {rank} started again (restart {info.restart_count})"
        self._send(RankOutput(rank, "stdout", (line,)))

    def _pid(self, rank: int) -> int:
        return BASE_PID + 100 * self._incarnations + rank

    def _publish_move(
        self, rank: int, old: RankState, new: RankState, *, t: float = EPOCH + 60
    ) -> None:
        """A move the kernel made: the snapshot follows it, and it is published."""
        info = self._ranks[rank]
        if new.is_final or new is RankState.STARTING:
            # A process that ended reads nothing: its wait is over.
            for event in self._stdin.release(rank, info.attempt):
                self._track(event)
                self._send(event)
            info = self._ranks[rank]
        life = self._life[rank]
        exitcode = life.exitcode if new.is_final else None
        signal_name = exit_signal_name(exitcode)
        self._ranks[rank] = replace(info, state=new, exitcode=exitcode, signal_name=signal_name)
        self._send(
            RankStateChanged(
                rank,
                old,
                new,
                info.pid,
                exitcode=exitcode,
                signal_name=signal_name,
                restart_count=info.restart_count,
                attempt=info.attempt,
                failure=cast("ProcessFailure | None", life.failure if new.is_final else None),
                caused_by_us=life.caused_by_us if new.is_final else False,
                t=t,
            )
        )


_NOTHING_DUE = float("-inf")
"""The ``now`` of a scripted pass: before every deadline."""


def _split(script: Iterable[ScriptItem]) -> list[list[Event]]:
    steps: list[list[Event]] = [[]]
    for item in script:
        if isinstance(item, Checkpoint):
            steps.append([])
        else:
            steps[-1].append(item)
    return steps
