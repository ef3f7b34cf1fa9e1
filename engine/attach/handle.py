"""``TorchrunHandle``: a torchrun job that rankvisor did not start, behind ``SupervisorHandle``.

What it can do is bounded by whose processes they are. torchrun's agent is their parent:
it reaps them, restarts the group (a new ``attempt_<n>``), and decides when the job is
over. This handle watches and signals, never owns:

* output: the workers' log files, tailed by the engine's ``OutputPump`` (which also writes
  the arrival index the zoomed view merges stdout and stderr by);
* exits: a pidfd per worker becomes readable when it exits; the exit status is read from
  /proc while the worker is still a zombie (its wait status is field 52 of its stat), and
  once the agent has reaped it, from the pidfd (``engine.process.pidfd_exit``, Linux 6.15
  and later; under load the agent's 0.1 s poll can reap first). Where neither tells it, the
  rank is reported with "exit status unknown (not our child)", unless its error.json says
  it raised;
* a new attempt: the agent's children are looked at every ``poll_interval`` seconds;
* signals go through pidfds to the worker and its descendants (``engine.process``), and a
  terminate escalates to SIGKILL after its timeout (``engine.kernel.escalation``); as
  under rankvisor's own supervisor, the stacks of the workers still alive are saved under
  the job's log dir just before that SIGKILL (``stack_on_kill``);
* restarts are refused: torchrun owns them (``--max-restarts``).

Threads: one watcher thread (exits, escalations, new attempts), the pump thread, the stats
thread. Every event goes out under one lock, so a ``watch`` that replays history and output
to a new sink cannot interleave with a live event.
"""

from __future__ import annotations

import logging
import os
import select
import signal
import threading
import time
from dataclasses import dataclass, field, replace
from typing import Callable

from .. import clock
from ..errors import ProcessFailure, root_cause_rank
from ..events import (
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
from ..forensics.collectives_run import ask_workers
from ..handle import (
    DEFAULT_TERM_TIMEOUT_S,
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
    term_timeout,
)
from ..kernel.escalation import EscalationTable
from ..names import refusals as words
from ..names.signals import exit_signal_name, signal_name
from ..output.pump import OutputPump, StdStream
from ..output.text_batch import Batch
from ..process.pidfd_exit import reaped_exit_status
from ..process.proc_table import (
    find_descendants,
    read_entry,
    signal_checked,
    started_wall,
    stat_fields,
)
from ..process.wakeup import Wakeup
from ..result import RunProcsResult
from ..rundir.arrival import arrival_path
from ..states import RankState, final_state_for
from ..supervisor.stack_capture import CaptureSchedule, StackCapture
from ..supervisor.stats import StatsSampler
from .discovery import TorchrunJob, Worker, discover, workers_of
from .first_domino import first_domino

__all__ = ["INPUT_REFUSED", "RESTART_REFUSED", "UNKNOWN_EXIT", "TorchrunHandle"]

logger = logging.getLogger(__name__)

INPUT_REFUSED = (
    "not sent: torchrun started these workers and holds their stdin (they read its "
    "terminal); only a run rankvisor started with --stdin pipe can be typed to"
)
"""Why a torchrun job's workers cannot be sent a line."""

RESTART_REFUSED = (
    "torchrun owns these processes: restart them through torchrun (--max-restarts), "
    "or stop the job and start it again"
)
UNKNOWN_EXIT = "exit status unknown (not our child)"
_VERBS = {SignalRanks: "signal", TerminateRanks: "terminate", KillRanks: "kill"}
"""What a refusal says a command would have done (``engine.names.refusals``)."""


@dataclass(slots=True)
class _Rank:
    """What is known of one local rank of the current attempt."""

    worker: Worker
    state: RankState = RankState.RUNNING
    pidfd: int | None = None
    exitcode: int | None = None
    failure: ProcessFailure | None = None
    caused_by_us: bool = False
    stopping_with: int | None = None
    """The signal we sent to stop it (terminate/kill), if any."""
    signals: list[int] = field(default_factory=list)

    def info(self) -> RankInfo:
        w = self.worker
        return RankInfo(
            rank=w.local_rank,
            state=self.state,
            pid=w.pid,
            restart_count=w.restart_count,
            attempt=w.restart_count,
            stdout_path=w.stdout_path,
            stderr_path=w.stderr_path,
            error_file=w.error_file,
            exitcode=self.exitcode,
            signal_name=exit_signal_name(self.exitcode),
        )


def _open_pidfd(w: Worker) -> int | None:
    """A pidfd for ``w`` if it is still that process (start time checked after opening)."""
    try:
        fd = os.pidfd_open(w.pid)
    except OSError:
        return None
    entry = read_entry(w.pid)
    if entry is None or entry.starttime != w.starttime:
        os.close(fd)
        return None
    return fd


def _is_live(w: Worker) -> bool:
    """``w`` still runs (not gone, not a zombie, not a recycled pid)."""
    fields = stat_fields(w.pid)
    if fields is None or fields[0] in (b"Z", b"X"):
        return False
    try:
        return int(fields[19]) == w.starttime
    except (ValueError, IndexError):
        return False


def _zombie_status(w: Worker) -> int | None:
    """The exit code of ``w`` (negative: its signal) while it is a zombie, else None."""
    fields = stat_fields(w.pid)
    # stat_fields()[n - 3] is field n: 22 is starttime, 52 the wait status (Linux >= 3.5).
    if fields is None or len(fields) < 50 or fields[0] != b"Z":
        return None
    try:
        if int(fields[19]) != w.starttime:
            return None
        status = int(fields[49])
    except ValueError:
        return None
    if os.WIFSIGNALED(status):
        return -os.WTERMSIG(status)
    if os.WIFEXITED(status):
        return os.WEXITSTATUS(status)
    return None


_REAP_WAIT_S = 0.05
"""How long a worker that is neither a zombie nor reaped yet (its exit under way) is waited
for before its status is called unknown."""


def _reaped_status(pidfd: int) -> int | None:
    """The exit code the kernel kept with ``pidfd`` once the agent reaped the worker."""
    deadline = clock.monotonic() + _REAP_WAIT_S
    while True:
        code = reaped_exit_status(pidfd)
        if code is not None or clock.monotonic() >= deadline:
            return code
        time.sleep(0.005)


class TorchrunHandle:
    """Watch and signal the workers of a running torchrun agent; see the module docstring.

    Args:
        job: what discovery found (``TorchrunHandle.attach`` finds it for you).
        term_timeout_s: SIGKILL follows a terminate after this long by default.
        poll_interval: seconds between looks for a new attempt's workers.
        sample_interval: seconds between stats samples.
        use_inotify: pump wake-ups by inotify (False: poll the files).
        stack_on_kill: save the stacks of workers a terminate is about to SIGKILL.
    """

    def __init__(
        self,
        job: TorchrunJob,
        *,
        term_timeout_s: float = DEFAULT_TERM_TIMEOUT_S,
        poll_interval: float = 0.2,
        sample_interval: float = 1.0,
        kill_wait_s: float = 5.0,
        use_inotify: bool = True,
        stack_on_kill: bool = True,
    ) -> None:
        self.job = job
        self._term_timeout = term_timeout_s
        self._poll = poll_interval
        self._lock = threading.RLock()
        self._sinks: list[EventSink] = []
        self._history: list[Event] = []
        """Every lifecycle event so far (not output, not stats): replayed by ``watch``."""
        self._lines: dict[tuple[int, str], tuple[str, int, int]] = {}
        """(rank, stream) -> (path, attempt, lines delivered) for ``watch`` to replay."""
        self._ranks: dict[int, _Rank] = {w.local_rank: _Rank(w) for w in job.workers}
        self._attempt = job.attempt
        self._esc = EscalationTable(kill_wait_s)
        self._captures = CaptureSchedule() if stack_on_kill else None
        self._finished: RunFinished | None = None
        self._agent_fd: int | None = None
        try:
            fd = os.pidfd_open(job.agent_pid)
            entry = read_entry(job.agent_pid)
            if entry is None or entry.starttime != job.agent_starttime:
                os.close(fd)
            else:
                self._agent_fd = fd
        except OSError:
            pass
        for r in self._ranks.values():
            r.pidfd = _open_pidfd(r.worker)
        self._pump = OutputPump(self._on_output, use_inotify=use_inotify, name="attach-pump")
        self._sampler = StatsSampler(self._on_stats, interval=sample_interval)
        self._initial = self._info_locked()
        self._stacks = StackCapture(lambda: self._initial.log_dir, self._notice)
        self._wakeup = Wakeup()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._started = False
        self._closed = False
        self._done = threading.Event()
        self._agent_exited = False
        self._to_follow: list[tuple[int, StdStream, str, int, str]] = []

    @classmethod
    def attach(cls, target: str, **kwargs: object) -> TorchrunHandle:
        """Find the job ``target`` names (agent pid, worker pid or log dir) and watch it.

        Raises:
            AttachError: one line saying why there is nothing to attach to.
        """
        return cls(discover(target), **kwargs)  # type: ignore[arg-type]

    # -- SupervisorHandle ------------------------------------------------------------------

    restarts_refused: str = RESTART_REFUSED
    """Why restarts are refused whatever the state: a viewer does not offer them."""

    @property
    def detachable(self) -> bool:
        """True: torchrun owns the job; quitting the viewer leaves it running."""
        return True

    def subscribe(self, sink: EventSink) -> Callable[[], None]:
        """Add a sink for every later event (lines already delivered are not repeated)."""
        with self._lock:
            self._sinks.append(sink)
        return lambda: self._remove(sink)

    def watch(self, sink: EventSink) -> tuple[RunInfo, Callable[[], None]]:
        """The run as attached, then (to ``sink``, before any live event) every lifecycle
        event since, then each rank's lines delivered so far, then live events; starts
        watching if not yet started."""
        with self._lock:
            info = self._initial
            for event in self._history:
                sink(event)
            self._replay_output(sink)
            self._sinks.append(sink)
        self.start()
        return info, lambda: self._remove(sink)

    def start(self) -> None:
        """Start tailing, sampling and watching (idempotent). The job itself runs already."""
        with self._lock:
            if self._started or self._closed:
                return
            self._started = True
            for r in self._ranks.values():
                self._follow(r.worker)
                if r.state.is_alive:
                    self._sampler.track(r.worker.local_rank, r.worker.pid)
        self._add_followed()
        self._pump.start()
        self._sampler.start()
        self._thread = threading.Thread(target=self._watch_loop, name="attach-watch", daemon=True)
        self._thread.start()

    def execute(self, command: Command) -> CommandResult:
        """Signal, terminate (with escalation) or kill workers; restarts and input are refused."""
        problem = command_problem(command)
        if problem is not None:
            return CommandResult(False, problem)
        if isinstance(command, (RestartRank, RestartAll)):
            self._notice(f"restart refused: {RESTART_REFUSED}", "warning")
            return CommandResult(False, RESTART_REFUSED)
        if isinstance(command, (SendInput, CloseInput)):
            return CommandResult(False, INPUT_REFUSED)
        if isinstance(command, DumpStacks):
            return self._dump(command)
        if isinstance(command, ReadCollectives):
            return self._read_collectives()
        with self._lock:
            wanted = self._wanted(command.ranks)
            if isinstance(wanted, CommandResult):
                return wanted
            alive = [r for r in wanted if self._ranks[r].state.is_alive]
            if not alive:
                return CommandResult(False, words.no_running_rank(_VERBS[type(command)]))
            if isinstance(command, SignalRanks):
                sent = [r for r in alive if self._signal(r, command.sig)]
                return self._sent(sent, command.sig, alive)
            sig = signal.SIGKILL if isinstance(command, KillRanks) else command.sig
            sent = []
            for r in alive:
                rank = self._ranks[r]
                rank.stopping_with = int(sig)
                if self._signal(r, sig):
                    sent.append(r)
                    old = rank.state
                    if old is not RankState.TERMINATING:
                        # RUNNING -> TERMINATING: a death signal was sent by us
                        rank.state = RankState.TERMINATING
                        self._emit(self._state_event(rank, old))
            if not sent:
                return CommandResult(False, words.exited_before_signal(alive))
            if isinstance(command, TerminateRanks) and sig != signal.SIGKILL:
                timeout = term_timeout(command.timeout_s, self._term_timeout)
                now = clock.monotonic()
                esc = self._esc.add(tuple(sent), int(sig), float(timeout), now)
                if self._captures is not None:
                    self._captures.add(esc, now, "terminate")
                self._emit(
                    EscalationScheduled(tuple(sent), signal_name(sig), timeout, esc.deadline)
                )
                self._poke()
            return self._sent(sent, sig, alive)

    def _wanted(self, ranks: tuple[int, ...] | None) -> tuple[int, ...] | CommandResult:
        """The ranks a command names (None: the live ones), or its refusal naming a rank
        this job does not have. Call with the lock held."""
        if ranks is None:
            return tuple(r for r, x in sorted(self._ranks.items()) if x.state.is_alive)
        unknown = [r for r in ranks if r not in self._ranks]
        if unknown:
            return CommandResult(
                False, words.no_such_rank(unknown, min(self._ranks), max(self._ranks)))
        return ranks

    def _dump(self, command: DumpStacks) -> CommandResult:
        """Dump the workers' stacks (py-spy), saved under the job's run directory.

        torchrun's agent, not rankvisor, is the workers' parent: under Yama ptrace_scope=1
        this works only as root (the error line says so).
        """
        with self._lock:
            wanted = self._wanted(command.ranks)
            if isinstance(wanted, CommandResult):
                return wanted
            targets = {r: self._ranks[r].worker.pid for r in wanted
                       if self._ranks[r].state.is_alive}
        if not targets:
            return CommandResult(False, words.no_running_rank("dump"))
        dump = self._stacks.dump(targets, native=command.native,
                                 nonblocking=command.nonblocking)
        if not dump.captured:
            first = next((f"rank {r.rank}: {r.error}" for r in dump.ranks if r.error), "")
            return CommandResult(False, f"no stack dumped: {dump.problem or first}",
                                 dump.to_dict())
        return CommandResult(True, "", dump.to_dict())

    def _read_collectives(self) -> CommandResult:
        """Ask the workers' own worker servers (torchrun starts none: only a script under
        ``worker_main()`` with ``TORCH_WORKER_SERVER_SOCKET`` set serves one)."""
        with self._lock:
            pids = {r: x.worker.pid for r, x in sorted(self._ranks.items())
                    if x.state.is_alive}
        if not pids:
            return CommandResult(False, words.no_running_rank("ask"))
        data = ask_workers(pids)
        if data is None:
            return CommandResult(False, f"no collectives: {words.NO_WORKER_SERVER}")
        return CommandResult(True, "", data)

    def snapshot(self) -> RunInfo:
        """The job and every rank of its current attempt as known now."""
        with self._lock:
            return self._info_locked()

    def shutdown(self, timeout_s: float | None = None) -> None:
        """Detach: quitting the viewer never stops a torchrun job (torchrun owns it).

        To end the job, terminate its ranks (torchrun then stops the rest) or signal the
        agent itself; ``timeout_s`` is accepted for the protocol and unused.
        """
        self.detach()

    def detach(self) -> None:
        """Stop watching: every sink removed, threads and pidfds released; no rank touched."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._sinks.clear()
        self._stop.set()
        self._poke()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
        self._stacks.join(timeout_s=2.0)  # a capture in flight ends before its SIGKILL anyway
        self._sampler.stop()
        self._pump.stop()
        with self._lock:
            for r in self._ranks.values():
                if r.pidfd is not None:
                    os.close(r.pidfd)
                    r.pidfd = None
            if self._agent_fd is not None:
                os.close(self._agent_fd)
                self._agent_fd = None
        self._wakeup.close()

    # -- more than the protocol ------------------------------------------------------------

    @property
    def finished(self) -> RunFinished | None:
        """The job's outcome once its agent exited, else None."""
        return self._finished

    @property
    def attempt(self) -> int:
        return self._attempt

    def wait(self, timeout_s: float | None = None) -> RunFinished | None:
        """Wait until the agent has exited (or ``timeout_s``); the outcome, or None."""
        self._done.wait(timeout_s)
        return self._finished

    # -- internals -------------------------------------------------------------------------

    def _remove(self, sink: EventSink) -> None:
        with self._lock:
            if sink in self._sinks:
                self._sinks.remove(sink)

    def _emit(self, event: Event) -> None:
        with self._lock:
            if not isinstance(event, (RankOutput, RankStats)):
                self._history.append(event)
            for sink in list(self._sinks):
                try:
                    sink(event)
                except Exception:  # one bad sink must not silence the others
                    logger.exception("event sink failed")

    def _notice(self, message: str, severity: str = "information") -> None:
        self._emit(SupervisorNotice(message, severity))  # type: ignore[arg-type]

    def _poke(self) -> None:
        self._wakeup.wake()

    def _sent(self, ranks: list[int], sig: int, alive: list[int]) -> CommandResult:
        if not ranks:
            return CommandResult(False, words.exited_before_signal(alive))
        names = ", ".join(map(str, ranks))
        return CommandResult(True, f"{signal_name(sig)} sent to rank(s) {names}")

    def _signal(self, r: int, sig: int) -> bool:
        """Send ``sig`` to rank ``r``'s worker and its descendants, each checked by start
        time through a pidfd, so a recycled pid is never hit."""
        w = self._ranks[r].worker
        top = read_entry(w.pid)
        if top is None or top.starttime != w.starttime:
            return False
        # Descendants first: once the worker dies they are re-parented and lost to us.
        entries = [top, *find_descendants(w.pid, top)]
        if signal_checked(entries[:1], sig) == 0:
            return False
        signal_checked(entries[1:], sig)
        self._ranks[r].signals.append(int(sig))
        return True

    def _state_event(self, rank: _Rank, old: RankState) -> RankStateChanged:
        w = rank.worker
        final = rank.state.is_final
        return RankStateChanged(
            rank=w.local_rank,
            old=old,
            new=rank.state,
            pid=w.pid,
            exitcode=rank.exitcode if final else None,
            signal_name=exit_signal_name(rank.exitcode) if final else None,
            restart_count=w.restart_count,
            attempt=w.restart_count,
            failure=rank.failure if final else None,
            caused_by_us=rank.caused_by_us if final else False,
            t=clock.wall(),
        )

    def _info_locked(self) -> RunInfo:
        job = self.job
        ranks = tuple(r.info() for _, r in sorted(self._ranks.items()))
        first = self._ranks[min(self._ranks)].worker if self._ranks else None
        attempt_dir = os.path.join(job.run_dir, f"attempt_{self._attempt}") if job.run_dir else ""
        filtered = [os.path.join(attempt_dir, f"filtered_{s}.log") if attempt_dir else ""
                    for s in ("stdout", "stderr")]
        return RunInfo(
            name=first.role if first else "default",
            nprocs=len(ranks),
            run_id=job.run_id,
            log_dir=job.run_dir,
            attempt=self._attempt,
            term_timeout_s=self._term_timeout,
            command=job.agent_command,
            filtered_stdout_path=filtered[0],
            filtered_stderr_path=filtered[1],
            ranks=ranks,
            finished=self._finished is not None,
            tracking="process-tree",
            tracking_detail=f"attached to torchrun agent {job.agent_pid} (not our children)",
            started_at=started_wall(job.agent_starttime),
        )

    # output

    def _follow(self, w: Worker) -> None:
        """Note ``w``'s files for the pump; ``_add_followed`` hands them over later, outside
        our lock (the pump calls us back under its own lock: one order, no deadlock)."""
        index = arrival_path(w.stdout_path, w.stderr_path)
        entries = self._to_follow
        streams: tuple[tuple[StdStream, str], ...] = (
            ("stdout", w.stdout_path), ("stderr", w.stderr_path)
        )
        for stream, path in streams:
            if path:
                entries.append((w.local_rank, stream, path, w.restart_count, index))
                self._lines[(w.local_rank, stream)] = (path, w.restart_count, 0)
        if not (w.stdout_path or w.stderr_path):
            self._notice(
                f"rank {w.local_rank} writes no log files: start torchrun with "
                "--log-dir D -r 3 (or --tee 3) to see its lines",
                "warning",
            )

    def _add_followed(self) -> None:
        with self._lock:
            entries, self._to_follow = self._to_follow, []
        if entries:
            self._pump.add_many(entries)

    def _on_output(self, batch: list[Batch]) -> None:
        with self._lock:
            for out in batch:
                assert isinstance(out, RankOutput)  # the pump was made without text_batches
                key = (out.rank, out.stream)
                known = self._lines.get(key)
                if known is not None and known[1] == out.attempt:
                    self._lines[key] = (known[0], known[1], out.first_line + len(out.lines))
                self._emit(out)

    def _replay_output(self, sink: EventSink) -> None:
        """Hand ``sink`` the lines already delivered to others (read again from the files)."""
        for (rank, stream), (path, attempt, count) in sorted(self._lines.items()):
            if count <= 0:
                continue
            got: list[Batch] = []
            reader = OutputPump(got.extend, use_inotify=False, name="attach-replay")
            reader.add(rank, stream, path, attempt)  # type: ignore[arg-type]
            reader.flush()
            reader.stop()
            lines: list[str] = []
            for out in got:
                assert isinstance(out, RankOutput)
                if out.first_line < count:
                    lines.extend(out.lines[: count - out.first_line])
            if lines:
                sink(RankOutput(rank, stream, tuple(lines[:count]), "", attempt, 0))  # type: ignore[arg-type]

    def _on_stats(self, stats: RankStats) -> None:
        self._emit(stats)

    # exits, escalations, attempts

    def _watch_loop(self) -> None:
        last_scan = 0.0
        while not self._stop.is_set():
            with self._lock:
                fds = {
                    r.pidfd: n
                    for n, r in self._ranks.items()
                    if r.pidfd is not None and r.state.is_alive
                }
                agent_fd = self._agent_fd
                deadline = self._esc.next_deadline()
                capture = self._captures.next_time() if self._captures is not None else None
                if capture is not None and (deadline is None or capture < deadline):
                    deadline = capture
            poller = select.poll()
            for fd in fds:
                poller.register(fd, select.POLLIN)
            if agent_fd is not None:
                poller.register(agent_fd, select.POLLIN)
            poller.register(self._wakeup.fd, select.POLLIN)
            wait = self._poll
            if deadline is not None:
                wait = max(0.0, min(wait, deadline - clock.monotonic()))
            try:
                ready = poller.poll(wait * 1000)
            except OSError:
                ready = []
            if self._stop.is_set():
                return
            try:
                self._wakeup.drain()
            except OSError:
                pass  # closed: the handle is shutting down
            try:
                with self._lock:
                    seen_ns = clock.wall_ns()  # one moment for the exits of one wake-up
                    for fd, _ in ready:
                        if fd in fds:
                            self._exited(fds[fd], seen_ns)
                    self._escalate(clock.monotonic())
                    now = clock.monotonic()
                    if now - last_scan >= self._poll:
                        last_scan = now
                        self._look_for_attempt()
                self._add_followed()
                if agent_fd is not None and any(fd == agent_fd for fd, _ in ready):
                    self._pump.flush()  # outside our lock: the pump calls back into it
                    with self._lock:
                        self._agent_gone()
            except Exception:  # the watcher must outlive one bad look
                logger.exception("torchrun watcher cycle failed")
            if self._finished is not None:
                return

    def _exited(self, n: int, seen_ns: int) -> None:
        """Rank ``n``'s end, seen at ``seen_ns`` (``clock.wall_ns``). The exits one wake-up
        sees share its moment: their order in the poll's list is not the order they died
        in, and a worker torchrun stopped after the one a person did must not look earlier
        (``first_domino``)."""
        rank = self._ranks[n]
        if not rank.state.is_alive:
            return
        w = rank.worker
        code = _zombie_status(w)
        if code is None and rank.pidfd is not None:
            code = _reaped_status(rank.pidfd)
        old = rank.state
        rank.caused_by_us = rank.stopping_with is not None
        if code is not None:
            rank.exitcode = code
            rank.state = final_state_for(code)
            if code != 0:
                rank.failure = ProcessFailure(
                    w.local_rank, w.pid, code, w.error_file,
                    exit_time_ns=seen_ns, caused_by_us=rank.caused_by_us,
                )
        else:
            error = w.error_file if w.error_file and os.path.isfile(w.error_file) else ""
            if error:
                # torch's @record writes error.json and the exception ends the process with 1.
                rank.exitcode = 1
                rank.state = RankState.FAILED
                rank.failure = ProcessFailure(
                    w.local_rank, w.pid, 1, error,
                    exit_time_ns=seen_ns, caused_by_us=rank.caused_by_us,
                )
                self._notice(f"rank {n} exited: {UNKNOWN_EXIT}; its error.json says it failed")
            else:
                rank.state = RankState.FAILED
                self._notice(f"rank {n} (pid {w.pid}) exited: {UNKNOWN_EXIT}", "warning")
        if rank.pidfd is not None:
            os.close(rank.pidfd)
            rank.pidfd = None
        self._sampler.untrack(n)
        self._emit(self._state_event(rank, old))
        for esc in self._esc.rank_gone(n):
            self._emit(EscalationFinished(esc.ranks, tuple(esc.killed)))
        if self._agent_exited and self._finished is None and not any(
            r.state.is_alive for r in self._ranks.values()
        ):
            self._finish()  # the last orphan of a dead agent is gone

    def _escalate(self, now: float) -> None:
        if self._captures is not None:
            # Captures first, on threads of their own: they never delay a SIGKILL.
            for targets, deadline, why in self._captures.due(now, self._live_pid):
                self._stacks.before_kill(targets, deadline, why)
        for esc, survivors in self._esc.due(now):
            for r in survivors:
                # The terminate's timeout ran out and the rank lives on: SIGKILL it.
                self._ranks[r].stopping_with = signal.SIGKILL
                self._signal(r, signal.SIGKILL)
            if survivors:
                self._notice(
                    f"rank(s) {', '.join(map(str, survivors))} outlived "
                    f"{signal_name(esc.sig)} for {esc.timeout_s:g}s: SIGKILL sent",
                    "warning",
                )
        for esc in self._esc.overdue(now):
            self._emit(EscalationFinished(esc.ranks, tuple(esc.killed)))

    def _live_pid(self, rank: int) -> int | None:
        r = self._ranks.get(rank)
        return r.worker.pid if r is not None and r.state.is_alive else None

    def _look_for_attempt(self) -> None:
        workers = workers_of(self.job.agent_pid)
        if not workers or workers[0].restart_count <= self._attempt:
            return
        if len(workers) < workers[0].local_world_size:
            return  # torchrun is still starting the new attempt's workers: the next look
        # The agent restarted the group: the old workers are gone (or going; any still
        # alive are its to stop), the new attempt's files are in attempt_<n>.
        seen_ns = clock.wall_ns()
        for n, rank in self._ranks.items():
            if rank.state.is_alive and rank.pidfd is not None:
                self._exited(n, seen_ns)
        attempt = workers[0].restart_count
        self._attempt = attempt
        for w in workers:
            old = self._ranks.get(w.local_rank)
            rank = _Rank(w, state=RankState.STARTING)
            rank.pidfd = _open_pidfd(w)
            self._ranks[w.local_rank] = rank
            # SUCCEEDED/FAILED/SIGNALLED -> STARTING: torchrun started the new attempt
            self._emit(self._state_event(rank, old.state if old else RankState.STARTING))
            self._emit(
                RankRestarted(
                    w.local_rank, w.pid, w.restart_count, attempt, True,
                    w.stdout_path, w.stderr_path, w.error_file,
                )
            )
            self._follow(w)
            self._sampler.track(w.local_rank, w.pid)
            # STARTING -> RUNNING: it is a live process
            rank.state = RankState.RUNNING
            self._emit(self._state_event(rank, RankState.STARTING))
        run_dir = self.job.run_dir
        attempt_dir = os.path.join(run_dir, f"attempt_{attempt}") if run_dir else ""
        self.job = replace(self.job, attempt=attempt, workers=tuple(workers))
        self._emit(AttemptStarted(attempt, attempt_dir, tuple(w.pid for w in workers)))

    def _agent_gone(self) -> None:
        """The agent exited: settle its workers; finish once none is left."""
        if self._agent_fd is not None:
            os.close(self._agent_fd)
            self._agent_fd = None
        self._agent_exited = True
        seen_ns = clock.wall_ns()
        for n, rank in self._ranks.items():
            if rank.state.is_alive and not _is_live(rank.worker):
                self._exited(n, seen_ns)
        orphans = [n for n, r in self._ranks.items() if r.state.is_alive]
        if orphans:
            # An agent that was SIGKILLed cannot stop its workers: they run on, re-parented.
            self._notice(
                f"torchrun agent {self.job.agent_pid} has exited, but rank(s) "
                f"{', '.join(map(str, orphans))} still run (orphaned): terminate them here",
                "warning",
            )
            return
        self._finish()

    def _finish(self) -> None:
        failures = {
            n: r.failure for n, r in self._ranks.items() if r.failure and not r.caused_by_us
        }
        stopped = {n: r.failure for n, r in self._ranks.items() if r.failure and r.caused_by_us}
        result = RunProcsResult(
            failures=failures,  # type: ignore[arg-type]
            stdouts={n: r.worker.stdout_path for n, r in self._ranks.items()},
            stderrs={n: r.worker.stderr_path for n, r in self._ranks.items()},
            stopped=stopped,  # type: ignore[arg-type]
        )
        if not failures:
            result.return_values.update({n: None for n in self._ranks})
        root = root_cause_rank(failures) if failures else None  # type: ignore[arg-type]
        suspect = first_domino(stopped, failures, {  # type: ignore[arg-type]
            n: r.stopping_with for n, r in self._ranks.items() if r.stopping_with is not None
        })
        self._finished = RunFinished(result, self._attempt, root, suspect)
        self._done.set()
        self._emit(self._finished)
        self._notice(f"torchrun agent {self.job.agent_pid} has exited", "information")

