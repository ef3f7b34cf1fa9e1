"""The Supervisor: owns one run of N local ranks, publishes what happens, obeys commands.

It composes the rooms below (rank processes, the output pump, the stats sampler, the guard
process, a cgroup per rank, torch's file-timer watchdog) with its own parts, each a typed
object that sees only what it needs: ``RunState`` and ``Wakeup`` (state.py), ``Publisher``,
``Stopper`` (escalations), ``PumpLink``, ``Launcher``, ``CommandHandler``, ``StackCapture``,
``InputWatch`` (the ranks' stdin pipes, and who waits on one) and ``Monitor``. Everything
is per Supervisor, nothing module-global, so tests and a multi-node agent can hold several.

Why one run loop (``Monitor``) blocked in ``poll()`` on every pidfd, the wake-up pipe and
the nearest deadline (an escalation's, or one of the run's periodic readings on its
``beat``: stats, the stdin watch, the live suspect, the collectives, status.json's refresh):
an exit is seen within a millisecond, a SIGKILL is sent at its deadline, and an idle run
wakes once for all its readings, with no polling loop and no thread or clock per reading.
``execute`` runs on the caller's thread and never waits for a rank. Why one state lock with
events queued under it and delivered after it is released: a sink may call back into the
Supervisor without a deadlock, and lifecycle events keep their order. An exit is
``caused_by_us`` only when our signal plausibly ended it: a rank that failed on its own
during a teardown is a real failure. Restarts never delete a file: a rank restarted alone
writes under ``restart_<k>/``, a new attempt under ``attempt_<n+1>/``.
"""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Callable, Iterable

from .. import clock
from ..errors import ProcessFailure
from ..events import EventSink, RunFinished, TimerExpired
from ..forensics.nccl_dumps import poke
from ..forensics.progress import ProgressReader
from ..handle import Command, CommandResult, RunInfo, term_timeout
from ..logs_specs import DefaultLogsSpecs
from ..process import cgroups as _cgroups
from ..process.fd_limit import raise_soft_limit
from ..process.guard import Guard
from ..process.signal_inbox import SignalInbox
from ..std import Std
from .agent_env import EnvOptions, free_port, log_line_prefixes
from .collective_watch import CollectiveWatch
from .commands import CommandHandler
from .debug_options import debugpy_banner, write_launch
from .debugpy_hold import DebugpyHold
from .dstate_watch import TIMEOUT_ENV as DSTATE_TIMEOUT_ENV
from .dstate_watch import UninterruptibleWatch
from .input_watch import DEFAULT_INTERVAL_S, UNWATCHED_INTERVAL_S, InputWatch
from .launcher import Launcher
from .live_suspect import LiveReading, LiveSuspect, held_now
from .monitor import Monitor, held_ranks
from .publisher import Publisher
from .pump_link import PumpLink
from .rank_slot import RankSlot
from .run_config import SupervisorConfig
from .stack_capture import CaptureSchedule, StackCapture
from .state import RunState, Wakeup
from .stats import StatsSampler, sample_every
from .stopper import Stopper
from .ticker import Beat
from .timer_watchdog import HealthCheck, Watchdog

__all__ = ["Supervisor", "SupervisorConfig"]

log = logging.getLogger(__name__)


class Supervisor:
    """One supervised run (implements ``engine.handle.SupervisorHandle``).

    Args:
        config: What to run and how (see ``SupervisorConfig``; its ``stdin`` says what the
            ranks read: a pipe held here, ours, or /dev/null).
        driven: Rounds are started by an agent (multi-node: ``engine.cluster``).
    """

    def __init__(self, config: SupervisorConfig, *, driven: bool = False) -> None:
        self.config = config
        self.node_label = ""
        """Where this run sits in a multi-node job ("node 1 of 2 (host)"), for display."""
        self._port = config.master_port if config.master_port is not None else free_port(
            config.master_addr
        )
        self._prefixes = log_line_prefixes(
            config.log_line_prefix_template, config.role, config.nprocs
        ) or {r: f"[{config.role}{r}]:" for r in range(config.nprocs)}
        # Every stream goes to its file whatever -r/-t say; -r/-t only decide the console.
        self._logs = DefaultLogsSpecs(log_dir=config.log_dir, redirects=Std.ALL)

        self._state = RunState(
            {r: RankSlot(rank=r, argv=config.launch_argv(r), env={})
             for r in range(config.nprocs)},
            max_restarts=config.max_restarts, term_timeout_s=config.term_timeout,
            kill_wait_s=config.kill_wait_s, teardown_on_failure=config.teardown_on_failure,
        )
        self._state.driven = driven
        self._wakeup = Wakeup()
        self.beat = Beat("rankvisor-run", driver=self._wakeup.wake)
        """The run's periodic readings, taken by its run loop (``monitor.Monitor``)."""
        self._events = Publisher(self._state)
        # The run's own events tell who a person paused (a prompt, a SIGSTOP): the suspect's.
        self._events.subscribe(self._state.pauses.observe)
        self._stacks = StackCapture(
            lambda: self._logs.run_log_dir, self._say_capture,
            readings=lambda: self.collectives.job_readings() if self.collectives else (),
        )
        self.collectives: CollectiveWatch | None = (
            CollectiveWatch(self._state, lambda: self._logs.run_log_dir, beat=self.beat)
            if any(config.serves_collectives(r) for r in range(config.nprocs)) else None
        )
        """Every rank's Flight Recorder, read live (None: no rank serves it)."""
        reader = ProgressReader(config.progress_regex)
        self._state.activity.step_of = lambda line: (p.step if (p := reader.read(line)) else None)
        self._live = LiveSuspect(
            self._state, self._stacks, self.collectives, self._say_live,
            silence_factor=config.suspect_silence_factor,
            silence_min_s=max(config.suspect_silence_min_s, config.live_quiet_s),
            debugger_waits=(self._events if config.debug is not None
                            and config.debug.debugpy_wait else None),
            beat=self.beat, events=self._events,
        ) if config.live_quiet_s > 0 else None
        self._stopper = Stopper(
            self._state, self._events,
            before_kill=(self._before_kill
                         if config.stack_on_kill or self.collectives is not None else None),
            captures=CaptureSchedule(),
        )
        self._pump = PumpLink(
            config, self._prefixes, self._events.publish_now, self._state.activity
        )

        self._guard = Guard()
        self._cgroups: _cgroups.RunCgroups | None = None
        self._debugpy_hold: DebugpyHold | None = None
        self._tracking_detail = ""
        self._sampler = StatsSampler(
            self._events.publish_now, interval=config.sample_interval or 1.0, beat=self.beat
        )
        self._sampler.on_descendants(lambda _rank, pids: self._guard.add_descendants(pids))
        self._watchdog = Watchdog.from_env(
            str(config.run_id), on_expired=self._on_timer_expired, reap=self._reap_for_watchdog
        )
        self._health = HealthCheck.from_env(
            self._watchdog.last_progress_time if self._watchdog else _now_s
        )
        self._dstate = UninterruptibleWatch.from_env(
            os.environ, self._live_pids, self._on_uninterruptible)
        self.unhealthy: str | None = None
        """Why torch's D-state rule found the group unhealthy (an agent stops it then)."""

        self._input = InputWatch(self._state, self._events, beat=self.beat)
        self._launcher = Launcher(
            config, self._state, self._events, self._stopper, self._pump,
            env_opts=EnvOptions(
                nprocs=config.nprocs,
                role=config.role,
                run_id=str(config.run_id),
                master_addr=config.master_addr,
                master_port=self._port,
                max_restarts=config.max_restarts,
                unbuffered=config.unbuffered,
                faulthandler=config.faulthandler,
                virtual_local_rank=config.virtual_local_rank,
            ),
            logs=self._logs,
            guard=self._guard,
            sampler=self._sampler,
            watchdog=self._watchdog,
            wakeup=self._wakeup,
            input_watch=self._input,
        )
        self._commands = CommandHandler(
            config, self._state, self._events, self._stopper, self._wakeup, self._stacks,
            self._input, self.collectives,
        )
        self._monitor = Monitor(
            config, self._state, self._events, self._stopper, self._launcher, self._pump,
            self._wakeup, self._guard, collectives=self.collectives, beat=self.beat,
        )

    # -- events and commands --------------------------------------------------------------

    @property
    def detachable(self) -> bool:
        """False: this run lives in this process and ends with it."""
        return False

    def subscribe(self, sink: EventSink) -> Callable[[], None]:
        """Add ``sink`` for every later event; returns a function that removes it."""
        return self._events.subscribe(sink)

    def watch(self, sink: EventSink) -> tuple[RunInfo, Callable[[], None]]:
        """Subscribe, then snapshot: an event between the two is applied on top, never lost."""
        unsubscribe = self._events.subscribe(sink)
        return self.snapshot(), unsubscribe

    def detach(self) -> None:
        """Nothing to let go of: the run is in this process (``shutdown`` ends it)."""

    def execute(self, command: Command) -> CommandResult:
        """Carry out ``command`` without blocking for its escalation; safe from any thread.

        A command with an invalid signal or timeout, or that cannot apply (unknown rank,
        rank not running, run not started or shutting down), is refused with a message.
        """
        return self._commands.execute(command)

    @property
    def received_signal(self) -> int | None:
        """The first handled signal (``config.signals_to_handle``) that reached us, if any."""
        return self._state.received_signal

    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> None:
        """Start the guard, the ranks and the threads (idempotent; returns once spawned)."""
        state = self._state
        with state.lock:
            if state.started:
                return
            debug = self.config.debug
            if debug is not None and debug.debugpy:
                # Before anything starts: a port another user holds fails the start here.
                self._debugpy_hold = DebugpyHold(debug.debugpy_ports())
            state.started = True
            state.started_at = clock.wall()
            # About 6 descriptors a rank for its life: the soft limit (1024 often) would
            # silently drop followers and sockets at a few hundred ranks.
            raise_soft_limit()
            # Before the guard starts: a run left by an owner killed with its guard is
            # swept here (see engine.process.cgroups).
            self._cgroups, self._tracking_detail = _cgroups.open_run(str(self.config.run_id))
            self._guard.start()
            if self._cgroups is not None:
                for kind, path in self._cgroups.guard_dirs:
                    self._guard.add_cgroup(kind, path)
                self._launcher.use_cgroups(self._cgroups)
            if self._watchdog is not None:
                self._watchdog.start()
            if self._health is not None:
                self._health.start()
            if self._dstate is not None:
                self._dstate.start()
            self._pump.start()
            self._launcher.start_attempt(first=True)
            self._say_debugpy()
        # Outside the lock (see pump_link.py on pump calls), before the monitor runs them.
        self._pump.run_ops()
        self._events.flush()
        self._monitor.start()  # a first pass at once: ranks may have exited (or failed) already
        if self.config.sample_interval:
            self._sampler.start()
        if self.config.stdin == "pipe":
            self._input.start()
        if self.collectives is not None:
            self.collectives.start()
        if self._live is not None:
            self._live.start()

    def _say_debugpy(self) -> None:
        """``--debugpy``: write the VS Code attach configuration into the run dir and say
        where each rank listens, with the ``ssh -L`` line (caller holds the lock)."""
        debug = self.config.debug
        run_dir = self._logs.run_log_dir
        if debug is None or not debug.debugpy or not run_dir:
            return
        try:
            path = write_launch(debug, run_dir, self.config.cwd or os.getcwd())
        except OSError as e:
            path = f"(not written: {e.strerror})"
        # A warning, so that the headless console prints it too: the ranks wait for you.
        self._events.notice(debugpy_banner(debug, path), "warning")

    def wait(self, timeout: float | None = None) -> RunFinished | None:
        """Block until the run finishes (or ``timeout``); its RunFinished, else None."""
        self._state.finished_event.wait(timeout)
        return self._state.finished

    @property
    def finished(self) -> RunFinished | None:
        """The last RunFinished, None while the run goes on."""
        return self._state.finished

    def shutdown(self, timeout_s: float | None = None) -> None:
        """Terminate every live rank with escalation, wait for them, release everything.

        Blocks up to about ``timeout + kill_wait`` (call it from a worker thread in a UI).
        Idempotent; safe before ``start``.
        """
        timeout = term_timeout(timeout_s, self.config.term_timeout)
        state = self._state
        with state.lock:
            if state.closed:
                return
            # Nothing may start again: no pending restarts, no policy.
            self._stopper.apply(state.shut_down(timeout))
        self._events.flush()
        self._wakeup.wake()
        with state.lock:
            # Bounded: the monitor SIGKILLs at the deadline and gives up kill_wait_s later.
            # Only ranks with a process are waited for: a slot a failed start left without
            # one (the run dir could not be made) never exits, and must not cost the limit.
            limit = timeout + self.config.kill_wait_s + 1.0
            state.changed.wait_for(lambda: not state.started or not state.live(), timeout=limit)
            state.closed = True
        self._wakeup.wake()
        self._monitor.join(timeout=5.0)
        self._stacks.join(timeout_s=2.0)  # each ended before its SIGKILL deadline anyway
        if self._live is not None:
            self._live.stop()
        if self.collectives is not None:
            self.collectives.stop()
        self._pump.run_ops()
        self._sampler.stop()
        self._input.stop()
        self._pump.stop()
        if self._watchdog is not None:
            self._watchdog.stop()
        if self._health is not None:
            self._health.stop()
        if self._dstate is not None:
            self._dstate.stop()
        if self._cgroups is not None:
            left = self._cgroups.close()
            if left:
                self._events.notice(
                    f"cgroup(s) {', '.join(left)} still hold processes stuck in the kernel; "
                    "the guard removes them once they exit", "error",
                )
        self._guard.close()  # the guard sweeps anything that still carries our token
        if self._debugpy_hold is not None:
            self._debugpy_hold.close()
        self._events.flush()
        self._wakeup.close()

    def __enter__(self) -> Supervisor:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def before_spawn(self, hook: Callable[[str], None]) -> None:
        """Call ``hook(run_dir)`` once the run's directory exists, before its first ranks
        start (on the starting thread, with the run's lock held): what must be on that file
        system before the ranks write there (the host's reserve and first status.json: a
        rank that fills the disk at once must not leave the run without either)."""
        self._launcher.before_first_spawn.append(hook)

    def install_signal_handlers(
        self,
        signals: Iterable[int] | None = None,
        on_signal: Callable[[int], None] | None = None,
    ) -> Callable[[], None]:
        """Make SIGTERM/SIGINT/SIGHUP/SIGQUIT stop the run: opt-in, main thread only.

        The first signal terminates every rank with the *same* signal (as torch's agent
        forwards it), SIGKILL following at the term timeout; a second one SIGKILLs at once.
        The signals reach the monitor through this process's wakeup fd
        (``engine.process.signal_inbox``), not through the main thread, which the kernel may
        leave asleep when another thread takes the signal.

        Args:
            signals: Which signals (default: the config's ``signals_to_handle``).
            on_signal: Called with the signal in the Python-level handler, on the main
                thread, and by the monitor as it takes the signal: for a console that must
                be given up before the teardown's notices are written to it (nobody may
                read it). It must be idempotent and take no lock, as a handler.

        Returns:
            A function restoring the previous handlers (and closing the inbox).
        """
        if signals is None:
            signals = self.config.signals_to_handle
        inbox = SignalInbox(signals)
        undo = inbox.install(on_signal)
        self._monitor.signals = inbox
        self._wakeup.wake()  # the loop polls the inbox from its next pass

        def restore() -> None:
            undo()
            with self._state.lock:
                self._monitor.signals = None
            inbox.close()

        return restore

    # -- driven by an agent (multi-node: engine.cluster) -----------------------------------

    def start_round(self, envs: dict[int, dict[str, str]]) -> None:
        """Start every rank with the agent's variables for this round (a driven run).

        The first call starts the run (``start``); a later one starts attempt n+1 once
        every rank of the previous round has ended (``stop_round`` first).
        """
        self._launcher.round_env = {r: dict(e) for r, e in envs.items()}
        state = self._state
        with state.lock:
            first = not state.started
            if not first:
                if state.shutting_down or state.closed:
                    raise RuntimeError("the run is shutting down")
                state.round_result = None
                state.restart_requested = False
                self._launcher.start_attempt(first=False)
        if first:
            self.start()
            return
        self._pump.run_ops()
        self._events.flush()
        self._wakeup.wake()

    def set_prefixes(self, prefixes: dict[int, str]) -> None:
        """Change each local rank's log line prefix (a new round's global rank numbers)."""
        with self._state.lock:
            self._prefixes.update(prefixes)

    def round_result(self) -> RunFinished | None:
        """How the current round ended (every rank final), None while a rank runs."""
        with self._state.lock:
            return self._state.round_result

    def failures_now(self) -> dict[int, ProcessFailure]:
        """Ranks whose current process failed on its own, by local rank, while the round
        may still be ending (torch's agent reacts to the first failure, not the last exit)."""
        with self._state.lock:
            return {
                s.rank: s.failure for s in self._state.slots.values()
                if s.failure is not None and not s.failure.caused_by_us
            }

    def wait_round(self, timeout: float | None = None) -> RunFinished | None:
        """Block until every rank of the round has ended (or ``timeout``)."""
        state = self._state
        with state.lock:
            state.changed.wait_for(lambda: state.round_result is not None, timeout=timeout)
            return state.round_result

    def stop_round(self, timeout_s: float | None = None) -> RunFinished | None:
        """Terminate every live rank (with escalation) and wait for the round to end."""
        timeout = term_timeout(timeout_s, self.config.term_timeout)
        state = self._state
        with state.lock:
            if state.started and not state.closed:
                for slot in state.slots.values():
                    slot.after_exit = None
                self._stopper.stop_ranks(
                    [s for s in state.live() if s.stop_reason is None], "attempt",
                    signal.SIGTERM, timeout,
                )
        self._events.flush()
        self._wakeup.wake()
        if not state.started:
            return None
        return self.wait_round(timeout + self.config.kill_wait_s + 1.0)

    def take_restart_request(self) -> bool:
        """Whether a person asked for a new round since the last call (RestartAll)."""
        with self._state.lock:
            asked = self._state.restart_requested
            self._state.restart_requested = False
            return asked

    def finish_run(self, finished: RunFinished) -> None:
        """Publish the run's end, as the agent decided it (a driven run)."""
        state = self._state
        with state.lock:
            if state.finished is not None:
                return
            state.finished = finished
            self._events.emit(finished)
        self._events.flush()

    def notice(self, message: str, severity: str = "information") -> None:
        """Publish a line for a person (an agent's news: a new round, a remote failure)."""
        with self._state.lock:
            self._events.notice(message, severity)  # type: ignore[arg-type]
        self._events.flush()

    # -- views ----------------------------------------------------------------------------

    def snapshot(self) -> RunInfo:
        """The run and every rank as they are now."""
        state = self._state
        with state.lock:
            dest = state.dest
            return RunInfo(
                name=self.config.role,
                nprocs=self.config.nprocs,
                run_id=str(self.config.run_id),
                log_dir=self._logs.run_log_dir or "",
                attempt=state.attempt,
                term_timeout_s=self.config.term_timeout,
                command=self.config.argv(0),
                filtered_stdout_path=(
                    dest.filtered_stdout if dest and self.config.stdout_filters else ""
                ),
                filtered_stderr_path=(
                    dest.filtered_stderr if dest and self.config.stderr_filters else ""
                ),
                stdout_filters=self.config.stdout_filters,
                stderr_filters=self.config.stderr_filters,
                log_line_prefixes=dict(self._prefixes),
                ranks=tuple(s.info() for s in state.slots.values()),
                finished=state.finished is not None,
                tracking=(
                    _cgroups.TRACKING_CGROUP if self._cgroups is not None
                    else _cgroups.TRACKING_TREE
                ),
                tracking_detail=self._tracking_detail,
                started_at=state.started_at,
                node=self.node_label,
                progress_regex=self.config.progress_regex or "",
                stdin=self.config.stdin,
                rank_base=state.rank_base,
                debug_hold=tuple(held_ranks(state)) if self.config.debug is not None else (),
            )

    @property
    def rank_base(self) -> int:
        """The global rank of local rank 0 in a multi-node job's current round (0 on one
        node): the agent sets it before each round, and what a person reads uses it."""
        return self._state.rank_base

    @rank_base.setter
    def rank_base(self, base: int) -> None:
        with self._state.lock:
            self._state.rank_base = base

    @property
    def master_port(self) -> int:
        """The MASTER_PORT the ranks got."""
        return self._port

    def viewers(self, count: int) -> None:
        """How many people watch the run from outside it now (its host's socket clients;
        not called for a run an app in this process shows). While nobody does, stats are
        sampled at ``sample_every``'s slower pace and the stdin watch passes every
        ``UNWATCHED_INTERVAL_S``; the first to attach gets a sample and a pass at once, not
        at the next beat (call it from no sample's own thread)."""
        watched = count > 0
        input_pace = DEFAULT_INTERVAL_S if watched else UNWATCHED_INTERVAL_S
        if self._input.interval != input_pace:
            self._input.pace(input_pace)
        interval = self.config.sample_interval
        if not interval:
            return
        pace = sample_every(interval, watched=watched, cgroups=self._cgroups is not None)
        was = self._sampler.interval
        self._sampler.pace(pace)
        if watched and was != pace:
            self._sampler.sample_once()

    def progress_now(self) -> dict[int, dict[str, object]]:
        """Each rank's step (the last its recent lines report, None if none) and the age of
        its last output in seconds (None if it wrote nothing): a cron check sees a stall."""
        now = clock.wall_ns()
        out: dict[int, dict[str, object]] = {}
        activity = self._state.activity
        for rank in list(self._state.slots):
            last = activity.last_ns(rank, now)
            out[rank] = {"step": activity.last_step(rank),
                         "last_output_age_s": round((now - last) / 1e9, 1) if last else None}
        return out

    @property
    def live_suspect(self) -> LiveReading | None:
        """The suspect named while every rank hangs, with its dumps (None: none now)."""
        return self._live.reading if self._live is not None else None

    def held_now(self) -> dict[int, str]:
        """The local ranks a person holds now (at a prompt, stopped, waiting for a debugger),
        each with how: another node's verdicts never name them either."""
        with self._state.lock:
            return held_now(self._state)

    @property
    def guard_pid(self) -> int | None:
        """The guard process's pid (for tests and diagnostics)."""
        return self._guard.pid

    # -- watchdog hooks (called on torch's watchdog thread) -------------------------------

    # -- stack captures before a SIGKILL ---------------------------------------------------

    def _before_kill(self, targets: dict[int, int], deadline: float, why: str) -> None:
        """The Stopper's hook (lock held): dump ``targets`` before their SIGKILL, the dump
        naming the ranks as a person knows them (global on many nodes)."""
        shown = {self._state.shown(rank): pid for rank, pid in targets.items()}
        if self.config.stack_on_kill:
            self._stacks.before_kill(shown, deadline, why)
        if self.collectives is not None:
            for slot in self._state.live():
                if slot.rank in targets and slot.error_file:
                    poke(os.path.dirname(slot.error_file))  # NCCL ranks: dump your FR now
            paths = self.collectives.live_paths(targets)
            left = deadline - clock.monotonic() - 0.1
            if paths and left > 0.05:
                self.collectives.capture_later(f"before SIGKILL ({why})", paths, min(1.0, left))

    def _say_capture(self, message: str, severity: str = "information") -> None:
        """A capture's notice, from its own thread."""
        with self._state.lock:
            self._events.notice(message, severity)
        self._events.flush()

    def _say_live(self, message: str) -> None:
        self._say_capture(message, "warning")

    def _on_timer_expired(self, pid: int, scope: str) -> None:
        with self._state.lock:
            slot = self._state.slot_by_pid(pid)
            if slot is not None:
                slot.timer_scope = scope
            self._events.emit(TimerExpired(slot.rank if slot else -1, pid, scope))
            self._events.notice(
                f"rank {self._state.shown(slot.rank) if slot else '?'} (pid {pid}) "
                f"overran timer scope {scope!r}",
                "warning",
            )
        self._events.flush()

    def _live_pids(self) -> dict[int, int]:
        with self._state.lock:
            return {s.rank: s.pid for s in self._state.live() if s.pid is not None}

    def _on_uninterruptible(self, stuck: list[tuple[int, int, float]]) -> None:
        """torch's rule fired: the group is unhealthy and is stopped, with no restart (a
        driven run's agent stops it, reading ``unhealthy``)."""
        state = self._state
        with state.lock:
            who = ", ".join(f"rank {state.shown(r)} (pid {p}, {e:.1f} s)" for r, p, e in stuck)
            timeout = self._dstate.timeout if self._dstate is not None else 0.0
            self.unhealthy = (f"{who} in uninterruptible sleep (D-state) past "
                              f"{DSTATE_TIMEOUT_ENV}={timeout:g}")
            self._events.notice(f"{self.unhealthy}: the group is unhealthy; stopping every "
                                "rank, no restart (as torch's agent)", "error")
            if not state.driven and not state.shutting_down:
                self._stopper.apply(state.shut_down(self.config.term_timeout))
        self._events.flush()
        self._wakeup.wake()

    def _reap_for_watchdog(self, pid: int, sig: int) -> bool | None:
        # An overrun is the rank's own failure, so stop_reason stays None: it may be the
        # root cause. The signal goes to the whole group, like every signal we send.
        with self._state.lock:
            slot = self._state.slot_by_pid(pid)
            if slot is None or slot.proc is None:
                return None
            slot.proc.send_signal(sig, group=True)
            return True


def _now_s() -> int:
    return int(clock.wall())
