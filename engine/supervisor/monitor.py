"""The Supervisor's monitor thread: exits, deadlines, restarts, the end of the run.

One loop, one thread, so that every consequence of an exit (state event, end of an
escalation, teardown of the others, a restart, the restart policy, RunFinished) happens in
one place and in one order. It sleeps in ``poll()`` on:

* each live rank's pidfd, readable the moment the rank exits (the goal is an event within
  50 ms of an exit; in practice it is about a millisecond);
* a wake-up pipe, written by commands, signal handlers and ``shutdown``;
* a timeout equal to the nearest escalation deadline (SIGKILL time, or the end of the
  bounded wait after a SIGKILL).

Reaping is done by engine.process's watcher thread; ``proc.poll()`` here only reads the result
(or reaps first if the watcher has not yet), so nothing is ever signalled after its reap.

A mixin of ``engine.supervisor.core.Supervisor``; the attributes it uses are set there.
"""

from __future__ import annotations

import logging
import os
import select
import signal
import time
from typing import Any

from engine.errors import root_cause_rank
from engine.events import AttemptStarted, EscalationFinished, RankRestarted, RunFinished
from engine.states import RankState, final_state_for
from engine.supervisor.agent_env import RESTART_COUNT_ENV, build_rank_env
from engine.supervisor.rank_slot import RankSlot, incarnation_dir

__all__ = ["MonitorMixin"]

log = logging.getLogger(__name__)

_STREAMS = ("stdout", "stderr")


class MonitorMixin:
    """The monitor loop and everything that starts processes."""

    _lock: Any
    _slots: dict[int, RankSlot]

    # -- the loop -------------------------------------------------------------------------

    def _monitor_loop(self: Any) -> None:
        while True:
            with self._lock:
                if self._closed:
                    return
                fds = [s.proc.pidfd for s in self._live() if s.proc.pidfd is not None]
                polling_needed = any(s.proc.pidfd is None for s in self._live())
                deadline = self._escalations.next_deadline()
            timeout_ms: float | None = None
            if deadline is not None:
                timeout_ms = max(0.0, (deadline - time.monotonic()) * 1000.0)
            if polling_needed:
                # No pidfd (old kernel): look again every 10 ms.
                timeout_ms = 10.0 if timeout_ms is None else min(timeout_ms, 10.0)
            poller = select.poll()
            poller.register(self._wake_r, select.POLLIN)
            for fd in fds:
                poller.register(fd, select.POLLIN)
            try:
                poller.poll(None if timeout_ms is None else int(timeout_ms) + 1)
                while os.read(self._wake_r, 4096):
                    pass
            except BlockingIOError:
                pass
            except OSError:
                return  # our pipe was closed: shutdown is over
            try:
                with self._lock:
                    self._reconcile()
            except Exception:  # noqa: BLE001 - the monitor must survive a bug in one step
                log.exception("monitor step failed")
            self._run_pump_ops()
            self._flush()

    def _reconcile(self: Any) -> None:
        """Bring everything up to date; caller holds the lock. Order matters."""
        self._handle_our_signals()
        for slot in self._slots.values():
            if slot.alive and slot.proc is not None and slot.proc.poll() is not None:
                self._on_exit(slot)
        self._run_deadlines(time.monotonic())
        if not self._shutting_down:
            for slot in self._slots.values():
                if slot.after_exit == "restart" and slot.state.is_final:
                    self._respawn(slot)
            if self._attempt_pending and all(s.state.is_final for s in self._slots.values()):
                self._start_attempt(first=False)
        self._maybe_finish()
        self._changed.notify_all()

    def _handle_our_signals(self: Any) -> None:
        while self._signals_pending:
            sig = self._signals_pending.pop(0)
            if self.received_signal is None:
                # SIGTERM/SIGINT/SIGHUP to us: forward the same signal to every rank,
                # SIGKILL at the term timeout (torch's agent does the same on SignalException).
                self.received_signal = sig
                self._shutting_down = True
                self._attempt_pending = False
                self._notice(
                    f"got {signal.Signals(sig).name}: stopping all ranks "
                    f"(SIGKILL in {self.config.term_timeout:g} s)",
                    "warning",
                )
                self._stop_ranks(self._live(), "shutdown", sig, self.config.term_timeout)
            else:
                # A second signal: the person means it. SIGKILL now.
                self._notice(f"got {signal.Signals(sig).name} again: killing all ranks", "warning")
                self._kill_now(self._live(), "shutdown")

    # -- exits ----------------------------------------------------------------------------

    def _on_exit(self: Any, slot: RankSlot) -> None:
        from engine.errors import ProcessFailure

        proc = slot.proc
        code = int(proc.exitcode)
        slot.exitcode = code
        slot.exit_time_ns = proc.exit_time_ns
        # Ours only if our signal plausibly ended it (see RankSlot.exit_caused_by_us): a
        # rank that failed by itself during a teardown, or before our signal reached it, is
        # a real failure and may be the root cause.
        caused = slot.exit_caused_by_us(code, slot.exit_time_ns)
        slot.caused_by_us = caused
        if caused and slot.stop_reason is None:
            slot.stop_reason = "signal"
        if code != 0:
            slot.failure = ProcessFailure(
                slot.rank, proc.pid, code, slot.error_file,
                exit_time_ns=slot.exit_time_ns, caused_by_us=caused,
            )
        # STARTING/RUNNING/TERMINATING/RESTARTING -> SUCCEEDED/FAILED/SIGNALLED: it exited
        self._emit(slot.move(final_state_for(code)))
        for esc in self._escalations.rank_gone(slot.rank):
            self._emit(EscalationFinished(esc.ranks, tuple(esc.killed)))
        self._sampler.untrack(slot.rank)
        self._guard.forget(proc.pid)
        self._pump_remove(slot)
        try:
            proc.close()
        except RuntimeError:
            pass
        if code != 0 and not caused:
            self._real_failure = True
            if self.config.teardown_on_failure and not self._shutting_down:
                # torch's rule: one rank failed, so the others would hang in their next
                # collective; stop them (with escalation) and let the policy decide.
                others = [s for s in self._live() if s.stop_reason is None]
                if others:
                    self._notice(
                        f"rank {slot.rank} failed (exit code {code}): stopping the other ranks",
                        "warning",
                    )
                self._stop_ranks(others, "teardown", signal.SIGTERM, self.config.term_timeout)

    def _run_deadlines(self: Any, now: float) -> None:
        for esc, ranks in self._escalations.due(now):
            # Deadline passed and these ranks still live: SIGKILL them and their groups.
            self._signal_slots(
                [self._slots[r] for r in ranks if self._slots[r].alive and self._slots[r].proc],
                signal.SIGKILL,
            )
            if ranks:
                self._notice(
                    f"rank(s) {', '.join(map(str, ranks))} outlived the {esc.timeout_s:g} s "
                    f"deadline after {signal.Signals(esc.sig).name}: sent SIGKILL",
                    "warning",
                )
        for esc in self._escalations.overdue(now):
            self._emit(EscalationFinished(esc.ranks, tuple(esc.killed)))
            if esc.stuck:
                # Uninterruptible sleep (D state) delays even SIGKILL; we stop waiting,
                # the kernel will reap them when their I/O returns.
                self._notice(
                    f"rank(s) {', '.join(map(str, esc.stuck))} did not exit after SIGKILL",
                    "error",
                )

    # -- the end --------------------------------------------------------------------------

    def _maybe_finish(self: Any) -> None:
        if self._finished is not None or not self._started:
            return
        if any(not s.state.is_final or s.after_exit for s in self._slots.values()):
            return
        if self._attempt_pending:
            return
        if self._real_failure and self._restarts_left > 0 and not self._shutting_down:
            # torch's agent policy: any failure restarts the whole group while restarts last.
            self._restarts_left -= 1
            self._notice(
                f"restarting all ranks as attempt {self._attempt + 1} "
                f"({self._restarts_left} restart(s) left)",
                "warning",
            )
            self._start_attempt(first=False)
            return
        self._finished = self._run_finished()
        # ``wait()`` returns once this event has been delivered (see Supervisor._flush).
        self._emit(self._finished)

    def _run_finished(self: Any) -> RunFinished:
        from engine.pcontext import RunProcsResult

        slots = list(self._slots.values())
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
        return RunFinished(result, self._attempt, root_cause_rank(failures))

    # -- starting processes ---------------------------------------------------------------

    def _rank_env(self: Any, slot: RankSlot) -> dict[str, str]:
        env = build_rank_env(
            self._env_opts,
            slot.rank,
            restart_count=self._attempt,
            rank_restart_count=slot.restart_count,
        )
        env.update(self.config.env)
        env.update(self.config.rank_env.get(slot.rank, {}))
        env.update(self._guard.env)
        if self._watchdog is not None:
            env.update(self._watchdog.rank_env)
        return env

    def _start_attempt(self: Any, *, first: bool) -> None:
        """Spawn every rank into a fresh ``attempt_<n>`` (the first, or n+1)."""
        if not first:
            self._attempt += 1
        self._attempt_pending = False
        self._real_failure = False
        self._finished = None
        self._finished_event.clear()
        for slot in self._slots.values():
            if not first:
                slot.restart_count += 1
            slot.incarnation = 0
            slot.env = self._rank_env(slot)
        envs = {r: s.env for r, s in self._slots.items()}
        self._dest = dest = self._logs.reify(envs)  # sets TORCHELASTIC_ERROR_FILE per rank
        self._pump_filters(dest)
        slots = list(self._slots.values())
        for slot in slots:
            slot.begin_incarnation(
                self._attempt, 0,
                (dest.stdouts[slot.rank], dest.stderrs[slot.rank], dest.error_files[slot.rank]),
            )
        from engine.process.rank_process import on_spawner_thread

        # One hand-over to the spawner thread for the whole group (fast for many ranks).
        procs = on_spawner_thread(lambda: [self._spawn_or_error(s) for s in slots])
        for slot, proc in zip(slots, procs, strict=True):
            self._started_proc(slot, proc, restart=not first, whole_attempt=True)
        attempt_dir = os.path.dirname(os.path.dirname(dest.error_files[0]))
        self._emit(
            AttemptStarted(self._attempt, attempt_dir, tuple(s.pid or 0 for s in slots))
        )

    def _respawn(self: Any, slot: RankSlot) -> None:
        """Start one rank again, alone, into ``restart_<k>/`` of its attempt dir."""
        assert self._dest is not None
        slot.restart_count += 1
        slot.incarnation += 1
        rank_dir = os.path.dirname(self._dest.error_files[slot.rank])
        d = incarnation_dir(rank_dir, slot.restart_count)
        os.makedirs(d, exist_ok=True)
        slot.begin_incarnation(
            self._attempt, slot.incarnation,
            (
                os.path.join(d, "stdout.log"),
                os.path.join(d, "stderr.log"),
                os.path.join(d, "error.json"),
            ),
        )
        slot.env[RESTART_COUNT_ENV] = str(slot.restart_count)
        self._finished = None
        self._finished_event.clear()
        self._started_proc(slot, self._spawn_or_error(slot), restart=True, whole_attempt=False)

    def _spawn_or_error(self: Any, slot: RankSlot) -> Any:
        from engine.process.rank_process import RankProcess

        try:
            return RankProcess.spawn(
                slot.argv, slot.env, slot.stdout_path, slot.stderr_path,
                cwd=self.config.cwd, stdin=self._stdin,
                cpu_affinity=self._cpu_sets.get(slot.rank),
            )
        except (OSError, ValueError) as e:
            return e

    def _started_proc(
        self: Any, slot: RankSlot, proc: Any, *, restart: bool, whole_attempt: bool
    ) -> None:
        """Record a spawn (or its failure) and publish it."""
        if isinstance(proc, BaseException):
            self._spawn_failed(slot, proc, restart)
            return
        slot.proc = proc
        self._guard.add_rank(proc.pid, proc.pgid)
        self._sampler.track(slot.rank, proc.pid)
        self._pump_add(slot)
        if restart:
            # SUCCEEDED/FAILED/SIGNALLED -> STARTING: restarted (alone or with its attempt)
            self._emit(slot.move(RankState.STARTING))
            self._emit(
                RankRestarted(
                    slot.rank, proc.pid, slot.restart_count, slot.attempt, whole_attempt,
                    slot.stdout_path, slot.stderr_path, slot.error_file,
                )
            )
        # STARTING -> RUNNING: the exec succeeded
        self._emit(slot.move(RankState.RUNNING))
        self._wake()  # the monitor must add this pidfd to its poll set

    def _spawn_failed(self: Any, slot: RankSlot, error: BaseException, restart: bool) -> None:
        from engine.errors import ProcessFailure

        if restart:
            # final -> STARTING: we tried to start it again
            self._emit(slot.move(RankState.STARTING))
        slot.exitcode = 127  # the shell's "command could not be run"
        slot.exit_time_ns = time.time_ns()
        slot.failure = ProcessFailure(
            slot.rank, 0, 127, slot.error_file, exit_time_ns=slot.exit_time_ns
        )
        self._notice(f"rank {slot.rank} could not start: {error}", "error")
        # STARTING -> FAILED: the spawn itself failed
        self._emit(slot.move(RankState.FAILED))
        self._real_failure = True
        if self.config.teardown_on_failure:
            others = [s for s in self._live() if s.stop_reason is None]
            self._stop_ranks(others, "teardown", signal.SIGTERM, self.config.term_timeout)

    # -- the output pump (C's engine.output.pump) -------------------------------------------------
    # Pump calls are queued under the state lock and run by ``_run_pump_ops`` outside it:
    # the pump calls our sink while holding its own lock, and a sink may call back into
    # the Supervisor, so holding both locks in opposite orders could deadlock.

    def _make_pump(self: Any) -> Any:
        try:
            from engine.output.pump import OutputPump
        except ImportError:
            log.warning("engine.output.pump is not available: no RankOutput events")
            return None

        def sink(batch: list[Any]) -> None:
            for event in batch:
                self._publish_now(event)

        return OutputPump(
            sink, name="rankvisor-pump", debounce=self.config.output_debounce_s
        ).start()

    def _run_pump_ops(self: Any) -> None:
        """Run queued pump calls, in order (monitor thread, or ``start`` before it runs)."""
        while self._pump_ops:
            op = self._pump_ops.popleft()
            try:
                op()
            except Exception:  # noqa: BLE001 - output is a view; the files keep everything
                log.exception("output pump call failed")

    def _pump_filters(self: Any, dest: Any) -> None:
        if self._pump is None:
            return
        for stream, needles, path in (
            ("stdout", self.config.stdout_filters, dest.filtered_stdout),
            ("stderr", self.config.stderr_filters, dest.filtered_stderr),
        ):
            if needles:
                self._pump_ops.append(
                    lambda st=stream, n=list(needles), p=path: self._pump.add_filter(
                        st, n, p, dict(self._prefixes), name=self.config.role
                    )
                )

    def _pump_add(self: Any, slot: RankSlot) -> None:
        if self._pump is None:
            return
        for stream, path in zip(_STREAMS, (slot.stdout_path, slot.stderr_path), strict=True):
            self._pump_ops.append(
                lambda r=slot.rank, st=stream, p=path, a=slot.attempt: self._pump.add(r, st, p, a)
            )

    def _pump_remove(self: Any, slot: RankSlot) -> None:
        if self._pump is None:
            return
        for stream in _STREAMS:
            # drain=True: the rank's last lines are delivered before its exit event.
            self._pump_ops.append(
                lambda r=slot.rank, st=stream: self._pump.remove(r, st, drain=True)
            )
