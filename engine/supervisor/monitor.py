"""The Supervisor's run loop: exits, deadlines, restarts, the end of the run, its readings.

One loop, one thread, so that every consequence of an exit (state event, end of an
escalation, teardown of the others, a restart, the restart policy, RunFinished) happens in
one place and in one order, and the run's periodic readings (stats, the live suspect, the
collectives, status.json's refresh: the run's ``Beat``) ride the same sleep instead of a
thread and a clock of their own. It sleeps in ``poll()`` on:

* each live rank's pidfd, readable the moment the rank exits (the goal is an event within
  50 ms of an exit; in practice it is about a millisecond);
* the wake-up pipe (``Wakeup``), written by commands, spawns and ``shutdown``;
* the signal inbox (``SignalInbox``): the handled signals' numbers, written by the C-level
  handler of whichever thread took one;
* a timeout equal to the nearest deadline: an escalation's (SIGKILL time, or the end of the
  bounded wait after a SIGKILL) or a reading's;
* the guard process's pidfd: if someone kills the guard, a new one is started at once (a
  SIGKILL of rankvisor after that must still leave nothing behind).

A pass woken by anything but a reading's deadline brings the run up to date under the state
lock, then, with the lock released, runs the queued pump calls and delivers the queued events
(in that order, so a rank's last output lines come before its exit event); last, with no lock
held, the readings due are taken (each a few milliseconds; one that waits on something
outside hands that part to a thread of its own).

The loop is the only watcher of its ranks' pidfds: they are spawned ``watched=False`` (no
exit-watcher thread wakes for the same exit) and reaped here, by ``observe_exit`` under the
rank's lock, the lock every signal takes, so nothing is ever signalled after its reap.
"""

from __future__ import annotations

import logging
import os
import select
import threading
import time

from .. import clock
from ..errors import ProcessFailure, root_cause_rank
from ..events import RunFinished, Suspect
from ..forensics.exit_cause import ExitCause, diagnose
from ..forensics.own_traceback import raised_before_stop, raised_line
from ..forensics.stdin_hint import note_null_stdin
from ..forensics.suspect import TOGETHER_S, RankFacts, find_suspect
from ..kernel.run import (
    Effect,
    FailedOnOwn,
    NewAttempt,
    Over,
    RankExited,
    Respawn,
    SignalReceived,
    Tick,
)
from ..logfile.tail import last_lines
from ..names.signals import signal_name
from ..process.guard import Guard
from ..process.py_bootstrap import ENV_POST_MORTEM, read_hold
from ..process.rank_process import RankProcess
from ..process.signal_inbox import SignalInbox
from ..result import RunProcsResult
from .collective_watch import CollectiveWatch
from .launcher import Launcher
from .publisher import Publisher
from .pump_link import PumpLink
from .rank_slot import RankSlot
from .run_config import SupervisorConfig
from .state import RunState, Wakeup
from .stopper import Stopper
from .ticker import Beat

__all__ = ["Monitor"]

log = logging.getLogger(__name__)


class Monitor:
    """The monitor loop, the restart policy and the end of the run."""

    def __init__(
        self,
        config: SupervisorConfig,
        state: RunState,
        events: Publisher,
        stopper: Stopper,
        launcher: Launcher,
        pump: PumpLink,
        wakeup: Wakeup,
        guard: Guard | None = None,
        *,
        collectives: CollectiveWatch | None = None,
        beat: Beat | None = None,
    ) -> None:
        self._config = config
        self._state = state
        self._events = events
        self._stopper = stopper
        self._launcher = launcher
        self._pump = pump
        self._wakeup = wakeup
        self._guard = guard
        self._collectives = collectives
        self._beat = beat
        """The run's readings, driven by this loop (None: none)."""
        self._thread: threading.Thread | None = None
        self._over: Over | None = None
        """An end the kernel decided in this pass: told once the pass's pump calls have read
        the last ranks' final lines, which the suspect reads (``_end``)."""
        self.signals: SignalInbox | None = None
        """The handled signals' inbox, while ``install_signal_handlers``' handlers are in
        place (set and cleared under the state lock)."""

    def start(self) -> None:
        """Start the thread, and a first pass at once (ranks may have exited already)."""
        self._thread = threading.Thread(target=self._loop, name="rankvisor-monitor", daemon=True)
        self._thread.start()
        self._wakeup.wake()

    def join(self, timeout: float) -> None:
        """Wait for the thread to end (it ends once ``state.closed`` is seen)."""
        if self._thread is not None:
            self._thread.join(timeout=timeout)

    # -- the loop -------------------------------------------------------------------------

    def _loop(self) -> None:
        """The loop under a watchdog: should a pass raise where no step catches it, say
        so, SIGKILL every rank (a run nobody watches must not hang) and go on watching
        until their exits are recorded and the run is over."""
        crashes = 0
        while True:
            try:
                self._watch()
                return
            except Exception as e:  # noqa: BLE001 - the watchdog: anything but a clean end
                crashes += 1
                log.exception("the monitor loop failed")
                if crashes > _MAX_CRASHES:
                    log.critical("the monitor loop keeps failing; it gives up")
                    return
                self._stop_after_crash(e)

    def _stop_after_crash(self, error: Exception) -> None:
        state = self._state
        with state.lock:
            first = not state.shutting_down
            if first:
                self._events.notice(
                    f"the supervisor's monitor failed ({type(error).__name__}: {error}): "
                    "stopping the run (SIGKILL to every rank)",
                    "error",
                )
            self._stopper.apply(state.shut_down(None))
        time.sleep(0.05)  # never spin on a failure that repeats at once
        self._events.flush()

    def _watch(self) -> None:
        state = self._state
        failed_steps = 0
        # One poll set for the run, brought up to date each pass (ranks come and go).
        poller = select.poll()
        registered: set[int] = set()
        while True:
            with state.lock:
                if state.closed:
                    return
                live = state.live()
                fds = [p.pidfd for p in _procs(live) if p.pidfd is not None]
                polling_needed = any(p.pidfd is None for p in _procs(live))
                deadline = self._stopper.next_deadline()
                guard_fd = self._guard.watch_fd() if self._guard is not None else None
                signals_fd = self.signals.fd if self.signals is not None else -1
            due = self._beat.next_due() if self._beat is not None else None
            now = clock.monotonic()
            timeout_ms: float | None = None
            for at in (deadline, due):
                if at is not None:
                    # poll() takes a C int of milliseconds: a far deadline is woken for again.
                    ms = min(_MAX_POLL_MS, max(0.0, (at - now) * 1000.0))
                    timeout_ms = ms if timeout_ms is None else min(timeout_ms, ms)
            if polling_needed:
                # No pidfd (old kernel): look again every 10 ms.
                timeout_ms = 10.0 if timeout_ms is None else min(timeout_ms, 10.0)
            wanted = {self._wakeup.fd, *fds, *(() if guard_fd is None else (guard_fd,)),
                      *(() if signals_fd < 0 else (signals_fd,))}
            for fd in registered - wanted:
                poller.unregister(fd)
            for fd in wanted - registered:
                poller.register(fd, select.POLLIN)
            registered = wanted
            try:
                ready = poller.poll(None if timeout_ms is None else int(timeout_ms) + 1)
                # A wake-up written after poll returned is emptied here too: it counts.
                woken = bool(self._wakeup.drain())
            except OSError:
                return  # our pipe was closed: shutdown is over
            now = clock.monotonic()
            # Only a reading fell due: nothing of the run can have changed (an exit, a
            # command and a signal each wake a descriptor; escalations have their deadline).
            if (ready or woken or polling_needed
                    or (deadline is not None and deadline <= now + 0.001)):
                failed_steps = self._pass(failed_steps)
            if self._beat is not None:
                self._beat.run_due(clock.monotonic())

    def _pass(self, failed_steps: int) -> int:
        """One pass over the run; returns the count of passes in a row that failed."""
        try:
            with self._state.lock:
                self._reconcile()
            failed_steps = 0
        except Exception as e:  # noqa: BLE001 - the monitor must survive a bug in one step
            # The pidfd that woke us is still readable, so a step that fails every time
            # would spin a core and fill the log: log the first few, then back off.
            failed_steps += 1
            if failed_steps <= 3:
                log.exception("monitor step failed")
            elif failed_steps == 4:
                log.error("monitor step keeps failing (%s); retrying every 0.5 s", e)
            time.sleep(min(0.5, 0.01 * failed_steps))
        # Outside the lock: pump calls first (a rank's last lines), then the end, then the
        # events.
        self._pump.run_ops()
        if self._over is not None:
            with self._state.lock:
                self._end()
        self._events.flush()
        return failed_steps

    def _reconcile(self) -> None:
        """Bring everything up to date; caller holds the lock. The kernel decides
        (``RunKernel.step``); this reads what it needs and carries out what it answers."""
        state = self._state
        self._check_guard()
        for sig in self.signals.take() if self.signals is not None else ():
            self._carry_out(state.step(SignalReceived(sig), clock.monotonic()))
        for slot in state.slots.values():
            proc = slot.proc
            if slot.alive and proc is not None:
                code = proc.observe_exit()
                if code is not None:
                    self._on_exit(slot, proc, code)
        now = clock.monotonic()
        self._stopper.start_captures(now)
        while True:
            held = tuple(held_ranks(state)) if state.teardown_held else ()
            finished = state.finished is not None or (
                self._over is not None and self._over.kind == "finish")
            effects = state.step(Tick(held, finished=finished), now)
            self._carry_out(effects)
            # Ranks were started: only now can the end be judged (a failed start is final).
            if not any(isinstance(e, (Respawn, NewAttempt)) for e in effects):
                break
        state.changed.notify_all()

    def _carry_out(self, effects: list[Effect]) -> None:
        """The kernel's effects, in order: stops and words go to the Stopper; the notes of a
        failure, the starts and the end are ours."""
        state = self._state
        for effect in effects:
            if isinstance(effect, FailedOnOwn):
                if effect.first:
                    self._capture_collectives(effect.rank)
                # Output after the first failure (tracebacks, the teardown) is not what the
                # ranks were doing before it: the suspect's silence is measured up to here.
                state.activity.cutoff(
                    _error_ns(state.slots[effect.rank]) or effect.exit_time_ns
                    or clock.wall_ns())
            elif isinstance(effect, Respawn):
                self._launcher.respawn(state.slots[effect.rank])
            elif isinstance(effect, NewAttempt):
                self._launcher.start_attempt(first=False)
            elif isinstance(effect, Over):
                self._over = effect
            else:
                self._stopper.apply([effect])

    def _check_guard(self) -> None:
        guard = self._guard
        if guard is None or self._state.closed:
            return
        old = guard.pid
        new = guard.restart_if_dead()
        if new is not None:
            self._events.notice(
                f"the guard process (pid {old}) died; started a new one (pid {new})", "warning"
            )

    # -- exits ----------------------------------------------------------------------------

    def _on_exit(self, slot: RankSlot, proc: RankProcess, code: int) -> None:
        state = self._state
        slot.exitcode = code
        slot.exit_time_ns = proc.exit_time_ns
        # Ours only if our signal plausibly ended it (see RankSlot.exit_caused_by_us): a
        # rank that failed by itself during a teardown, or before our signal reached it, is
        # a real failure and may be the root cause.
        caused = slot.exit_caused_by_us(code, slot.exit_time_ns)
        if caused and raised_before_stop(
            slot.stderr_path, slot.stop_signal_ns, slot.stop_caught, slot.exit_time_ns
        ):
            caused = False  # it had raised before our signal reached its shutdown
        if code != 0:
            slot.failure = ProcessFailure(
                slot.rank, proc.pid, code, slot.error_file,
                exit_time_ns=slot.exit_time_ns, caused_by_us=caused,
            )
        held = tuple(held_ranks(state)) if code != 0 and not caused else ()
        effects = state.step(RankExited(slot.rank, code, slot.exit_time_ns, caused, held),
                             clock.monotonic())
        if code != 0:
            # Read before the rank's cgroup is released; published with its exit.
            slot.exit_cause = _exit_cause(slot, proc, code)
            if self._config.stdin == "null" and not caused:
                slot.exit_cause = note_null_stdin(slot.exit_cause, slot.stderr_path)
        self._launcher.retire(slot, proc)
        self._carry_out(effects)

    def _capture_collectives(self, rank: int) -> None:
        """At an attempt's first failure, before the teardown signals the others: what every
        live rank's Flight Recorder says now (bounded; their server answers off their
        Python threads), saved on a thread of its own."""
        watch = self._collectives
        if watch is None:
            return
        paths = watch.live_paths()
        try:
            if paths:
                watch.ask(paths, timeout_s=0.5)
            watch.capture_later(f"rank {self._state.shown(rank)} failed", {}, 0.0)
        except Exception:  # noqa: BLE001 - a reading must never touch the run
            log.exception("collectives capture at the first failure failed")

    # -- the end --------------------------------------------------------------------------

    def _end(self) -> None:
        """Tell the end the kernel decided; caller holds the lock. Nothing started ranks
        since it was decided: the kernel's starts are this thread's, and an agent's next
        round waits for this round's result."""
        over, self._over = self._over, None
        state = self._state
        if over is None:
            return
        if over.kind == "round":
            # The agent decides (a new round, or the end): the round's result, unpublished.
            if state.round_result is None:
                state.round_result = self._run_finished()
        elif state.finished is None:
            state.finished = self._run_finished()
            # ``wait()`` returns once this event has been delivered (see Publisher.flush).
            self._events.emit(state.finished)
        state.changed.notify_all()

    def _run_finished(self) -> RunFinished:
        slots = list(self._state.slots.values())
        ended = {s.rank: s.failure for s in slots if s.failure is not None}
        # A rank our own signal ended did not fail: it is reported apart, as stopped.
        failures = {r: f for r, f in ended.items() if not f.caused_by_us}
        result = RunProcsResult(
            return_values={},
            failures=failures,
            stdouts={s.rank: s.stdout_path for s in slots},
            stderrs={s.rank: s.stderr_path for s in slots},
            stopped={r: f for r, f in ended.items() if f.caused_by_us},
        )
        # None when nobody failed on their own (terminate-all, quit, shutdown).
        return RunFinished(
            result, self._state.attempt, root_cause_rank(failures), self._suspect(slots)
        )

    def _suspect(self, slots: list[RankSlot]) -> Suspect | None:
        """The rank most likely to have started the failure (engine.forensics.suspect)."""
        real = [s for s in slots if s.failure is not None and not s.failure.caused_by_us]
        if not real:
            return None
        first_ns = min(s.exit_time_ns or clock.wall_ns() for s in real)
        errors_ns = {s.rank: _error_ns(s) for s in real}
        # Where the first failure began (see _error_ns): what the ranks wrote is read up to
        # there, as the activity's cutoff is.
        began_ns = min(min(first_ns, errors_ns[s.rank] or first_ns) for s in real)
        activity = self._state.activity
        facts = []
        for s in slots:
            failed = s.failure is not None and not s.failure.caused_by_us
            raised = not failed and _raised_before_stop(s)
            ended_by = _ended_by_us(s) if failed else ""
            message, said = _error_text(s) if failed or raised else ("", "")
            if ended_by:
                message, said = _own_error(s)
            facts.append(RankFacts(
                rank=s.rank,
                failed=failed,
                exitcode=s.exitcode,
                exit_time_ns=s.exit_time_ns,
                message=message,
                stopped_by=s.stop_reason if s.caused_by_us else None,
                activity=activity.reading(s.rank, until_ns=began_ns),
                said=said,
                raised_before_stop=raised,
                ended_by=ended_by,
                error_ns=errors_ns.get(s.rank),
            ))
        try:
            return find_suspect(
                facts,
                list(self._state.signal_log),
                pauses=self._state.pauses.at(first_ns, grace_ns=int(TOGETHER_S * 1e9)),
                silence_factor=self._config.suspect_silence_factor,
                silence_min_s=self._config.suspect_silence_min_s,
                collectives=self._collectives.verdicts() if self._collectives else (),
                # torch's own texts (a mismatch, a monitored barrier) may be in a rank the
                # teardown stopped: every rank's last stderr lines are read for them.
                texts={s.rank: "\n".join(last_lines(s.stderr_path, _ERROR_TAIL))
                       for s in slots if s.stderr_path},
            )
        except Exception:  # noqa: BLE001 - a reading must never keep a run from finishing
            log.exception("could not work out the suspect")
            return None


def held_ranks(state: RunState) -> list[int]:
    """The live ranks a person is debugging at a post-mortem prompt (a debug hold: their
    hold file names their own pid, and nobody asked them to stop); caller holds the lock.
    Only a rank started under ``--post-mortem`` can hold: no other's file is read."""
    held = []
    for s in state.live():
        if ENV_POST_MORTEM not in s.env:
            continue
        hold = read_hold(s.error_file) if s.error_file else None
        if hold is not None and hold.get("pid") == s.pid and s.stop_reason is None:
            held.append(s.rank)
    return held

_MAX_POLL_MS = 3_600_000.0
"""The longest single sleep: an hour, far inside poll()'s C int of milliseconds."""

_MAX_CRASHES = 3
"""Passes the watchdog restarts after an uncaught failure before it gives up."""

_ERROR_TAIL = 8
"""Last stderr lines read for a failure without an error file's message."""


def _raised_before_stop(slot: RankSlot) -> bool:
    """Whether a rank the teardown stopped had written its own error file before the
    teardown's signal reached it (its ``timestamp``, in whole seconds, is not later)."""
    failure = slot.failure
    if failure is None or slot.stop_reason != "teardown" or slot.stop_signal_ns is None:
        return False
    data = failure.error_file_data if isinstance(failure.error_file_data, dict) else {}
    message = data.get("message")
    extra = message.get("extraInfo") if isinstance(message, dict) else None
    stamp = extra.get("timestamp") if isinstance(extra, dict) else data.get("timestamp")
    try:
        seconds = int(str(stamp))
    except ValueError:
        return False
    return 0 < seconds <= -(-slot.stop_signal_ns // 1_000_000_000)


def _error_ns(slot: RankSlot) -> int | None:
    """When a rank recorded its error: its error file's write time (torch's ``record``
    writes it as the exception leaves ``main``), None without one written before its exit.
    Its failure began there; the exit may come seconds later (interpreter and process group
    teardown on a loaded machine), while its peers, whose collectives failed with it, have
    stopped writing already. One stat, once per failed exit."""
    exit_ns = slot.exit_time_ns
    if not slot.error_file or exit_ns is None:
        return None
    try:
        written = os.stat(slot.error_file).st_mtime_ns
    except OSError:
        return None
    return written if written <= exit_ns else None


def _ended_by_us(slot: RankSlot) -> str:
    """The name of our signal that ended a rank which had failed on its own first (see
    ``Monitor._on_exit``: it raised before the signal cut its exit short); "" otherwise."""
    code = slot.exitcode
    if code is None or code >= 0 or slot.caused_by_us or -code not in slot.signals_ns:
        return ""
    return signal_name(-code)


def _own_error(slot: RankSlot) -> tuple[str, str]:
    """What a rank our signal ended had raised on its own: its error file's message when
    it wrote one in time, else the exception line its traceback ends with ("" when the
    signal cut the traceback short: torch's "Signal 15 received" is not its error)."""
    failure = slot.failure
    if failure is not None and os.path.isfile(failure.error_file):
        return _error_text(slot)
    line = raised_line(slot.stderr_path)
    return line, line


def _error_text(slot: RankSlot) -> tuple[str, str]:
    """A failed rank's error to classify (the error file's message, else its last stderr
    lines) and the one line of it worth quoting."""
    failure = slot.failure
    message: object = failure.message if failure is not None else ""
    if isinstance(message, dict):
        message = message.get("message", "")
    lines = [ln for ln in str(message or "").splitlines() if "To enable traceback" not in ln]
    text = "\n".join(lines).strip()
    if text:
        return text, text.splitlines()[-1]
    tail = [ln for ln in last_lines(slot.stderr_path, _ERROR_TAIL) if ln.strip()]
    # A signal's death leaves faulthandler's stack in stderr: its last line is a frame.
    said = tail[-1] if tail and (slot.exitcode or 0) > 0 else ""
    return "\n".join(tail), said


def _exit_cause(slot: RankSlot, proc: RankProcess, code: int) -> ExitCause | None:
    """Why the rank ended, from what only the supervisor has: the signals it sent, the
    rank's cgroup (read before it is released), and the kernel log (for a SIGKILL it did
    not send that no cgroup explains). Reads the end of stderr: a few small reads, once per
    failed exit; never lets a read error stop the recording of the exit."""
    try:
        memory = proc.memory()
        message = slot.failure.message if slot.failure is not None else ""
        if isinstance(message, dict):
            message = message.get("message", "")
        return diagnose(
            code,
            caused_by_us=slot.caused_by_us,
            stop_reason=slot.stop_reason,
            our_signals=tuple(slot.signals_ns),
            oom_kills=memory.oom_kills if memory is not None else None,
            message=str(message or ""),
            stderr_path=slot.stderr_path,
            pid=proc.pid,
            started_monotonic=slot.started_monotonic,
            kernel_log=True,
            timer_scope=slot.timer_scope,
        )
    except Exception:  # noqa: BLE001 - a cause is a nicety; the exit must be recorded
        log.exception("could not tell why rank %s ended", slot.rank)
        return None


def _procs(slots: list[RankSlot]) -> list[RankProcess]:
    return [s.proc for s in slots if s.proc is not None]
