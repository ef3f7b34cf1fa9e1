"""The child side of a function rank: the first code of ours that runs in the new process.

``MultiprocessContext`` starts each rank as a stdlib ``multiprocessing`` process whose target
is :func:`run_rank`. This module is deliberately light (stdlib at import, never torch): under
``spawn`` the child imports it, with the ``engine`` package around it, to unpickle the
target, which is what makes a trivial rank show life in a fraction of the time torch's
children need (they import torch first). Before that, multiprocessing itself re-imports the
parent's ``__main__`` module (spawn, forkserver), as it does for torch's children: that is
the one piece of user code that runs before the steps below.

Order of events in the child, and why:

1. ``PR_SET_PDEATHSIG``: from now on the kernel kills this rank if the thread that started
   it dies, so a killed supervisor leaves no orphan. A parent that died before the call is
   caught by comparing ``getppid()`` with the pid the parent recorded.
2. ``setsid()``: the rank leads its own session and process group, so the supervisor can
   signal the rank and every descendant with one ``killpg`` (and Ctrl-C in the terminal
   reaches the supervisor only, as for binary ranks).
3. The redirect of file descriptors 1 and 2 to stdout.log / stderr.log, for the life of the
   process: every later byte (imports of the user's modules, C ``printf``, ``os.system``
   children, the final traceback, faulthandler's dump on SIGSEGV) lands in the files.
   torch redirects only around the call and too late.
4. The rank's environment (``LOCAL_RANK``, ``TORCHELASTIC_ERROR_FILE``...).
5. Inside ``record`` (error.json on an exception): NUMA binding, then unpickling the
   function and its arguments (this imports the user's module, after all of the above),
   the call, and writing the return value to a per-rank file, atomically (temp + rename).
   The parent reads that file after the exit; no pipe, so a large return value cannot
   deadlock. The child then stays until the parent releases it (``RankSpec.release_file``),
   as torch's children do, before its interpreter exits.

With ``RANKVISOR_POST_MORTEM`` in the rank's environment (``--post-mortem``), an exception
that would end the rank stops at a pdb prompt in the frame that raised first
(``engine.process.py_bootstrap.post_mortem``), then ends it the same way.

Exit codes follow torch: an exception exits 1 (after the traceback is printed to stderr),
``sys.exit(n)`` exits ``n``; a signal death is ``-signum``. Unlike torch, a
``KeyboardInterrupt`` (SIGINT) is not swallowed into exit 0: the rank dies of SIGINT.
"""

from __future__ import annotations

import os
import pickle
import signal
import sys
import traceback
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Callable

from ..rundir.atomic import atomic_file
from .parent_death import die_with_parent
from .py_bootstrap import ENV_POST_MORTEM, post_mortem

__all__ = ["RankSpec", "run_rank"]


@dataclass(frozen=True)
class RankSpec:
    """Everything one rank needs, sent to the child as the process target's argument."""

    local_rank: int
    return_file: str
    """Where the pickled return value goes (replaced atomically: ``engine.rundir.atomic``)."""
    stdout: str = ""
    """stdout.log path; "" leaves the stream on the console, as torch does."""
    stderr: str = ""
    env: dict[str, str] = field(default_factory=dict)
    payload: bytes | None = None
    """``pickle.dumps((fn, args))``, unpickled only after the redirect and the env are in
    place (spawn, forkserver). None under fork, where ``fn``/``args`` travel as objects."""
    fn: Callable[..., Any] | None = None
    args: tuple[Any, ...] = ()
    parent_pid: int | None = None
    """The supervisor's pid when it is this process's parent (spawn, fork); None under
    forkserver, where the fork server is the parent."""
    cpus: frozenset[int] | None = None
    """The CPUs the rank may use (``engine.process.numa.plan``); None leaves its affinity alone."""
    forget_parent: Callable[[], None] | None = None
    """Under fork, what undoes the child's copy of the parent's bookkeeping (the started
    contexts, their signal handlers); given by the context that starts the rank, which owns
    that bookkeeping. None under spawn and forkserver: the child starts fresh."""
    release_file: str = ""
    """Once its return value is stored, the rank stays until this file exists (the parent
    makes it when every rank has returned, or at its teardown), as torch's ranks wait for
    their parent to read every return value. An interpreter that finalizes the moment the
    function returns races torch.distributed's own threads: gloo's worker drops the last
    collective's work (and its tensors) just after the caller's ``wait()`` returned, and a
    thread that needs the GIL once finalization began is killed in a C++ destructor:
    ``std::terminate``, SIGABRT. "" exits at once."""


def run_rank(spec: RankSpec) -> None:
    """Run one function rank to completion (the ``multiprocessing.Process`` target).

    Raises:
        SystemExit: With the exit code the rank must have (1 after an exception).
    """
    die_with_parent(spec.parent_pid)
    _lead_own_session()
    if spec.forget_parent is not None:
        spec.forget_parent()
    _redirect_for_life(1, spec.stdout)
    _redirect_for_life(2, spec.stderr)
    os.environ.update(spec.env)
    try:
        _run_recorded(spec)
    except SystemExit:
        raise  # sys.exit(n): multiprocessing turns the code into the exit status
    except KeyboardInterrupt as e:
        _print_user_traceback(e)
        _flush_all()
        # Die of the signal, as CPython itself does for an uncaught KeyboardInterrupt, so
        # the parent sees -SIGINT rather than a success without a return value (torch's exit 0).
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
        raise SystemExit(1) from None  # not reached unless SIGINT is blocked
    except BaseException as e:
        if os.environ.pop(ENV_POST_MORTEM, None) is not None:
            # ``record`` wrote error.json already: a pdb prompt on the supervisor's stdin
            # (multiprocessing gave this child /dev/null), then the same exit.
            e.__traceback__ = _user_frames(e)
            post_mortem(e, stdin_path=f"/proc/{os.getppid()}/fd/0")
            raise SystemExit(1) from None
        # Printed here, while fd 2 still points at stderr.log, so the traceback is on disk.
        _print_user_traceback(e)
        raise SystemExit(1) from None
    finally:
        _flush_all()


def _print_user_traceback(e: BaseException) -> None:
    """Print ``e``'s traceback to stderr without our own frames above the user's code."""
    traceback.print_exception(type(e), e, _user_frames(e))


def _user_frames(e: BaseException) -> TracebackType | None:
    """``e``'s traceback from the user's first frame (our own frames above it left out)."""
    from .. import errors

    ours = {__file__, errors.__file__}
    tb = e.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename in ours:
        tb = tb.tb_next
    # Nothing left means the error is in our code (e.g. an unpicklable return value):
    # then the whole traceback is the useful one.
    return tb or e.__traceback__


def _run_recorded(spec: RankSpec) -> None:
    # Imported here, not at module top: under spawn the parent's modules are not needed
    # until the redirect is in place, and ``record`` reads TORCHELASTIC_ERROR_FILE at
    # call time from the environment set above.
    from ..errors import record

    def body() -> None:
        _bind_numa(spec)
        if spec.payload is not None:
            fn, args = pickle.loads(spec.payload)  # imports the user's module
        else:
            fn, args = spec.fn, spec.args
        assert fn is not None
        _store_return(spec.return_file, fn(*args))

    record(body)()
    if not os.path.exists(spec.return_file):
        # ``record`` turns sys.exit(0) into a plain return (torch does the same and hands
        # back None): the function ended on purpose, so its return value is None.
        _store_return(spec.return_file, None)
    if spec.release_file:
        _wait_for_release(spec.release_file, spec.parent_pid)


def _wait_for_release(path: str, parent_pid: int | None) -> None:
    """Stay until ``path`` exists (``RankSpec.release_file``), or the parent is gone."""
    import time

    pause = 0.001
    while not os.path.exists(path):
        if parent_pid is not None and os.getppid() != parent_pid:
            return  # nobody left to release us (the death signal is on its way anyway)
        time.sleep(pause)
        pause = min(0.02, pause * 2)


def _bind_numa(spec: RankSpec) -> None:
    if spec.cpus is None:
        return
    from .numa import bind_current_process

    # Before the user's module is imported, so thread pools it creates at import time
    # (OpenMP, BLAS) start with the right CPU set.
    bind_current_process(spec.cpus)


def _store_return(path: str, value: object) -> None:
    """Write ``value`` pickled to ``path`` so the parent never sees a partial file."""
    with atomic_file(path) as f:
        pickle.dump(value, f, protocol=pickle.HIGHEST_PROTOCOL)


def _lead_own_session() -> None:
    try:
        os.setsid()
    except OSError:
        # Already a group leader (not the case under multiprocessing): keep the group.
        pass


def _redirect_for_life(fd: int, path: str) -> None:
    """Point ``fd`` at ``path`` until the process exits (no restore: the process is ours)."""
    if not path:
        return
    from ..redirects import _flush_c_streams, _python_fd

    dst = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
    _flush_c_streams()
    _flush_all()
    os.dup2(dst, fd)
    os.close(dst)
    name = "stdout" if fd == 1 else "stderr"
    stream = getattr(sys, name)
    if _python_fd(name) == fd and hasattr(stream, "reconfigure"):
        # A file makes Python block-buffer stdout; lines must reach the log (and anyone
        # tailing it) as they are printed, as they would on a terminal.
        stream.reconfigure(line_buffering=True)
    else:
        # sys.stdout wrote somewhere else (forked from a parent whose stream was replaced,
        # e.g. by pytest's capture): give the rank a stream on the real descriptor.
        setattr(sys, name, open(fd, "w", buffering=1, errors="backslashreplace", closefd=False))


def _flush_all() -> None:
    for stream in (sys.stdout, sys.stderr):
        if stream is not None:
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
