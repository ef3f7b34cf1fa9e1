"""The Supervisor: owns one run of N local ranks, publishes what happens, obeys commands.

It composes the engine's parts (everything here is per Supervisor, nothing module-global):

* ``RankProcess`` (engine.process) per rank: own session, pidfd signals, PR_SET_PDEATHSIG;
* ``OutputPump`` (engine.output.pump): one thread tailing every rank's stdout/stderr file into
  batched ``RankOutput`` events (every stream always goes to its file: the files are the
  record, the console and the UI are views of them);
* ``StatsSampler`` (engine.supervisor.stats): psutil samples as ``RankStats``;
* ``Guard`` (engine.process.guard): a separate process that kills every rank's tree if we die;
* ``EscalationTable`` (engine.supervisor.escalation): SIGTERM -> SIGKILL deadlines without blocking;
* torch's file-timer watchdog and health check (timer_watchdog), only when enabled.

Threads:

* *monitor* (``monitor``): blocks in ``poll()`` on every live rank's pidfd, a wake-up
  pipe and the nearest escalation deadline. It handles exits (within a millisecond), sends
  SIGKILL at deadlines, restarts ranks and attempts, applies the restart policy and
  publishes ``RunFinished``;
* *pump*, *sampler*, torch's *watchdog*: publish their own events;
* callers: ``execute`` runs on the caller's thread, sends signals at once, records
  escalations and returns; it never waits for a rank.

Events: one subscription point per Supervisor (``subscribe``). Lifecycle events are queued
under the state lock and delivered in order after it is released, so a sink may call back
into the Supervisor; sinks run on engine threads and must not block.

Events published: ``RankStateChanged`` (every transition, with pid, exit code, signal,
ProcessFailure, restart count, attempt, caused_by_us), ``RankOutput`` (batches of lines,
also ``filtered_*``), ``RankStats`` (one per rank per sample), ``EscalationScheduled`` /
``EscalationFinished`` (deadline and who was SIGKILLed), ``RankRestarted``,
``AttemptStarted``, ``TimerExpired`` (torch's watchdog), ``SupervisorNotice`` (refusals
that deserve a line, SIGKILLs, stuck ranks, teardown) and ``RunFinished`` (RunProcsResult
keyed by global rank, and the root-cause rank: the earliest failure we did not cause, None
when every rank that failed was stopped by us). An exit is ``caused_by_us`` only when our
signal plausibly ended it (``RankSlot.exit_caused_by_us``): a rank that failed on its own
during a teardown, or before our signal reached it, is a real failure.

Restarted ranks' files: a rank restarted alone writes to ``attempt_<n>/<rank>/restart_<k>/``
(k = its restart count); its earlier stdout.log, stderr.log and error.json stay where they
were. Restarting everything starts ``attempt_<n+1>/`` as torch's agent does; earlier
attempts stay on disk.
"""

from __future__ import annotations

import collections
import logging
import os
import signal
import threading
from collections.abc import Callable, Iterable
from types import FrameType
from typing import Any

from engine.events import Event, EventSink, RunFinished, SupervisorNotice
from engine.handle import RunInfo
from engine.logs_specs import DefaultLogsSpecs, LogsDest
from engine.process.guard import Guard
from engine.std import Std
from engine.supervisor.agent_env import EnvOptions, free_port, log_line_prefixes
from engine.supervisor.commands import CommandsMixin
from engine.supervisor.escalation import EscalationTable
from engine.supervisor.monitor import MonitorMixin
from engine.supervisor.rank_slot import RankSlot
from engine.supervisor.run_config import SupervisorConfig
from engine.supervisor.stats import StatsSampler
from engine.supervisor.timer_watchdog import HealthCheck, Watchdog

__all__ = ["Supervisor", "SupervisorConfig"]

log = logging.getLogger(__name__)

class Supervisor(CommandsMixin, MonitorMixin):
    """One supervised run (implements ``engine.handle.SupervisorHandle``).

    Args:
        config: What to run and how (see ``SupervisorConfig``).
        stdin: The ranks' stdin: None inherits ours (torchrun's behaviour, for headless
            runs); ``subprocess.DEVNULL`` under a TUI, which owns the terminal.
    """

    def __init__(self, config: SupervisorConfig, *, stdin: int | None = None) -> None:
        self.config = config
        self._stdin = stdin
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        """Notified whenever a rank changes state (``shutdown`` waits on it)."""
        self._sinks: tuple[EventSink, ...] = ()
        self._queue: collections.deque[Event] = collections.deque()
        self._dispatch_lock = threading.RLock()
        self._started = False
        self._closed = False
        self._shutting_down = False
        self._finished: RunFinished | None = None
        self._finished_event = threading.Event()
        self.received_signal: int | None = None
        """The first handled signal (``config.signals_to_handle``) that reached us, if any."""
        self._signals_pending: list[int] = []

        self._attempt = 0
        self._attempt_pending = False
        self._real_failure = False
        self._restarts_left = config.max_restarts
        self._escalations = EscalationTable(kill_wait_s=config.kill_wait_s)
        self._port = config.master_port if config.master_port is not None else free_port(
            config.master_addr
        )
        self._env_opts = EnvOptions(
            nprocs=config.nprocs,
            role=config.role,
            run_id=str(config.run_id),
            master_addr=config.master_addr,
            master_port=self._port,
            max_restarts=config.max_restarts,
            unbuffered=config.unbuffered,
            faulthandler=config.faulthandler,
        )
        self._prefixes = log_line_prefixes(
            config.log_line_prefix_template, config.role, config.nprocs
        ) or {r: f"[{config.role}{r}]:" for r in range(config.nprocs)}
        # Every stream goes to its file whatever -r/-t say; -r/-t only decide the console.
        self._logs = DefaultLogsSpecs(log_dir=config.log_dir, redirects=Std.ALL)
        self._dest: LogsDest | None = None
        self._slots = {
            r: RankSlot(rank=r, argv=config.argv(r), env={}) for r in range(config.nprocs)
        }
        self._cpu_sets = config.cpu_sets()  # NUMA placement, the same for every incarnation

        self._guard = Guard()
        self._sampler = StatsSampler(self._publish_now, interval=config.sample_interval or 1.0)
        self._sampler.on_descendants(lambda _rank, pids: self._guard.add_descendants(pids))
        self._pump: Any = None
        self._pump_ops: collections.deque[Callable[[], None]] = collections.deque()
        self._watchdog = Watchdog.from_env(
            str(config.run_id), on_expired=self._on_timer_expired, reap=self._reap_for_watchdog
        )
        self._health = HealthCheck.from_env(
            self._watchdog.last_progress_time if self._watchdog else _now_s
        )
        self._wake_r, self._wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._monitor: threading.Thread | None = None

    # -- events ---------------------------------------------------------------------------

    def subscribe(self, sink: EventSink) -> Callable[[], None]:
        """Add ``sink`` for every later event; returns a function that removes it."""
        with self._dispatch_lock:
            self._sinks = (*self._sinks, sink)

        def unsubscribe() -> None:
            with self._dispatch_lock:
                self._sinks = tuple(s for s in self._sinks if s is not sink)

        return unsubscribe

    def _emit(self, event: Event) -> None:
        """Queue a lifecycle event (caller holds the lock); delivered by ``_flush``."""
        self._queue.append(event)

    def _flush(self) -> None:
        """Deliver queued events in order. Call with the state lock *released*."""
        with self._dispatch_lock:
            while self._queue:
                event = self._queue.popleft()
                self._publish_now(event)
                if isinstance(event, RunFinished) and event is self._finished:
                    # Only now: whoever wait()s sees RunFinished already delivered to sinks.
                    self._finished_event.set()

    def _publish_now(self, event: Event) -> None:
        for sink in self._sinks:
            try:
                sink(event)
            except Exception:  # noqa: BLE001 - one bad sink must not stop the others
                log.exception("event sink %r failed on %r", sink, type(event).__name__)

    def _notice(self, message: str, severity: str = "information") -> None:
        self._emit(SupervisorNotice(message, severity))  # type: ignore[arg-type]

    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> None:
        """Start the guard, the ranks and the threads (idempotent; returns once spawned)."""
        with self._lock:
            if self._started:
                return
            self._started = True
            self._guard.start()
            if self._watchdog is not None:
                self._watchdog.start()
            if self._health is not None:
                self._health.start()
            self._pump = self._make_pump()
            self._start_attempt(first=True)
        # Outside the lock (see monitor.py on pump calls), before the monitor runs them.
        self._run_pump_ops()
        self._flush()
        self._monitor = threading.Thread(
            target=self._monitor_loop, name="rankvisor-monitor", daemon=True
        )
        self._monitor.start()
        self._wake()  # a first pass at once: ranks may have exited (or failed to spawn) already
        if self.config.sample_interval:
            self._sampler.start()

    def wait(self, timeout: float | None = None) -> RunFinished | None:
        """Block until the run finishes (or ``timeout``); its RunFinished, else None."""
        self._finished_event.wait(timeout)
        return self._finished

    @property
    def finished(self) -> RunFinished | None:
        """The last RunFinished, None while the run goes on."""
        return self._finished

    def shutdown(self, timeout_s: float | None = None) -> None:
        """Terminate every live rank with escalation, wait for them, release everything.

        Blocks up to about ``timeout + kill_wait`` (call it from a worker thread in a UI).
        Idempotent; safe before ``start``.
        """
        timeout = self.config.term_timeout if timeout_s is None else timeout_s
        with self._lock:
            if self._closed:
                return
            self._shutting_down = True
            if self._started:
                # Nothing may start again: no pending restarts, no policy.
                self._attempt_pending = False
                self._restarts_left = 0
                for slot in self._slots.values():
                    slot.after_exit = None
                self._stop_ranks(self._live(), "shutdown", signal.SIGTERM, timeout)
        self._flush()
        self._wake()
        with self._lock:
            # Bounded: the monitor SIGKILLs at the deadline and gives up kill_wait_s later.
            limit = timeout + self.config.kill_wait_s + 1.0
            self._changed.wait_for(
                lambda: not self._started or not any(s.alive for s in self._slots.values()),
                timeout=limit,
            )
            self._closed = True
        self._wake()
        if self._monitor is not None:
            self._monitor.join(timeout=5.0)
        self._run_pump_ops()
        self._sampler.stop()
        if self._pump is not None:
            self._pump.stop()
        if self._watchdog is not None:
            self._watchdog.stop()
        if self._health is not None:
            self._health.stop()
        self._guard.close()  # the guard sweeps anything that still carries our token
        self._flush()
        for fd in (self._wake_r, self._wake_w):
            try:
                os.close(fd)
            except OSError:
                pass

    def __enter__(self) -> Supervisor:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def install_signal_handlers(
        self, signals: Iterable[int] | None = None
    ) -> Callable[[], None]:
        """Make SIGTERM/SIGINT/SIGHUP/SIGQUIT stop the run: opt-in, main thread only.

        The first signal terminates every rank with the *same* signal (as torch's agent
        forwards it), SIGKILL following at the term timeout; a second one SIGKILLs at once.
        The handler itself only records the signal and wakes the monitor (nothing in a
        signal handler may take a lock the interrupted code could hold).

        Args:
            signals: Which signals (default: the config's ``signals_to_handle``).

        Returns:
            A function restoring the previous handlers.
        """
        previous: dict[int, Any] = {}
        if signals is None:
            signals = self.config.signals_to_handle

        def handler(signum: int, _frame: FrameType | None) -> None:
            self._signals_pending.append(signum)
            self._wake()

        for sig in signals:
            previous[sig] = signal.signal(sig, handler)

        def restore() -> None:
            for sig, old in previous.items():
                signal.signal(sig, old)

        return restore

    def _wake(self) -> None:
        try:
            os.write(self._wake_w, b"!")
        except OSError:
            pass  # full (a wake-up is pending anyway) or closed (we are done)

    # -- views ----------------------------------------------------------------------------

    def snapshot(self) -> RunInfo:
        """The run and every rank as they are now."""
        with self._lock:
            dest = self._dest
            return RunInfo(
                name=self.config.role,
                nprocs=self.config.nprocs,
                run_id=str(self.config.run_id),
                log_dir=self._logs.run_log_dir or "",
                attempt=self._attempt,
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
                ranks=tuple(s.info() for s in self._slots.values()),
                finished=self._finished is not None,
            )

    @property
    def master_port(self) -> int:
        """The MASTER_PORT the ranks got."""
        return self._port

    @property
    def guard_pid(self) -> int | None:
        """The guard process's pid (for tests and diagnostics)."""
        return self._guard.pid

    def _live(self) -> list[RankSlot]:
        return [s for s in self._slots.values() if s.alive and s.proc is not None]

    # -- watchdog hooks (called on torch's watchdog thread) -------------------------------

    def _slot_by_pid(self, pid: int) -> RankSlot | None:
        return next((s for s in self._slots.values() if s.pid == pid and s.alive), None)

    def _on_timer_expired(self, pid: int, scope: str) -> None:
        from engine.events import TimerExpired

        with self._lock:
            slot = self._slot_by_pid(pid)
            self._emit(TimerExpired(slot.rank if slot else -1, pid, scope))
            self._notice(
                f"rank {slot.rank if slot else '?'} (pid {pid}) overran timer scope {scope!r}",
                "warning",
            )
        self._flush()

    def _reap_for_watchdog(self, pid: int, sig: int) -> bool | None:
        # An overrun is the rank's own failure, so stop_reason stays None: it may be the
        # root cause. The signal goes to the whole group, like every signal we send.
        with self._lock:
            slot = self._slot_by_pid(pid)
            if slot is None:
                return None
            slot.proc.send_signal(sig, group=True)
            return True


def _now_s() -> int:
    import time

    return int(time.time())
