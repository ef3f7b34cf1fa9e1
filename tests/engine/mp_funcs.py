"""Function-rank bodies for the MultiprocessContext tests (torch's and ours).

They live in an importable module so ``spawn`` can pickle them by reference. Printing at
import time is on purpose: it shows whether a child's bootstrap output reaches its
stdout.log (ours) or the parent's console (torch, which redirects only around the call).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import sys
import time
from pathlib import Path

IMPORT_MARK = "mp_funcs imported"
print(f"{IMPORT_MARK} in pid {os.getpid()}", flush=True)


def echo(value: object) -> object:
    """Return ``value``; print the rank's env so the per-rank env can be checked."""
    print(f"echo LOCAL_RANK={os.environ.get('LOCAL_RANK')} value={value!r}")
    return value


def touch(path: str) -> str:
    """Create ``path`` (a sign of life) and return it."""
    Path(path).touch()
    return path


def env_at_import_and_call(name: str) -> tuple[str | None, str | None]:
    """Return (value of env ``name`` when this module was imported, value now)."""
    return _ENV_AT_IMPORT.get(name), os.environ.get(name)


_ENV_AT_IMPORT = dict(os.environ)


def all_outputs(rank: int) -> int:
    """Write to stdout through Python, C printf and os.system, and to stderr; return rank."""
    print(f"python stdout {rank}")
    print(f"python stderr {rank}", file=sys.stderr)
    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    libc.printf(b"c printf %d\n", ctypes.c_int(rank))  # stays in C's buffer until flushed
    os.system(f"echo os.system {rank}")
    return rank


def raise_error(message: str) -> None:
    """Raise RuntimeError(message) after printing a line."""
    print(f"about to raise {message}", file=sys.stderr)
    raise RuntimeError(message)


def exit_with(code: int) -> None:
    """``sys.exit(code)``."""
    sys.exit(code)


def hard_exit_zero() -> None:
    """Leave without returning: ``os._exit(0)`` (torch's ``wait()`` never returns then)."""
    os._exit(0)


def kill_self(signum: int) -> None:
    """Die of ``signum`` (SIGKILL, SIGSEGV...)."""
    sys.stdout.flush()
    os.kill(os.getpid(), signum)
    time.sleep(60)  # not reached; the signal is synchronous for the calling thread


def big_return(nbytes: int) -> bytes:
    """Return ``nbytes`` bytes (more than a pipe buffer by far)."""
    return b"x" * nbytes


def sleep_forever(ready_file: str = "") -> None:
    """Sleep until killed; create ``ready_file`` first when given."""
    if ready_file:
        Path(ready_file).touch()
    while True:
        time.sleep(1)


def ignore_sigterm(ready_file: str) -> None:
    """Ignore SIGTERM (close() must escalate to SIGKILL), then sleep until killed."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    Path(ready_file).touch()
    while True:
        time.sleep(1)


def with_grandchild(pid_file: str, new_session: bool = False) -> None:
    """Start a long ``sleep`` grandchild (in its own session if asked), record its pid in
    ``pid_file``, then sleep until killed."""
    import subprocess

    child = subprocess.Popen(["sleep", "300"], start_new_session=new_session)
    Path(pid_file + ".tmp").write_text(str(child.pid))
    os.replace(pid_file + ".tmp", pid_file)  # readers never see an empty file
    while True:
        time.sleep(1)


def affinity() -> set[int]:
    """Return the CPUs this rank may run on."""
    return set(os.sched_getaffinity(0))


def session_info() -> tuple[int, int, int]:
    """Return (pid, process group id, session id) of the rank."""
    return os.getpid(), os.getpgid(0), os.getsid(0)


def wait_for_file_then(path: str, action: str, arg: int = 0) -> None:
    """Wait until ``path`` exists, then do ``action`` (barrier for simultaneous failures)."""
    while not os.path.exists(path):
        time.sleep(0.01)
    if action == "raise":
        raise RuntimeError(f"failure {arg}")
    if action == "exit":
        sys.exit(arg)
    if action == "signal":
        kill_self(arg)
    if action == "sleep":
        sleep_forever()


PEER_LINE = "rank 1 printed this line"


def fail_after_peer(marker: str, action: str) -> int:
    """One body for both ranks of the teardown scenarios.

    ``action`` "say": print ``PEER_LINE``, create ``marker`` and return at once (the rank
    that succeeds). "linger": print, return, and stay until killed (waiting for the
    engine's release, then in the interpreter's shutdown), creating ``marker`` once the
    return value is on disk: a rank caught by the teardown after its function returned,
    every time. Else wait for ``marker``, then
    fail: "raise", "exit" (``sys.exit(1)``) or "segfault" (a real SIGSEGV at address 0).
    """
    if action in ("say", "linger"):
        print(PEER_LINE, flush=True)
        if action == "say":
            Path(marker).touch()
        else:
            import atexit
            import multiprocessing
            import threading

            # The engine's own RankSpec: where this rank's return value goes.
            returned = multiprocessing.current_process()._args[0].return_file  # type: ignore[attr-defined]
            threading.Thread(target=_mark_once, args=(returned, marker), daemon=True).start()
            atexit.register(_linger)
        return 1
    while not os.path.exists(marker):
        time.sleep(0.001)  # polling a file the other rank creates: a barrier, not a wait time
    if action == "raise":
        raise RuntimeError("rank 0 failed")
    if action == "exit":
        sys.exit(1)
    if action == "segfault":
        ctypes.string_at(0)
    raise ValueError(f"unknown action {action!r}")


def _mark_once(returned: str, marker: str) -> None:
    while not os.path.exists(returned):
        time.sleep(0.001)  # a barrier on the file the rank's return writes, not a wait time
    Path(marker).touch()


def _linger() -> None:
    while True:
        time.sleep(1)


def divide(x: int) -> float:
    """Raise ZeroDivisionError with a local ``y = 7`` (the post-mortem tests read it)."""
    y = 7
    return y / x
