"""Start a run's supervisor process and wait until its socket answers.

The supervisor (``engine.entry.daemon``) gets a session of its own (no controlling
terminal: a hang-up of ours never reaches it), stdin from /dev/null, and the request over a
pipe. It is started with ``python -c`` with the working directory taken off ``sys.path``:
nothing of the user's project is imported into the supervisor.
"""

from __future__ import annotations

import json
import os
import pickle
import select
import subprocess
import sys
from dataclasses import dataclass
from typing import Any

from .. import clock
from .daemon import Request

__all__ = ["SpawnError", "Started", "start_supervisor"]

READY_TIMEOUT_S = 120.0
"""Starting many ranks (a cgroup each, NUMA binding) can take a while; a hung start not."""


class SpawnError(RuntimeError):
    """The supervisor process could not start the run; the message says why, in words."""


@dataclass(frozen=True)
class Started:
    """A supervisor process that runs the ranks and answers on ``socket``."""

    pid: int
    socket: str
    run_dir: str
    run_id: str
    process: subprocess.Popen[bytes]
    """Ours to reap if it ends while we are still here (else init reaps it)."""


def _bootstrap() -> str:
    # ``-c`` puts the working directory first on sys.path: drop it, so that nothing of the
    # user's (a ``rankvisor.py`` of theirs) is imported in place of ours.
    return (
        "import sys; sys.path[:1] = [] if sys.path[:1] == [''] else sys.path[:1]; "
        "from rankvisor.engine.entry.daemon import _entry; _entry()"
    )


def start_supervisor(request: Request, *, timeout_s: float = READY_TIMEOUT_S) -> Started:
    """Start the supervisor process for ``request``; returns once its ranks run.

    Raises:
        SpawnError: the run could not start (the supervisor's words), or it said nothing
            within ``timeout_s`` (it is killed then: no half-started run is left).
    """
    req_r, req_w = os.pipe()
    ready_r, ready_w = os.pipe()
    try:
        process = subprocess.Popen(
            [sys.executable, "-c", _bootstrap(), str(req_r), str(ready_w)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            pass_fds=(req_r, ready_w),
            start_new_session=True,
        )
    finally:
        os.close(req_r)
        os.close(ready_w)
    try:
        with os.fdopen(req_w, "wb") as pipe:
            pipe.write(pickle.dumps(request))
        answer = _read_answer(ready_r, timeout_s)
    except BaseException:
        process.kill()
        process.wait()
        raise
    finally:
        os.close(ready_r)
    if answer is None:
        process.kill()
        err = _drain(process)
        process.wait()
        raise SpawnError(
            "the supervisor process did not start the run"
            + (f": {err}" if err else f" within {timeout_s:g}s")
        )
    if not answer.get("ok"):
        err = _drain(process)
        process.wait()
        raise SpawnError(str(answer.get("error") or err or "the run could not start"))
    if process.stderr is not None:
        process.stderr.close()  # from here on it writes to supervisor.log
    return Started(
        pid=int(answer["pid"]),
        socket=str(answer["socket"]),
        run_dir=str(answer["run_dir"]),
        run_id=str(answer.get("run_id", "")),
        process=process,
    )


def _read_answer(fd: int, timeout_s: float) -> dict[str, Any] | None:
    deadline = clock.monotonic() + timeout_s
    data = b""
    while b"\n" not in data:
        left = deadline - clock.monotonic()
        if left <= 0:
            return None
        ready, _, _ = select.select([fd], [], [], left)
        if not ready:
            return None
        chunk = os.read(fd, 4096)
        if not chunk:
            break  # it exited (or closed the pipe) before saying anything
        data += chunk
    if not data.strip():
        return None
    try:
        answer = json.loads(data.split(b"\n", 1)[0])
    except ValueError:
        return None
    return answer if isinstance(answer, dict) else None


def _drain(process: subprocess.Popen[bytes]) -> str:
    """The last line the supervisor wrote on stderr before it gave up (a traceback's)."""
    if process.stderr is None:
        return ""
    try:
        text = process.stderr.read(1 << 16).decode(errors="replace")
    except (OSError, ValueError):
        return ""
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[-1].strip() if lines else ""
