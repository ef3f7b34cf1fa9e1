"""ScriptedSupervisor: a ``SupervisorHandle`` that replays a script instead of running ranks.

The UI tests, the screenshots and the UI benchmark build the app on it (as httpx tests build a
client on ``MockTransport``): pids, timestamps and output are fixed by the script, so a snapshot
never shows a real pid, path or clock time. Commands are recorded in ``calls`` and, unless
``react=False``, answered with the events a real supervisor would publish (a terminated rank
goes to TERMINATING with an escalation deadline from the injected clock, a killed rank ends
SIGNALLED, a restarted rank comes back with a new pid and fresh log files).

Threads: events are delivered synchronously on the thread that calls ``start``, ``advance``,
``emit``, ``execute`` or ``shutdown`` (the UI calls commands from worker threads, as it would
with the real Supervisor). A lock keeps the bookkeeping consistent.

Also here: small scenario builders (``scripted_info``, ``running_script``, ...) shared by
tests, screenshots and benchmarks. When a scenario is given a directory, everything it emits
is also written to the rank's log files, so views that read the disk (zoomed scrollback,
filtered logs, error.json) see the same bytes.
"""

from __future__ import annotations

import json
import os
import signal
import threading
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Sequence, Union, cast

from engine.events import (
    AttemptStarted,
    EscalationFinished,
    EscalationScheduled,
    Event,
    EventSink,
    RankOutput,
    RankRestarted,
    RankStateChanged,
    RankStats,
    RunFinished,
    SupervisorNotice,
)
from engine.handle import (
    Command,
    CommandResult,
    KillRanks,
    RankInfo,
    RestartAll,
    RestartRank,
    RunInfo,
    SignalRanks,
    TerminateRanks,
)
from engine.states import RankState

if TYPE_CHECKING:
    # ScriptedFailure / ScriptedResult stand in for these in the events (duck-typed).
    from engine.errors import ProcessFailure
    from engine.pcontext import RunProcsResult

__all__ = [
    "Checkpoint",
    "ScriptItem",
    "ScriptedFailure",
    "ScriptedResult",
    "ScriptedSupervisor",
    "failure_script",
    "running_script",
    "scripted_info",
    "training_lines",
]

BASE_PID = 41000
"""Scripted pids are BASE_PID + 100 * incarnation + rank: fixed, and plainly not real."""

T0 = 1_767_225_600.0
"""Scripted wall-clock origin (2026-01-01 00:00:00 UTC)."""

_DEADLY = {signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGKILL}


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """A pause in the script: ``start`` stops here, ``advance`` goes on to the next one."""

    label: str = ""


ScriptItem = Union[Event, Checkpoint]


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
    """The fields of ``RunProcsResult`` the UI reads."""

    return_values: dict[int, Any] = field(default_factory=dict)
    failures: dict[int, Any] = field(default_factory=dict)
    stdouts: dict[int, str] = field(default_factory=dict)
    stderrs: dict[int, str] = field(default_factory=dict)

    def is_failed(self) -> bool:
        return bool(self.failures)


class ScriptedSupervisor:
    """Replays ``script`` to its subscribers and records the commands it is given.

    Args:
        info: The run as ``snapshot()`` first reports it (ranks, paths, term timeout).
        script: Events to deliver, split into steps by ``Checkpoint`` markers.
        clock: The monotonic clock escalation deadlines are computed from (inject a fixed
            one in snapshot tests; the app must be given the same).
        react: Answer commands with the events a real supervisor would publish.
        obey_term: Ranks exit as soon as they are terminated; if False (the default) they
            linger in TERMINATING until ``expire_escalations()`` SIGKILLs them, so a test can
            see the countdown.
        write_files: Append emitted output to the ranks' log files (paths from ``info``).
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
    ) -> None:
        self._info = info
        self._steps = _split(script)
        self._step = 0
        self._clock = clock or (lambda: 1000.0)
        self._react = react
        self._obey_term = obey_term
        self._write_files = write_files
        self._lock = threading.RLock()
        self._sinks: list[EventSink] = []
        self._ranks: dict[int, RankInfo] = {r.rank: r for r in info.ranks}
        self._attempt = info.attempt
        self._finished = info.finished
        self._incarnations = 0
        self._escalating: set[int] = set()
        self._line_counts: dict[tuple[int, str], int] = {}
        self.started = False
        self.calls: list[Command | tuple[str, float | None]] = []
        """Every command given to ``execute``, and ``("shutdown", timeout)``, in order."""
        self.emitted: list[Event] = []

    # -- SupervisorHandle ------------------------------------------------------------------

    def subscribe(self, sink: EventSink) -> Callable[[], None]:
        with self._lock:
            self._sinks.append(sink)

        def unsubscribe() -> None:
            with self._lock:
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
        with self._lock:
            self.calls.append(command)
            if not self._react:
                return CommandResult(True)
            try:
                events, result = self._react_to(command)
            except _Refused as refused:
                return CommandResult(False, str(refused))
        self.emit(*events)
        return result

    def snapshot(self) -> RunInfo:
        with self._lock:
            ranks = tuple(self._ranks[r] for r in sorted(self._ranks))
            return replace(self._info, ranks=ranks, attempt=self._attempt, finished=self._finished)

    def shutdown(self, timeout_s: float | None = None) -> None:
        with self._lock:
            self.calls.append(("shutdown", timeout_s))
            alive = [r for r, info in sorted(self._ranks.items()) if info.state.is_alive]
            events: list[Event] = [
                self._final(r, -signal.SIGTERM, caused_by_us=True) for r in alive
            ]
            if alive and not self._finished:
                events.append(self._run_finished())
        self.emit(*events)

    # -- test helpers ----------------------------------------------------------------------

    def emit(self, *events: Event) -> None:
        """Deliver ``events`` now, in order, updating what ``snapshot()`` reports."""
        for event in events:
            with self._lock:
                self._track(event)
                self.emitted.append(event)
                sinks = list(self._sinks)
            for sink in sinks:
                sink(event)

    def expire_escalations(self) -> None:
        """The escalation deadline passed: SIGKILL every rank still terminating."""
        with self._lock:
            ranks = sorted(self._escalating)
            self._escalating.clear()
            events: list[Event] = [
                self._final(r, -signal.SIGKILL, caused_by_us=True)
                for r in ranks
                if self._ranks[r].state.is_alive
            ]
            if ranks:
                events.append(EscalationFinished(tuple(ranks), tuple(ranks)))
            events.extend(self._maybe_finished(events))
        self.emit(*events)

    # -- internals -------------------------------------------------------------------------

    def _track(self, event: Event) -> None:
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

    def _alive(self, ranks: Sequence[int] | None) -> list[int]:
        chosen = sorted(self._ranks) if ranks is None else list(ranks)
        for r in chosen:
            if r not in self._ranks:
                raise _Refused(f"no rank {r} (this run has ranks 0-{len(self._ranks) - 1})")
        return [r for r in chosen if self._ranks[r].state.is_alive]

    def _react_to(self, command: Command) -> tuple[list[Event], CommandResult]:
        events: list[Event] = []
        if isinstance(command, SignalRanks):
            alive = self._alive(command.ranks)
            if not alive:
                raise _Refused(f"rank {_ranks_words(command.ranks)} is not running")
            if command.sig in _DEADLY:
                events += [self._final(r, -command.sig, caused_by_us=True) for r in alive]
                events += self._maybe_finished(events)
            return events, CommandResult(True, f"sent {signal.Signals(command.sig).name}")
        if isinstance(command, TerminateRanks):
            alive = self._alive(command.ranks)
            if not alive:
                raise _Refused("no running rank to terminate")
            timeout = self._info.term_timeout_s if command.timeout_s is None else command.timeout_s
            name = signal.Signals(command.sig).name
            if self._obey_term:
                events += [self._final(r, -command.sig, caused_by_us=True) for r in alive]
                events.append(EscalationFinished(tuple(alive), ()))
                events += self._maybe_finished(events)
            else:
                events += [self._move(r, RankState.TERMINATING) for r in alive]
                events.append(
                    EscalationScheduled(tuple(alive), name, timeout, self._clock() + timeout)
                )
                self._escalating.update(alive)
            return events, CommandResult(True)
        if isinstance(command, KillRanks):
            alive = self._alive(command.ranks)
            if not alive:
                raise _Refused("no running rank to kill")
            events += [self._final(r, -signal.SIGKILL, caused_by_us=True) for r in alive]
            events += self._maybe_finished(events)
            return events, CommandResult(True)
        if isinstance(command, RestartRank):
            self._alive((command.rank,))
            info = self._ranks[command.rank]
            if info.state is RankState.RESTARTING:
                raise _Refused(f"rank {command.rank} is already restarting")
            message = ""
            if not info.state.is_alive:
                # As the Supervisor: nothing to stop, start it again at once and say so.
                message = (
                    f"rank {command.rank} had exited ({info.state.value}): starting it again"
                )
            events += self._restart(command.rank, whole_attempt=False)
            self._finished = False  # the run goes on (the Supervisor's snapshot agrees)
            return events, CommandResult(True, message)
        if isinstance(command, RestartAll):
            for r in sorted(self._ranks):
                if self._ranks[r].state.is_alive:
                    events.append(self._move(r, RankState.RESTARTING))
                    events.append(self._final(r, -signal.SIGTERM, caused_by_us=True))
            self._attempt += 1
            self._incarnations += 1
            pids = tuple(self._pid(r) for r in sorted(self._ranks))
            run_dir = self._info.log_dir
            events.append(AttemptStarted(self._attempt, f"{run_dir}/attempt_{self._attempt}", pids))
            for r in sorted(self._ranks):
                events += self._restart(r, whole_attempt=True, new_incarnation=False)
            return events, CommandResult(True)
        raise _Refused(f"unknown command {command!r}")  # pragma: no cover

    def _pid(self, rank: int) -> int:
        return BASE_PID + 100 * self._incarnations + rank

    def _move(self, rank: int, new: RankState) -> RankStateChanged:
        info = self._ranks[rank]
        event = RankStateChanged(
            rank,
            info.state,
            new,
            info.pid,
            restart_count=info.restart_count,
            attempt=info.attempt,
            t=T0 + 60,
        )
        self._track(event)
        return event

    def _final(self, rank: int, exitcode: int, *, caused_by_us: bool) -> RankStateChanged:
        info = self._ranks[rank]
        self._escalating.discard(rank)
        new = (
            RankState.SIGNALLED
            if exitcode < 0
            else (RankState.SUCCEEDED if exitcode == 0 else RankState.FAILED)
        )
        name = signal.Signals(-exitcode).name if exitcode < 0 else None
        failure = None
        if new is not RankState.SUCCEEDED:
            failure = ScriptedFailure(
                rank,
                info.pid or 0,
                exitcode,
                info.error_file,
                message=f"Signal {-exitcode} ({name}) received by PID {info.pid}" if name else "",
                timestamp=int(T0 + 60),
            )
        event = RankStateChanged(
            rank,
            info.state,
            new,
            info.pid,
            exitcode=exitcode,
            signal_name=name,
            restart_count=info.restart_count,
            attempt=info.attempt,
            failure=cast("ProcessFailure | None", failure),
            caused_by_us=caused_by_us,
            t=T0 + 60,
        )
        self._track(event)
        return event

    def _maybe_finished(self, events: list[Event]) -> list[Event]:
        if self._finished or any(info.state.is_alive for info in self._ranks.values()):
            return []
        return [self._run_finished()]

    def _run_finished(self) -> RunFinished:
        failures = {
            r: ScriptedFailure(r, info.pid or 0, info.exitcode or 0, info.error_file)
            for r, info in self._ranks.items()
            if info.state in (RankState.FAILED, RankState.SIGNALLED)
        }
        event = RunFinished(
            cast("RunProcsResult", ScriptedResult(failures=failures)), self._attempt, None
        )
        self._track(event)
        return event

    def _restart(
        self, rank: int, *, whole_attempt: bool, new_incarnation: bool = True
    ) -> list[Event]:
        events: list[Event] = []
        info = self._ranks[rank]
        if info.state.is_alive:
            events.append(self._move(rank, RankState.RESTARTING))
            events.append(self._final(rank, -signal.SIGTERM, caused_by_us=True))
        if new_incarnation:
            self._incarnations += 1
        count = info.restart_count + 1
        pid = self._pid(rank)
        paths = _paths(self._info.log_dir, self._attempt, rank, None if whole_attempt else count)
        # The Supervisor's order: final -> STARTING, then RankRestarted, then RUNNING.
        info = self._ranks[rank]
        starting = RankStateChanged(
            rank,
            info.state,
            RankState.STARTING,
            pid,
            restart_count=count,
            attempt=self._attempt,
            t=T0 + 61,
        )
        self._track(starting)
        events.append(starting)
        restarted = RankRestarted(rank, pid, count, self._attempt, whole_attempt, *paths)
        self._track(restarted)
        events.append(restarted)
        events.append(self._move(rank, RankState.RUNNING))
        events.append(RankOutput(rank, "stdout", (f"rank {rank} started again (restart {count})",)))
        return events


class _Refused(Exception):
    """A command the scripted supervisor answers with ``CommandResult(False, ...)``."""


def _ranks_words(ranks: Sequence[int]) -> str:
    return ", ".join(str(r) for r in ranks)


def _split(script: Iterable[ScriptItem]) -> list[list[Event]]:
    steps: list[list[Event]] = [[]]
    for item in script:
        if isinstance(item, Checkpoint):
            steps.append([])
        else:
            steps[-1].append(item)
    return steps


def _paths(run_dir: str, attempt: int, rank: int, restart: int | None) -> tuple[str, str, str]:
    base = f"{run_dir}/attempt_{attempt}/{rank}"
    if restart:
        base += f"/restart_{restart}"
    return f"{base}/stdout.log", f"{base}/stderr.log", f"{base}/error.json"


# -- scenarios -------------------------------------------------------------------------------


def scripted_info(
    nprocs: int = 4,
    *,
    run_dir: str | os.PathLike[str] = "/nonexistent/rankvisor/run_0",
    name: str = "trainer",
    run_id: str = "demo-1",
    term_timeout_s: float = 30.0,
    stdout_filters: tuple[str, ...] = ("epoch",),
    stderr_filters: tuple[str, ...] = ("WARNING",),
) -> RunInfo:
    """A run of ``nprocs`` ranks, all STARTING, with their files under ``run_dir``."""
    run_dir = str(run_dir)
    ranks = tuple(
        RankInfo(r, RankState.STARTING, BASE_PID + r, 0, 0, *_paths(run_dir, 0, r, None))
        for r in range(nprocs)
    )
    return RunInfo(
        name=name,
        nprocs=nprocs,
        run_id=run_id,
        log_dir=run_dir,
        attempt=0,
        term_timeout_s=term_timeout_s,
        command=("python", "train.py", "--epochs", "3"),
        filtered_stdout_path=f"{run_dir}/attempt_0/filtered_stdout.log" if stdout_filters else "",
        filtered_stderr_path=f"{run_dir}/attempt_0/filtered_stderr.log" if stderr_filters else "",
        stdout_filters=stdout_filters,
        stderr_filters=stderr_filters,
        log_line_prefixes={r: f"[{name}{r}]:" for r in range(nprocs)},
        ranks=ranks,
    )


def training_lines(rank: int, steps: int, *, start: int = 0) -> Iterator[str]:
    """Deterministic training-log lines, with ANSI colour and markup-like text in them."""
    for step in range(start, start + steps):
        loss = 2.5 / (1 + 0.05 * step) + 0.01 * rank
        if step % 10 == 0:
            yield f"\x1b[36mepoch {step // 10}\x1b[0m starting, lr=3.0e-04"
        yield f"step {step:5d} | loss {loss:.4f} | \x1b[32m{412 - rank:d} samples/s\x1b[0m"


def _stats(rank: int, cpu: Sequence[float], rss: int, numa: int | None = 0) -> list[Event]:
    return [
        RankStats(
            rank,
            BASE_PID + rank,
            "running",
            value,
            rss,
            12,
            2,
            (rank,),
            rank,
            numa,
            10.0 + i,
            T0 + i,
        )
        for i, value in enumerate(cpu)
    ]


def running_script(
    nprocs: int = 4, *, steps: int = 40, with_stats: bool = True
) -> list[ScriptItem]:
    """Every rank starts, runs and logs; rank 0 draws a progress bar; nothing ends."""
    items: list[ScriptItem] = []
    for r in range(nprocs):
        items.append(RankStateChanged(r, RankState.STARTING, RankState.RUNNING, BASE_PID + r, t=T0))
    for r in range(nprocs):
        lines = list(training_lines(r, steps - (r % 3)))
        if r == 1:
            lines.insert(3, "[rank1]: [bold]x[/bold] [link=http://a]b[/link] is log text")
        items.append(RankOutput(r, "stdout", tuple(lines)))
        # The duplicate filters ("epoch" on stdout, "WARNING" on stderr) copy lines, prefixed.
        epochs = tuple(f"[trainer{r}]:{line}" for line in lines if "epoch" in line)
        items.append(RankOutput(r, "filtered_stdout", epochs))
        if r % 2 == 1:
            warning = f"UserWarning: rank {r}: WARNING grad norm 1e4 clipped (step 17)"
            items.append(RankOutput(r, "stderr", (warning,)))
            items.append(RankOutput(r, "filtered_stderr", (f"[trainer{r}]:{warning}",)))
    items.append(RankOutput(0, "stdout", (), partial=" 62%|██████▏   | 62/100 [00:31<00:19]"))
    if with_stats:
        for r in range(nprocs):
            shape = [40 + ((r * 7 + i * 13) % 60) for i in range(24)]
            items.extend(
                _stats(r, shape, (900 + 37 * r) * 1024 * 1024, numa=r * 2 // max(1, nprocs))
            )
    return items


TRACEBACK = """Traceback (most recent call last):
  File "/job/train.py", line 88, in <module>
    main()
  File "/opt/venv/lib/python3.11/site-packages/torch/distributed/elastic/multiprocessing/\
errors/__init__.py", line 357, in wrapper
    return f(*args, **kwargs)
  File "/job/train.py", line 81, in main
    loss = train_step(model, batch, step)
  File "/job/train.py", line 52, in train_step
    raise FloatingPointError(f"loss is nan at step {step} [rank{rank}]")
FloatingPointError: loss is nan at step 23 [rank2]"""


def failure_script(run_dir: str | os.PathLike[str] | None = None) -> list[ScriptItem]:
    """4 ranks: rank 2 raises through ``@record`` (error.json), ranks 0 and 1 then fail on a
    broken collective without error.json, rank 3 keeps running.

    With ``run_dir`` the error.json of rank 2 is written there (as the real rank would)."""
    items = running_script(4, steps=24)
    info = scripted_info(4, run_dir=run_dir or "/nonexistent/rankvisor/run_0")
    error_file = info.ranks[2].error_file
    data: dict[str, Any] = {
        "message": {
            "message": "FloatingPointError: loss is nan at step 23 [rank2]",
            "extraInfo": {"py_callstack": TRACEBACK, "timestamp": str(int(T0 + 42))},
        }
    }
    if run_dir is not None:
        Path(error_file).parent.mkdir(parents=True, exist_ok=True)
        Path(error_file).write_text(json.dumps(data))
    root = ScriptedFailure(
        2, BASE_PID + 2, 1, error_file, data, data["message"]["message"], int(T0 + 42)
    )
    items += [
        RankOutput(2, "stderr", tuple(TRACEBACK.splitlines())),
        RankStateChanged(
            2,
            RankState.RUNNING,
            RankState.FAILED,
            BASE_PID + 2,
            exitcode=1,
            failure=cast("ProcessFailure", root),
            t=T0 + 42,
        ),
    ]
    collective = (
        "Traceback (most recent call last):",
        '  File "/job/train.py", line 49, in train_step',
        "    dist.all_reduce(grads)",
        "RuntimeError: [gloo/transport/tcp/pair.cc:534] Connection closed by peer [10.0.0.2]:29500",
    )
    for r, delay in ((0, 1), (1, 2)):
        failure = ScriptedFailure(
            r, BASE_PID + r, 1, info.ranks[r].error_file, {}, "", int(T0 + 42 + delay)
        )
        items += [
            RankOutput(r, "stderr", collective),
            RankStateChanged(
                r,
                RankState.RUNNING,
                RankState.FAILED,
                BASE_PID + r,
                exitcode=1,
                failure=cast("ProcessFailure", failure),
                t=T0 + 42 + delay,
            ),
        ]
    items.append(
        SupervisorNotice("rank 2 failed (exit 1): FloatingPointError: loss is nan", "error")
    )
    return items
