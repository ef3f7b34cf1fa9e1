"""``RankProcess``: one binary rank as an OS process, signalled safely and watched closely.

The low-level handle under ``SubprocessContext`` and the Supervisor. What it guarantees:

* **Own process group.** Each rank starts in a new session (``setsid``), so its pgid is its
  pid and a group signal reaches everything it forked that stayed in the group.
* **Never a recycled pid.** The leader is signalled through its pidfd
  (``signal.pidfd_send_signal``); the group only while the leader is not yet reaped (a
  zombie still holds its pid, so the pgid cannot have been reused), checked under the same
  lock the reaper takes. Descendants that left the group are found in /proc (the rank's
  tree of ``children`` files, or a scan where the kernel has none) *before* the signal, and
  each is signalled through a pidfd opened after checking its start time. Without pidfds
  (kernel < 5.3) the start-time check is done with /proc and psutil instead.
* **No orphans if we are killed.** Ranks are forked by one long-lived thread
  (``engine.process.spawner``) and get PR_SET_PDEATHSIG=SIGKILL, so they die with this process even
  on SIGKILL. (Their own children do not inherit it; the Supervisor's guard covers those.)
* **Exits seen at once.** A watcher thread polls all pidfds, reaps, and stamps
  ``exit_time_ns`` within about a millisecond of the exit; ``wait_any`` blocks on that. A
  caller that already sleeps on its ranks' pidfds (the Supervisor's run loop) spawns them
  ``watched=False`` and calls ``observe_exit`` when one is readable: no second thread
  wakes for the same exit.
* **No fd leaks.** Log files are opened for the spawn and closed in the parent right after
  (the child has its own copies), so nothing is left open for ranks that exited (torch leaks).

Threads: ``spawn`` may be called from any thread (the fork itself happens on the spawner
thread); ``poll``/``wait``/``send_signal``/``wait_any`` are thread-safe. The watcher thread
(or the caller that watches, through ``observe_exit`` and ``poll``) reaps: nothing else may
``waitpid`` a rank.
"""

from __future__ import annotations

import errno
import os
import select
import signal
import subprocess
import threading
from typing import Any, Collection, Iterable, Mapping, Optional, Sequence

import psutil

from .. import clock
from ..names.private_env import inherited
from . import cgroups as _cgroups
from . import exit_watch as _exitwatch
from . import proc_table as _proctable
from . import spawner as _spawner

__all__ = ["RankProcess", "on_spawner_thread", "resolve_program", "send_signal_all", "wait_any"]

resolve_program = _spawner.resolve_program


def on_spawner_thread(fn: Any) -> Any:
    """Run ``fn()`` on the long-lived spawner thread and return its result.

    Use it to start several ranks in one hand-over (``RankProcess.spawn`` calls made inside
    run inline), or to start processes by other means (``multiprocessing``) that must also
    get a parent thread that never exits. Exceptions from ``fn`` are re-raised here.
    """
    return _spawner.call(fn)


class RankProcess:
    """A started rank. Create it with ``RankProcess.spawn``.

    Attributes:
        pid: the process id.
        pgid: its process group id (equal to ``pid``: the rank leads its own session).
        pidfd: a pidfd for the process, or None where the kernel has none. Valid until
            ``close()``; pollable, readable once the process has exited.
        argv: the command line as given (without any trampoline).
        stdout_path: the file stdout goes to, or None when inherited.
        stderr_path: the file stderr goes to, or None when inherited.
        signals_sent: ``(signal number, clock.wall_ns())`` of every signal delivered by
            ``send_signal``, in order: lets callers tell exits they caused from others.
        cgroup: the rank's own cgroup when it was spawned into one (see
            ``engine.process.cgroups``), else None. With one, a group signal also reaches
            every member of the cgroup, SIGKILL kills the whole cgroup, and ``close()``
            kills what the rank left behind and removes the cgroup.
    """

    def __init__(
        self,
        popen: subprocess.Popen[bytes],
        argv: tuple[str, ...],
        stdout_path: Optional[str],
        stderr_path: Optional[str],
    ) -> None:
        self._popen = popen
        self.pid: int = popen.pid
        self.pgid: int = popen.pid
        self.argv = argv
        self.stdout_path = stdout_path
        self.stderr_path = stderr_path
        self.signals_sent: list[tuple[int, int]] = []
        self.cgroup: Optional[_cgroups.RankCgroup] = None
        self.watched = True
        """Whether the exit watcher thread watches it (False: its caller does)."""
        self._memory_read: Optional[tuple[float, Optional[_cgroups.MemoryReading]]] = None
        """The latest memory reading, and when (``memory``)."""
        self._lock = threading.Lock()
        """Held while reaping and while signalling: a pid is never signalled once reaped."""
        self._exitcode: Optional[int] = None
        self._exit_time_ns: Optional[int] = None
        self._closed = False
        self._starttime: Optional[int] = None
        """Clock ticks since boot at creation: with the pid, this process's identity. Read
        lazily, under ``_lock`` and before reaping, so it is always this process's: reading
        /proc/<pid>/stat right after the spawn costs ~0.4 ms while the exec settles."""
        try:
            self.pidfd: Optional[int] = os.pidfd_open(self.pid)
        except (AttributeError, OSError):
            self.pidfd = None  # old kernel: the start-time check protects signals instead

    # -- creation -----------------------------------------------------------------------

    @classmethod
    def spawn(
        cls,
        argv: Sequence[str],
        env: Optional[Mapping[str, str]],
        stdout_path: Optional[str],
        stderr_path: Optional[str],
        *,
        cwd: Optional[str] = None,
        log_mode: str = "w",
        inherit_env: bool = True,
        cpu_affinity: Optional[Collection[int]] = None,
        stdin: Optional[int] = None,
        pdeathsig: bool = True,
        cgroup: Optional[_cgroups.RankCgroup] = None,
        watched: bool = True,
    ) -> RankProcess:
        """Start ``argv`` as a new rank (no shell), in its own session and process group.

        Args:
            argv: program and arguments; the program is looked up on the rank's PATH.
            env: variables for the rank, laid over ``os.environ`` (as torch does) unless
                ``inherit_env`` is False; the supervisor's own secrets (the cluster key) are
                never inherited (``engine.names.private_env``).
            stdout_path: file for stdout, or None to inherit ours (the console).
            stderr_path: file for stderr, or None to inherit ours. May equal ``stdout_path``
                (one shared open file, so lines interleave as written).
            cwd: working directory of the rank.
            log_mode: "w" truncates the log files (torch), "a" appends (a restarted rank
                keeping its earlier output).
            inherit_env: whether ``os.environ`` is the base of the environment.
            cpu_affinity: CPUs the rank (and every thread it starts) may run on.
            stdin: as Popen's ``stdin`` (e.g. ``subprocess.DEVNULL`` under a TUI); None
                inherits ours, as torch does.
            pdeathsig: give the rank PR_SET_PDEATHSIG=SIGKILL (see ``engine.process.spawner``).
            cgroup: a fresh cgroup the rank joins before it execs its program, so that
                nothing it forks can leave it (``RunCgroups.new_rank``).
            watched: False: the caller polls the pidfd itself and calls ``observe_exit``
                once it is readable (or ``poll`` where there is no pidfd); the exit watcher
                thread leaves the rank alone.

        Raises:
            FileNotFoundError: the program does not exist (or is not on PATH).
            PermissionError: the program is not executable.
            OSError: the log files cannot be opened, the exec failed, or the rank could not
                join ``cgroup``.
        """
        if log_mode not in ("w", "a"):
            raise ValueError(f"log_mode must be 'w' or 'a', not {log_mode!r}")
        argv = tuple(os.fspath(a) for a in argv)
        if not argv:
            raise ValueError("argv must name a program")
        full_env = inherited(os.environ) if inherit_env else {}
        if env:
            full_env.update(env)
        affinity = frozenset(cpu_affinity) if cpu_affinity is not None else None

        return _spawner.call(
            lambda: cls._spawn_here(
                argv, full_env, stdout_path, stderr_path, cwd, log_mode, affinity, stdin,
                pdeathsig, cgroup, watched,
            )
        )

    @classmethod
    def _spawn_here(
        cls,
        argv: tuple[str, ...],
        env: dict[str, str],
        stdout_path: Optional[str],
        stderr_path: Optional[str],
        cwd: Optional[str],
        log_mode: str,
        affinity: Optional[frozenset[int]],
        stdin: Optional[int],
        pdeathsig: bool,
        cgroup: Optional[_cgroups.RankCgroup],
        watched: bool = True,
    ) -> RankProcess:
        # Runs on the spawner thread: the thread the rank's death signal is tied to.
        program = _spawner.resolve_program_in_job(argv[0], env.get("PATH"), cwd)
        prefix: tuple[str, ...] = ()
        preexec = None
        join_fds: tuple[int, ...] = ()
        tracer = _spawner.ptracer_for_ranks()
        if cgroup is not None or tracer is not None:
            # The child writes itself into these between fork and exec (one preexec_fn that
            # also sets the death signal, and under Yama allows us to read its stack): open
            # them here so that the child only writes.
            if cgroup is not None:
                join_fds = _open_for_join(cgroup.join_files)
            preexec = _spawner.preexec_join(os.getpid(), join_fds, pdeathsig, tracer)
        elif pdeathsig:
            prefix = _spawner.pdeathsig_prefix()
            preexec = _spawner.preexec_pdeathsig(os.getpid())
        # With a trampoline the program is exec'd by it, so pass the resolved path.
        cmd = [*prefix, program if prefix else argv[0], *argv[1:]]
        files = _spawner.open_logs(stdout_path, stderr_path, log_mode)
        old_affinity = None
        try:
            if affinity is not None:
                # Children inherit the forking thread's mask, so set it on this thread only
                # (sched_setaffinity(0) is per thread) for the fork: no window in which the
                # rank runs unbound, and nothing to do in the child.
                old_affinity = os.sched_getaffinity(0)
                os.sched_setaffinity(0, affinity)
            try:
                popen = subprocess.Popen(
                    cmd,
                    executable=None if prefix else program,
                    env=env,
                    cwd=cwd,
                    stdin=stdin,
                    stdout=files[0],
                    stderr=files[1],
                    start_new_session=True,
                    preexec_fn=preexec,
                )
            except subprocess.SubprocessError as e:
                # Only our preexec_fn raises this: the write into cgroup.procs failed.
                where = cgroup.path if cgroup is not None else "its cgroup"
                raise OSError(errno.EIO, f"the rank could not join its cgroup {where}") from e
        finally:
            if old_affinity is not None:
                os.sched_setaffinity(0, old_affinity)
            for f in {id(f): f for f in files if f is not None}.values():
                f.close()  # the child holds its own copies
            for fd in join_fds:
                os.close(fd)
        proc = cls(popen, argv, stdout_path, stderr_path)
        proc.cgroup = cgroup
        proc.watched = watched
        # Watched (and discarded if the caller gave up) when the spawner job ends.
        _spawner.current_job_note(proc)
        return proc

    # -- state ----------------------------------------------------------------------------

    @property
    def exitcode(self) -> Optional[int]:
        """The exit code once the rank exited (negative: killed by that signal), else None."""
        return self._exitcode

    @property
    def exit_time_ns(self) -> Optional[int]:
        """``clock.wall_ns()`` when the exit was observed (within ~1 ms of it), else None."""
        return self._exit_time_ns

    @property
    def create_time(self) -> Optional[float]:
        """When the process started, seconds since the epoch (psutil's convention)."""
        with self._lock:
            ticks = self._identity_locked()
        if ticks is None:
            return None
        return _proctable.started_wall(ticks)

    @property
    def popen(self) -> subprocess.Popen[bytes]:
        """The underlying Popen (for torch-compatible callers). Do not ``wait()`` on it."""
        return self._popen

    def _observe_exit(self, now_ns: int) -> bool:
        # Called by the watcher once the pidfd is readable (the process has exited): keep
        # its identity for create_time before the reap frees the pid.
        with self._lock:
            if self._exitcode is None:
                self._identity_locked()
            return self._reap_locked(now_ns)

    def _identity_locked(self) -> Optional[int]:
        # Caller holds _lock and the process is not reaped: the pid is still ours.
        if self._starttime is None and self._exitcode is None:
            entry = _proctable.read_entry(self.pid)
            self._starttime = entry.starttime if entry else None
        return self._starttime

    def _reap_locked(self, now_ns: int) -> bool:
        if self._exitcode is not None:
            return True
        code = self._popen.poll()
        if code is None:
            return False
        self._exit_time_ns = now_ns
        self._exitcode = code
        return True

    def observe_exit(self) -> Optional[int]:
        """``poll`` for a caller that watches the pidfd itself (``watched=False``), once it
        is readable: the process's identity is kept before the reap frees its pid, as the
        watcher keeps it. The exit code, or None if it has not exited."""
        if self._exitcode is None and self._observe_exit(clock.wall_ns()):
            _exitwatch.watcher().notify()
        return self._exitcode

    def poll(self) -> Optional[int]:
        """The exit code if the rank has exited, else None. Never blocks."""
        if self._exitcode is None:
            with self._lock:
                newly = self._exitcode is None and self._reap_locked(clock.wall_ns())
            if newly:
                _exitwatch.watcher().notify()
        return self._exitcode

    def wait(self, timeout: Optional[float] = None) -> Optional[int]:
        """Block until the rank exits or ``timeout`` seconds pass; the exit code or None."""
        wait_any([self], timeout)
        return self._exitcode

    def is_alive(self) -> bool:
        """True until the rank's exit has been observed."""
        return self.poll() is None

    def fileno(self) -> int:
        """The pidfd, so a rank can be passed to ``select``/``poll`` (readable on exit).

        Raises:
            OSError: the kernel has no pidfds, or ``close()`` was called.
        """
        if self.pidfd is None:
            raise OSError(errno.EBADF, "no pidfd for this process")
        return self.pidfd

    # -- signals --------------------------------------------------------------------------

    def send_signal(
        self,
        sig: int,
        *,
        group: bool = True,
        _table: Optional[_proctable.ProcTable] = None,
    ) -> bool:
        """Send ``sig`` to the rank, and with ``group`` to its group and descendants.

        Args:
            sig: the signal number.
            group: also signal the process group and every descendant found in /proc before
                the signal (including ones that left the group with ``setsid``); with a
                ``cgroup``, every member of it instead of the descendants.

        Returns:
            True if the rank was alive and got the signal; False (nothing sent) if it had
            already exited, reaped or not: the signal cannot be what ends it then.
        """
        with self._lock:
            if self._reap_locked(clock.wall_ns()):
                return False
            if self._closed or self._exited_unreaped_locked():
                return False
            strays: list[_proctable.ProcEntry] = []
            if group and self.cgroup is None:
                # Find descendants first: once the rank dies they are re-parented and can no
                # longer be told apart from anyone else's processes.
                if _table is not None:
                    found = _proctable.descendants(self.pid, _table)
                else:
                    top = _proctable.read_entry(self.pid)
                    if top is not None and self._starttime is None:
                        # Not reaped (we hold the lock): this is our process's identity, and
                        # the watcher need not read it again when the signal kills it.
                        self._starttime = top.starttime
                    found = _proctable.find_descendants(self.pid, top)
                strays = [e for e in found if e.pgid != self.pgid]
            if group:
                # The group includes the leader for good: a session leader cannot change its
                # pgid. Safe from recycling: the leader is not reaped (we hold the reaper's
                # lock), so its pid, and with it this pgid, cannot belong to anyone else.
                try:
                    os.killpg(self.pgid, sig)
                except ProcessLookupError:
                    # No such group yet: a function rank calls setsid() itself early in its
                    # bootstrap and sits in our group until then. It is alive (not reaped
                    # under our lock), so it gets the signal alone.
                    if not self._signal_leader(sig):
                        return False
                except PermissionError:  # a member changed uid; the leader is still ours
                    if not self._signal_leader(sig):
                        return False
                if self.cgroup is None:
                    _proctable.signal_checked(strays, sig)
                elif sig == signal.SIGKILL:
                    # The kernel kills every member, including any forked since.
                    self.cgroup.kill()
                else:
                    # Every member outside the group, however it detached (setsid, a
                    # double fork whose parent is gone): membership survives all of it.
                    self.cgroup.signal(sig, skip_pgid=self.pgid)
            elif not self._signal_leader(sig):
                return False
            self.signals_sent.append((int(sig), clock.wall_ns()))
            return True

    def _exited_unreaped_locked(self) -> bool:
        # The kernel makes the pidfd readable when the process exits, before anyone reaps
        # it. Our Popen may not tell yet: another thread holds its waitpid lock, or (function
        # ranks under forkserver) the exit status comes later through the fork server. A
        # signal to the zombie would still "succeed", and the rank's own failure would be
        # taken for the death we caused; so an exit the kernel already knows of wins.
        if self.pidfd is None:
            return False
        poller = select.poll()
        poller.register(self.pidfd, select.POLLIN)
        return bool(poller.poll(0))

    def _signal_leader(self, sig: int) -> bool:
        try:
            if self.pidfd is not None:
                signal.pidfd_send_signal(self.pidfd, sig)
            else:
                # No pidfd: we hold the reaper's lock and the process is not reaped, so the
                # pid cannot have been recycled; os.kill is safe.
                os.kill(self.pid, sig)
        except ProcessLookupError:
            return False
        return True

    def memory(self, max_age_s: float = 0.0) -> Optional[_cgroups.MemoryReading]:
        """The rank's memory and OOM kills as its cgroup counts them (its last reading once
        closed); None without a cgroup with memory accounting.

        ``max_age_s``: a reading taken that recently (by anyone: the stats sample) will do.
        Three cgroup files a rank cost most of a snapshot of sleeping ranks.
        """
        if self.cgroup is None:
            return None
        now = clock.monotonic()
        last = self._memory_read
        if last is not None and now - last[0] < max_age_s:
            return last[1]
        reading = self.cgroup.memory()
        self._memory_read = (now, reading)
        return reading

    def descendants(self) -> list[psutil.Process]:
        """The rank's live descendants (children first), checked against recycled pids."""
        found = []
        for entry in _proctable.find_descendants(self.pid):
            try:
                proc = psutil.Process(entry.pid)
            except psutil.Error:
                continue
            now = _proctable.read_entry(entry.pid)
            if now is not None and now.starttime == entry.starttime:
                found.append(proc)
        return found

    # -- lifetime -------------------------------------------------------------------------

    def close(self) -> None:
        """Release the pidfd. Only once the rank has exited; idempotent.

        With a cgroup, whatever the rank left running in it is killed now (children of a
        rank that exited 0 do not run on until the end of the run) and the cgroup removed.

        Raises:
            RuntimeError: the rank is still running (its pidfd is what keeps signals safe).
        """
        if self._closed:
            return
        if self.poll() is None:
            raise RuntimeError(f"rank process {self.pid} is still running")
        _exitwatch.watcher().remove(self)
        with self._lock:
            self._closed = True
            if self.pidfd is not None:
                os.close(self.pidfd)
        if self.cgroup is not None:
            self.cgroup.release()

    def discard(self) -> None:
        """SIGKILL the rank and its group (used when the caller of a spawn gave up)."""
        self.send_signal(signal.SIGKILL, group=True)

    def __del__(self) -> None:
        if not getattr(self, "_closed", True) and self._exitcode is not None:
            if self.pidfd is not None:
                try:
                    os.close(self.pidfd)
                except OSError:
                    pass
            self._closed = True

    def __repr__(self) -> str:
        state = "running" if self._exitcode is None else f"exitcode={self._exitcode}"
        return f"<RankProcess pid={self.pid} {state} argv={list(self.argv)!r}>"


def _open_for_join(paths: tuple[str, ...]) -> tuple[int, ...]:
    fds: list[int] = []
    try:
        for path in paths:
            fds.append(os.open(path, os.O_WRONLY | os.O_CLOEXEC))
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise
    return tuple(fds)


_UNWATCHED_STEP_S = 0.01
"""How often ``wait_any`` looks at a rank the exit watcher leaves to its caller."""


def wait_any(procs: Iterable[RankProcess], timeout: Optional[float] = None) -> list[RankProcess]:
    """Block until at least one of ``procs`` has exited, or ``timeout`` seconds pass.

    ``timeout``: None waits for ever, 0 only checks. Returns every one of ``procs`` that has
    exited (empty on timeout, or if ``procs`` is empty).
    """
    procs = list(procs)
    if not procs:
        return []
    deadline = None if timeout is None else clock.monotonic() + max(0.0, timeout)
    cond = _exitwatch.watcher().cond
    # A rank its caller watches is reaped when the caller looks: look too, every 10 ms.
    step = None if all(p.watched for p in procs) else _UNWATCHED_STEP_S
    with cond:
        while True:
            done = [p for p in procs if p._exitcode is not None]
            if done:
                return done
            if step is not None:
                done = [p for p in procs if not p.watched and p.poll() is not None]
                if done:
                    return done
            if deadline is None:
                cond.wait(step)
                continue
            remaining = deadline - clock.monotonic()
            if remaining <= 0:
                # One direct check, in case an exit happened but the watcher has not run yet.
                return [p for p in procs if p.poll() is not None]
            cond.wait(remaining if step is None else min(remaining, step))


def send_signal_all(
    procs: Iterable[RankProcess], sig: int, *, group: bool = True
) -> list[RankProcess]:
    """``send_signal`` to many ranks; returns those that got it.

    Descendants are read from each rank's own tree (``_proctable.find_descendants``); where
    the kernel cannot list children, one /proc scan is shared by all ranks instead.
    """
    procs = list(procs)
    table = _proctable.scan() if group and procs and _proctable.needs_scan() else None
    return [p for p in procs if p.send_signal(sig, group=group, _table=table)]
