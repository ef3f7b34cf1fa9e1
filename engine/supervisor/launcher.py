"""Starting ranks: a whole attempt (``attempt_<n>``), or one rank again, alone.

Every spawn is recorded the same way: the guard learns the rank's process group (so it
dies with us), the stats sampler tracks it, the pump tails its files, and its state events
are queued. Where the run has cgroups, each spawn gets a fresh cgroup that the rank joins
before it execs; when the rank is reaped, whatever it left in there is killed and the
cgroup removed (``RankProcess.close``). A spawn that fails (no such program, a bad cwd,
a cgroup that cannot be made or joined) is a failure of that rank, not an exception: it
becomes FAILED with exit code 127, the shell's "command could not be run". All of it runs
with the state lock held (on the monitor thread, or in ``start``).
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
from collections.abc import Callable

from .. import clock
from ..errors import ProcessFailure
from ..events import AttemptStarted, RankRestarted
from ..forensics.environ import write_rank_envs_later
from ..forensics.exit_cause import ExitCause
from ..forensics.nccl_dumps import nccl_env
from ..forensics.worker_server import prepare, socket_path
from ..logs_specs import DefaultLogsSpecs
from ..process.cgroups import RunCgroups
from ..process.guard import Guard
from ..process.py_bootstrap import ENV_WORKER_SOCKET
from ..process.rank_process import RankProcess, on_spawner_thread
from ..process.stdin_pipe import RankStdin
from ..states import RankState
from .agent_env import RESTART_COUNT_ENV, EnvOptions, build_rank_env
from .collective_watch import recorder_env
from .input_watch import InputWatch
from .publisher import Publisher
from .pump_link import PumpLink
from .rank_slot import RankSlot, incarnation_dir
from .run_config import SupervisorConfig
from .state import RunState, Wakeup
from .stats import StatsSampler
from .stopper import Stopper
from .timer_watchdog import Watchdog

__all__ = ["Launcher"]

log = logging.getLogger(__name__)


class Launcher:
    """Spawns ranks into their files and keeps the guard, sampler and pump in step."""

    def __init__(
        self,
        config: SupervisorConfig,
        state: RunState,
        events: Publisher,
        stopper: Stopper,
        pump: PumpLink,
        *,
        env_opts: EnvOptions,
        logs: DefaultLogsSpecs,
        guard: Guard,
        sampler: StatsSampler,
        watchdog: Watchdog | None,
        wakeup: Wakeup,
        input_watch: InputWatch,
    ) -> None:
        self._config = config
        self._state = state
        self._events = events
        self._said_no_socket = False
        self._stopper = stopper
        self._pump = pump
        self._env_opts = env_opts
        self._logs = logs
        self._guard = guard
        self._sampler = sampler
        self._watchdog = watchdog
        self._wakeup = wakeup
        self._input = input_watch
        self._cpu_sets = config.cpu_sets()  # NUMA placement, the same for every incarnation
        self._cgroups: RunCgroups | None = None
        self._env_records: list[tuple[str, dict[str, str]]] = []
        """(directory, env additions) of the ranks just started: their env.json to write."""
        self.round_env: dict[int, dict[str, str]] = {}
        """Set by an agent before each round (multi-node): each local rank's variables."""
        self.before_first_spawn: list[Callable[[str], None]] = []
        """Called with the run's directory once it exists, before the first ranks start
        (``Supervisor.before_spawn``)."""

    def use_cgroups(self, cgroups: RunCgroups | None) -> None:
        """Spawn every later rank into a cgroup of its own under ``cgroups``."""
        self._cgroups = cgroups

    def _rank_env(self, slot: RankSlot) -> dict[str, str]:
        env = build_rank_env(
            self._env_opts,
            slot.rank,
            restart_count=self._state.attempt,
            rank_restart_count=slot.restart_count,
        )
        # A driven run: the agent's variables for this round (RANK, WORLD_SIZE, ...).
        env.update({
            k: v for k, v in self.round_env.get(slot.rank, {}).items()
            if k != "TORCHELASTIC_RESTART_COUNT"  # set after reify (see start_attempt)
        })
        env.update(self._config.env)
        env.update(self._config.rank_env.get(slot.rank, {}))
        if self._config.debug is not None:
            env.update(self._config.debug.env(slot.rank))
        if self._config.serves_collectives(slot.rank):
            env.update(recorder_env(env))
        env.update(self._guard.env)
        if self._watchdog is not None:
            env.update(self._watchdog.rank_env)
        return env

    def start_attempt(self, *, first: bool) -> None:
        """Spawn every rank into a fresh ``attempt_<n>`` (the first, or n+1)."""
        state = self._state
        state.begin_attempt(first=first)
        state.not_finished()
        state.activity.new_attempt(state.attempt)
        state.signal_log.clear()
        for slot in state.slots.values():
            slot.env = self._rank_env(slot)
        envs = {r: s.env for r, s in state.slots.items()}
        state.dest = dest = self._logs.reify(envs)  # sets TORCHELASTIC_ERROR_FILE per rank
        if first:
            for hook in self.before_first_spawn:
                try:
                    hook(self._logs.run_log_dir or "")
                except Exception:  # noqa: BLE001 - the ranks start whatever a hook does
                    log.exception("a hook before the first spawn failed")
        for slot in state.slots.values():
            # The directory is attempt_<our round>; the variable keeps the agent's meaning.
            count = self.round_env.get(slot.rank, {}).get("TORCHELASTIC_RESTART_COUNT")
            if count is not None:
                slot.env["TORCHELASTIC_RESTART_COUNT"] = count
        self._pump.add_filters(dest)
        slots = list(state.slots.values())
        for slot in slots:
            slot.begin_incarnation(
                state.attempt, 0,
                (dest.stdouts[slot.rank], dest.stderrs[slot.rank], dest.error_files[slot.rank]),
            )
            self._fresh_socket(slot)
        # One hand-over to the spawner thread for the whole group (fast for many ranks).
        procs: list[RankProcess | Exception] = on_spawner_thread(
            lambda: [self._spawn_or_error(s) for s in slots]
        )
        for slot, proc in zip(slots, procs, strict=True):
            self._started(
                slot, proc, restart=not first, whole_attempt=True, teardown=False, wake=False
            )
        self._wakeup.wake()  # once for the group: the monitor adds every new pidfd
        self._record_envs()
        if any(isinstance(p, Exception) for p in procs):
            # Only now are all the others recorded: a teardown from inside the loop missed
            # the ranks after the failed one, which then ran on as if nothing had failed.
            self._teardown_after_failed_spawn()
        attempt_dir = os.path.dirname(os.path.dirname(dest.error_files[0]))
        self._events.emit(
            AttemptStarted(state.attempt, attempt_dir, tuple(s.pid or 0 for s in slots))
        )

    def respawn(self, slot: RankSlot) -> None:
        """Start one rank again, alone, into ``restart_<k>/`` of its attempt dir.

        k counts this rank's restarts alone within the attempt (the first is ``restart_1``
        in every attempt), while ``RANKVISOR_RESTART_COUNT`` keeps counting every restart
        of the rank since the run began.
        """
        dest = self._state.dest
        assert dest is not None, "a rank is restarted only after its attempt started"
        self._state.begin_respawn(slot.rank)
        rank_dir = os.path.dirname(dest.error_files[slot.rank])
        d = incarnation_dir(rank_dir, slot.incarnation)
        os.makedirs(d, exist_ok=True)
        slot.begin_incarnation(
            self._state.attempt, slot.incarnation,
            (
                os.path.join(d, "stdout.log"),
                os.path.join(d, "stderr.log"),
                os.path.join(d, "error.json"),
            ),
        )
        slot.env[RESTART_COUNT_ENV] = str(slot.restart_count)
        self._fresh_socket(slot)
        self._state.not_finished()
        self._started(slot, self._spawn_or_error(slot), restart=True, whole_attempt=False)
        self._record_envs()

    def _fresh_socket(self, slot: RankSlot) -> None:
        """Each incarnation's worker server gets a socket path of its own, in its dir (a
        path left by an earlier one would make torch refuse to start the server)."""
        if not self._config.serves_collectives(slot.rank) or not slot.error_file:
            return
        where = os.path.dirname(slot.error_file)
        try:
            path = socket_path(where, create=True)
            prepare(path)
        except OSError as e:  # the rank runs without it; said once a run
            if not self._said_no_socket:
                self._said_no_socket = True
                self._events.notice(f"ranks run without a worker server (no Flight Recorder "
                                    f"answers): {e.strerror or e}", "warning")
            return
        slot.env[ENV_WORKER_SOCKET] = path
        # An NCCL group dumps its FR there on a timeout, or when its pipe is written to.
        # (Checked against the job's own variables: slot.env holds the last incarnation's.)
        job = {**self._config.env, **self._config.rank_env.get(slot.rank, {})}
        slot.env.update(nccl_env(where, job))

    def _record_envs(self) -> None:
        records, self._env_records = self._env_records, []
        write_rank_envs_later(records)

    def retire(self, slot: RankSlot, proc: RankProcess) -> None:
        """The slot's process exited: stop tracking it (its last lines still come).

        Closing it kills what it left in its cgroup, if it has one.
        """
        self._sampler.untrack(slot.rank)
        if slot.stdin is not None:
            slot.stdin.close()  # nobody reads it now; a restart gets a fresh one
        self._input.ended(slot)
        self._guard.forget(proc.pid)
        self._pump.remove(slot)
        sock = slot.env.get(ENV_WORKER_SOCKET)
        if sock:
            try:
                os.unlink(sock)  # its server is gone with it
            except OSError:
                pass
        try:
            proc.close()
        except RuntimeError:
            pass

    def _spawn_or_error(self, slot: RankSlot) -> RankProcess | Exception:
        cgroup = None
        pipe = None
        try:
            if self._cgroups is not None:
                cgroup = self._cgroups.new_rank(slot.rank)
            stdin: int | None = None  # "inherit": ours, as torchrun
            if self._config.stdin == "pipe":
                pipe = RankStdin()  # per incarnation: a restarted rank never reads old lines
                stdin = pipe.read_fd
            elif self._config.stdin == "null":
                stdin = subprocess.DEVNULL
            proc = RankProcess.spawn(
                slot.argv, slot.env, slot.stdout_path, slot.stderr_path,
                cwd=self._config.cwd, stdin=stdin,
                cpu_affinity=self._cpu_sets.get(slot.rank), cgroup=cgroup,
                watched=False,  # the run loop sleeps on its pidfd (monitor.py)
            )
        except (OSError, ValueError) as e:
            if cgroup is not None:
                cgroup.release()  # nothing started in it: removed at once
            if pipe is not None:
                pipe.close()
            return e
        if pipe is not None:
            pipe.spawned()  # the rank holds the read end; we keep the write end
        slot.stdin = pipe
        return proc

    def _started(
        self, slot: RankSlot, proc: RankProcess | Exception, *, restart: bool,
        whole_attempt: bool, teardown: bool = True, wake: bool = True,
    ) -> None:
        """Record a spawn (or its failure) and publish it."""
        if isinstance(proc, Exception):
            self._spawn_failed(slot, proc, restart)
            if teardown:
                self._teardown_after_failed_spawn()
            return
        slot.proc = proc
        self._input.started(slot)
        if slot.error_file:
            # Beside its error.json, written off this lock once the batch has started.
            self._env_records.append((os.path.dirname(slot.error_file), dict(slot.env)))
        self._guard.add_rank(proc.pid, proc.pgid)
        self._sampler.track(
            slot.rank, proc.pid, proc.memory if proc.cgroup is not None else None
        )
        self._pump.add(slot)
        if restart:
            # SUCCEEDED/FAILED/SIGNALLED -> STARTING: restarted (alone or with its attempt)
            self._events.emit(slot.move(RankState.STARTING))
            self._events.emit(
                RankRestarted(
                    slot.rank, proc.pid, slot.restart_count, slot.attempt, whole_attempt,
                    slot.stdout_path, slot.stderr_path, slot.error_file,
                )
            )
        # STARTING -> RUNNING: the exec succeeded
        self._events.emit(slot.move(RankState.RUNNING))
        if wake:
            self._wakeup.wake()  # the monitor must add this pidfd to its poll set

    def _spawn_failed(self, slot: RankSlot, error: Exception, restart: bool) -> None:
        if restart:
            # final -> STARTING: we tried to start it again
            self._events.emit(slot.move(RankState.STARTING))
        slot.exitcode = 127  # the shell's "command could not be run"
        slot.exit_time_ns = clock.wall_ns()
        slot.failure = ProcessFailure(
            slot.rank, 0, 127, slot.error_file, exit_time_ns=slot.exit_time_ns
        )
        slot.exit_cause = ExitCause("not_started", f"could not start: {error}")
        self._events.notice(
            f"rank {self._state.shown(slot.rank)} could not start: {error}", "error"
        )
        # STARTING -> FAILED: the spawn itself failed
        self._events.emit(slot.move(RankState.FAILED))

    def _teardown_after_failed_spawn(self) -> None:
        if self._config.teardown_on_failure:
            others = [s for s in self._state.live() if s.stop_reason is None]
            self._stopper.stop_ranks(others, "teardown", signal.SIGTERM, self._config.term_timeout)
