"""``run --on-failure CMD``: one command run when a run fails, to tell someone.

People hang a chat message or a mail on it. It runs once, through ``/bin/sh -c``, in a
session of its own with stdin from /dev/null, its output appended to
``<run_dir>/on_failure.log``, and it learns about the run from its environment:

- ``RANKVISOR_RUN_DIR``, ``RANKVISOR_RUN_ID``, ``RANKVISOR_STATUS`` (status.json's path),
- ``RANKVISOR_EXITCODE`` (the run's exit status),
- ``RANKVISOR_ROOT_CAUSE_RANK`` and ``RANKVISOR_ROOT_CAUSE_MESSAGE`` (one line; both empty
  when no rank failed on its own).

It is the supervisor that calls this, so a hook must never hang it or take it down: the
command gets a bounded time, then its whole process group is killed, and any failure to
start it is written to the log and returned as a status, never raised.
"""

from __future__ import annotations

import os
import signal
import subprocess
from typing import Any, Final

from .. import clock
from .status import FILENAME

__all__ = ["LOG_NAME", "hook_environment", "run_on_failure"]

LOG_NAME: Final = "on_failure.log"

_MESSAGE_CAP: Final = 500
"""Environment variables end up in command lines and chat messages: one short line."""

_NOT_STARTED: Final = 127
"""The shell's own status for a command it could not run."""


def _one_line(text: str, cap: int = _MESSAGE_CAP) -> str:
    line = " ".join(text.replace("\x00", " ").split())
    return line if len(line) <= cap else line[: cap - 1] + "\u2026"


def hook_environment(run_dir: str, status: dict[str, Any]) -> dict[str, str]:
    """The ``RANKVISOR_*`` variables a hook gets (on top of the supervisor's environment)."""
    root = status.get("root_cause") if isinstance(status.get("root_cause"), dict) else None
    exitcode = status.get("exitcode")
    rank = root.get("rank") if root else None
    return {
        "RANKVISOR_RUN_DIR": run_dir,
        "RANKVISOR_RUN_ID": _one_line(str(status.get("run_id") or "")),
        "RANKVISOR_EXITCODE": "" if exitcode is None else str(exitcode),
        "RANKVISOR_ROOT_CAUSE_RANK": "" if rank is None else str(rank),
        "RANKVISOR_ROOT_CAUSE_MESSAGE": _one_line(str(root.get("message") or "")) if root else "",
        "RANKVISOR_STATUS": os.path.join(run_dir, FILENAME),
    }


def run_on_failure(
    command: str, run_dir: str, status: dict[str, Any], *, timeout_s: float = 60.0
) -> int:
    """Run ``command`` once through /bin/sh; returns its exit status.

    The status is the shell's: 0 and up, or ``-N`` when signal N ended it (``-9`` after the
    timeout's SIGKILL); 127 when it could not be started at all.
    Blocks at most about ``timeout_s`` (plus the moment a SIGKILL takes).
    """
    env = dict(os.environ)
    env.update(hook_environment(run_dir, status))
    log_path = os.path.join(run_dir, LOG_NAME)
    try:
        log = open(log_path, "ab", buffering=0)
    except OSError:
        log = None
    stamp = clock.local_stamp("%Y-%m-%d %H:%M:%S")

    def note(text: str) -> None:
        if log is not None:
            try:
                log.write(f"--- rankvisor {clock.local_stamp('%H:%M:%S')}: {text}\n".encode())
            except OSError:
                pass

    try:
        note(f"{stamp} on-failure hook: {_one_line(command, 2000)}")
        try:
            # Output goes straight to the file, not through a pipe: a grandchild that keeps
            # the descriptor open can then never make us wait for an end of file.
            proc = subprocess.Popen(
                ["/bin/sh", "-c", command],
                stdin=subprocess.DEVNULL,
                stdout=log if log is not None else subprocess.DEVNULL,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=run_dir if os.path.isdir(run_dir) else None,
                start_new_session=True,
                close_fds=True,
            )
        except (OSError, ValueError, subprocess.SubprocessError) as e:
            note(f"could not start the hook: {e}")
            return _NOT_STARTED
        try:
            code = proc.wait(timeout=max(0.0, timeout_s))
        except subprocess.TimeoutExpired:
            # Its own session: the group id is its pid. SIGKILL the whole group so that a
            # `sleep` or `curl` it started cannot outlive it; then reap the shell, which
            # SIGKILL ends at once.
            note(f"the hook ran past {timeout_s:g} s: killing its process group")
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            code = proc.wait()
        note(f"the hook exited with status {code}")
        return code
    finally:
        if log is not None:
            log.close()
