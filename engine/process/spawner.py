"""The one thread that forks every rank, and how ranks get PR_SET_PDEATHSIG.

Why a thread of its own: the kernel sends a child its death signal when the *thread* that
forked it exits, not the process. A rank forked from a short-lived worker thread (a Textual
worker, a ThreadPoolExecutor task) would be SIGKILLed as soon as that thread finished. So
every fork happens on one daemon thread that lives as long as the interpreter; callers hand
it work through a queue and wait for the answer. After ``os.fork()`` the child process gets a
fresh, not yet started spawner (``os.register_at_fork``).

How the death signal is set, measured here for 32 ``/bin/true`` ranks started with Popen
(2-core VM, best of 5): plain vfork 13 ms; vfork of ``setpriv --pdeathsig KILL -- prog``
23 ms; ``preexec_fn`` calling prctl 75-85 ms (``preexec_fn`` forbids vfork, and a full fork of
the interpreter plus running Python in the child costs ~2.5 ms a rank, 10x more when the
parent is large, e.g. has torch imported). So the default is the ``setpriv`` trampoline
(util-linux >= 2.33): the death signal survives its exec of the real program. Where
``setpriv`` is missing or too old, ``preexec_fn`` is used. ``RANKVISOR_PDEATHSIG`` =
``setpriv`` | ``preexec`` | ``none`` forces one. One window remains with ``setpriv``: if we
die during the millisecond between the fork and setpriv's prctl, that rank is not signalled
(the ``preexec`` path closes it by checking ``getppid()`` after the prctl); the Supervisor's
guard process covers it.

A rank spawned into a cgroup (``engine.process.cgroups``) is the exception: it must join
the cgroup between fork and exec, so it gets one ``preexec_fn`` (``preexec_join``) that
writes it into ``cgroup.procs`` and sets the death signal, and no ``setpriv``. That costs
the full fork measured above (about 7 ms a rank in a running Supervisor on this VM), the
price of a placement nothing can race.

Who calls what: ``call(fn)`` from any thread runs ``fn`` on the spawner thread (inline if
already there) and returns its result or raises its exception. If the caller is interrupted
while waiting (a signal handler raising in the main thread), whatever ``fn`` spawned is
SIGKILLed when it finishes, so an interrupted start never leaves a rank behind.
"""

from __future__ import annotations

import ctypes
import errno
import logging
import os
import queue
import shutil
import signal
import subprocess
import threading
from typing import IO, Any, Callable, Optional, Protocol, TypeVar

from . import exit_watch as _exitwatch

__all__ = [
    "call",
    "current_job_note",
    "open_logs",
    "pdeathsig_mode",
    "pdeathsig_prefix",
    "preexec_join",
    "ptracer_for_ranks",
    "preexec_pdeathsig",
    "resolve_program",
    "resolve_program_in_job",
]

logger = logging.getLogger(__name__)

_T = TypeVar("_T")
_PR_SET_PDEATHSIG = 1
_PR_SET_PTRACER = 0x59616D61
"""prctl option of the kernel's Yama module: name the process (and its descendants) that may
trace the caller although it is not the caller's ancestor."""


class _Discardable(_exitwatch.Watched, Protocol):
    def discard(self) -> None: ...


class _Job:
    __slots__ = (
        "fn", "done", "result", "error", "abandoned", "finished", "spawned", "lock", "programs"
    )

    def __init__(self, fn: Callable[[], Any]) -> None:
        self.fn = fn
        self.done = threading.Event()
        self.result: Any = None
        self.error: Optional[BaseException] = None
        self.abandoned = False
        self.finished = False
        self.spawned: list[_Discardable] = []
        self.lock = threading.Lock()
        self.programs: dict[tuple[str, Optional[str], Optional[str]], str] = {}
        """``resolve_program`` answers within this job: a batch of ranks looks its program up
        once (a PATH search is ~0.25 ms), not once a rank."""

    def discard(self) -> None:
        for proc in self.spawned:
            proc.discard()


class _State:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.queue: queue.SimpleQueue[_Job] = queue.SimpleQueue()
        self.thread: Optional[threading.Thread] = None
        self.local = threading.local()


_state = _State()


def _reset_after_fork() -> None:
    # The child has no spawner thread (fork copies only the calling thread): start afresh.
    global _state
    _state = _State()


os.register_at_fork(after_in_child=_reset_after_fork)


def _loop(state: _State) -> None:
    while True:
        job = state.queue.get()
        state.local.job = job
        try:
            job.result = job.fn()
        except BaseException as e:  # handed to the caller, who re-raises it
            job.error = e
        finally:
            state.local.job = None
            # One wake-up of the exit watcher per job, not one per rank: waking it for each
            # rank of a batch costs ~0.3 ms a rank in GIL hand-overs.
            _exitwatch.watcher().add_many(
                p for p in job.spawned if getattr(p, "watched", True))
        with job.lock:
            job.finished = True
            abandoned = job.abandoned
        if abandoned:
            job.discard()
        job.done.set()


def _ensure_thread(state: _State) -> threading.Thread:
    with state.lock:
        if state.thread is None:
            state.thread = threading.Thread(
                target=_loop, args=(state,), name="rankvisor-spawner", daemon=True
            )
            state.thread.start()
        return state.thread


def call(fn: Callable[[], _T]) -> _T:
    """Run ``fn`` on the spawner thread and return its result (or raise its exception)."""
    state = _state
    thread = _ensure_thread(state)
    if threading.current_thread() is thread:
        return fn()  # nested: part of the job already running
    job = _Job(fn)
    state.queue.put(job)
    try:
        job.done.wait()
    except BaseException:
        # Interrupted (e.g. SignalException from a handler): nobody will own what fn
        # starts, so have it killed as soon as fn is done.
        with job.lock:
            job.abandoned = True
            finished = job.finished
        if finished:
            job.discard()
        raise
    if job.error is not None:
        raise job.error
    return job.result  # type: ignore[no-any-return]


def current_job_note(proc: _Discardable) -> None:
    """Record a process started by the running job.

    When the job ends it is handed to the exit watcher, or SIGKILLed if the caller gave up.
    """
    job = getattr(_state.local, "job", None)
    if job is None:
        raise RuntimeError("processes may only be started by a job on the spawner thread")
    job.spawned.append(proc)


_mode: Optional[str] = None
_prefix: tuple[str, ...] = ()
_libc_prctl: Any = None
_probe_lock = threading.Lock()


def pdeathsig_mode() -> str:
    """How ranks get their death signal here: "setpriv", "preexec" or "none" (probed once)."""
    if _mode is not None:
        return _mode
    with _probe_lock:
        return _probe()


def _probe() -> str:
    global _mode, _prefix, _libc_prctl
    if _mode is not None:
        return _mode
    wanted = os.environ.get("RANKVISOR_PDEATHSIG", "auto").strip().lower()
    mode = "none"
    if wanted in ("auto", "setpriv"):
        setpriv = shutil.which("setpriv")
        if setpriv and _setpriv_has_pdeathsig(setpriv):
            mode, _prefix = "setpriv", (setpriv, "--pdeathsig", "KILL", "--")
        elif wanted == "setpriv":
            logger.warning("setpriv with --pdeathsig is not available; using preexec_fn")
    if mode == "none" and wanted in ("auto", "setpriv", "preexec"):
        try:
            _libc_prctl = ctypes.CDLL(None, use_errno=True).prctl
            mode = "preexec"
        except (OSError, AttributeError):
            logger.warning("prctl is not available: ranks will not die with rankvisor")
    _mode = mode
    return mode


def _setpriv_has_pdeathsig(setpriv: str) -> bool:
    # One probe per interpreter (~2 ms): old util-linux (< 2.33) has no --pdeathsig.
    try:
        out = subprocess.run(
            [setpriv, "--help"], capture_output=True, text=True, timeout=5, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return "--pdeathsig" in out.stdout


def pdeathsig_prefix() -> tuple[str, ...]:
    """The argv prefix that sets the death signal ("setpriv" mode), else ()."""
    return _prefix if pdeathsig_mode() == "setpriv" else ()


def preexec_pdeathsig(parent_pid: int) -> Optional[Callable[[], None]]:
    """A ``preexec_fn`` setting the death signal ("preexec" mode), else None."""
    if pdeathsig_mode() != "preexec":
        return None
    prctl = _libc_prctl

    def _preexec() -> None:
        prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL))
        # If the parent died between fork and prctl, no signal will ever come: go now.
        if os.getppid() != parent_pid:
            os.kill(os.getpid(), signal.SIGKILL)

    return _preexec


def ptracer_for_ranks() -> Optional[int]:
    """The pid ranks must allow as their tracer (ours), or None when nothing needs it.

    Under the kernel's Yama ``ptrace_scope=1`` only a process's ancestors may read its memory,
    and the py-spy that dumps a rank's stack is started by us: the rank's sibling. A rank that
    calls ``prctl(PR_SET_PTRACER, our_pid)`` lets us and every descendant of ours trace it;
    the permission is the process's and survives its exec. Not needed where Yama is absent or
    lets anyone trace (0), nor when we hold CAP_SYS_PTRACE (root): then no preexec_fn (and its
    full fork) is paid for it. ``RANKVISOR_PTRACER`` = ``always`` | ``never`` forces it.
    """
    wanted = os.environ.get("RANKVISOR_PTRACER", "auto").strip().lower()
    if wanted == "never":
        return None
    if wanted != "always":
        try:
            with open("/proc/sys/kernel/yama/ptrace_scope") as f:
                scope = f.read().strip()
        except OSError:
            return None  # no Yama: the classic rule (same user) already lets py-spy read it
        if scope != "1" or _has_cap_sys_ptrace():
            return None
    return os.getpid() if _load_prctl() is not None else None


def _has_cap_sys_ptrace() -> bool:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("CapEff:"):
                    return bool(int(line.split()[1], 16) >> 19 & 1)  # CAP_SYS_PTRACE
    except (OSError, ValueError, IndexError):
        pass
    return False


def preexec_join(
    parent_pid: int, procs_fds: tuple[int, ...], pdeathsig: bool, ptracer: Optional[int] = None
) -> Callable[[], None]:
    """A ``preexec_fn`` that moves the child into its cgroups before it execs.

    ``procs_fds``: ``cgroup.procs`` files opened for writing by the parent (the child still
    holds them between fork and exec); writing ``0`` moves the writer. Joining here, before
    the exec, is what makes the placement race-free: the program cannot fork before it is
    in its cgroup. With ``pdeathsig`` (and prctl available) the same function sets the
    death signal, so no ``setpriv`` exec is needed on top. With ``ptracer`` the child allows
    that process (and its descendants) to trace it (see ``ptracer_for_ranks``).
    """
    prctl = _load_prctl() if pdeathsig and pdeathsig_mode() != "none" else None
    tracer_prctl = _load_prctl() if ptracer is not None else None

    def _preexec() -> None:
        if prctl is not None:
            prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL))
        if tracer_prctl is not None:
            # EINVAL where Yama is absent: harmless, nothing then needs the permission.
            tracer_prctl(_PR_SET_PTRACER, ptracer, 0, 0, 0)
        for fd in procs_fds:
            os.write(fd, b"0")
        # If the parent died between fork and prctl, no signal will ever come: go now.
        if prctl is not None and os.getppid() != parent_pid:
            os.kill(os.getpid(), signal.SIGKILL)

    return _preexec


def _load_prctl() -> Any:
    global _libc_prctl
    if _libc_prctl is None:
        try:
            _libc_prctl = ctypes.CDLL(None, use_errno=True).prctl
        except (OSError, AttributeError):
            return None
    return _libc_prctl


def resolve_program(name: str, path: Optional[str], cwd: Optional[str]) -> str:
    """Find the program as exec would, so that a bad one fails before anything starts.

    Args:
        name: argv[0]; looked up on ``path`` when it has no slash.
        path: the PATH the rank will have (None: ``os.defpath``).
        cwd: the rank's working directory (relative paths are taken from there).

    Raises:
        FileNotFoundError: no such program (the message names it).
        PermissionError: it is a directory or not executable.
    """
    if os.sep in name:
        candidate = name if os.path.isabs(name) or cwd is None else os.path.join(cwd, name)
        if not os.path.exists(candidate):
            raise FileNotFoundError(errno.ENOENT, "No such file or directory", name)
        if os.path.isdir(candidate):
            raise PermissionError(errno.EACCES, "Is a directory, not a program", name)
        if not os.access(candidate, os.X_OK):
            raise PermissionError(errno.EACCES, "Permission denied (not executable)", name)
        return name
    found = shutil.which(name, path=path if path is not None else os.defpath)
    if found is None:
        raise FileNotFoundError(errno.ENOENT, "Not found on PATH (or not executable)", name)
    return found


def resolve_program_in_job(name: str, path: Optional[str], cwd: Optional[str]) -> str:
    """``resolve_program``, looked up once per running spawner job for the same arguments.

    A batch (one job) starts its ranks within milliseconds, so the answer cannot go stale in
    a way that matters: a program removed meanwhile still fails at exec with the same error.
    Outside a job it is ``resolve_program`` itself.
    """
    job = getattr(_state.local, "job", None)
    if job is None:
        return resolve_program(name, path, cwd)
    key = (name, path, cwd)
    found = job.programs.get(key)
    if found is None:
        found = job.programs[key] = resolve_program(name, path, cwd)
    return found


def open_logs(
    stdout_path: Optional[str], stderr_path: Optional[str], mode: str
) -> tuple[Optional[IO[bytes]], Optional[IO[bytes]]]:
    """Open the rank's log files ("w" or "a"); one shared file when both paths are equal."""
    out = open(stdout_path, mode + "b") if stdout_path else None  # noqa: SIM115
    try:
        if stderr_path and stderr_path == stdout_path:
            err = out
        else:
            err = open(stderr_path, mode + "b") if stderr_path else None  # noqa: SIM115
    except BaseException:
        if out is not None:
            out.close()
        raise
    return out, err
