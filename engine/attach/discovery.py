"""Find a torchrun job from /proc and its log directory: the agent, its workers, their files.

torchrun's agent starts each worker (``SubprocessHandler``) in a session of its own with
``TORCHELASTIC_RUN_ID``, ``LOCAL_RANK``, ``RANK``, ``TORCHELASTIC_RESTART_COUNT`` and
``TORCHELASTIC_ERROR_FILE`` in its environment; with ``--log-dir D -r 3`` (or ``--tee 3``)
its stdout and stderr are files laid out as torch's ``DefaultLogsSpecs`` makes them::

    D/<run_id>_<random>/attempt_<restart count>/<local rank>/{stdout.log,stderr.log,error.json}

(``attempt_<n>`` is removed and made again when attempt n starts). So a worker's files are
read from its open fds 1 and 2 (or, where a stream is not a file, beside its error file),
and a log directory leads to the live agent through the processes that write into it.

Only processes of our own uid are looked at: another user's job is not ours to signal, and
/proc hides its environment anyway.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from ..process.proc_table import read_entry
from ..process.proc_table import read_environ as _environ

__all__ = [
    "AttachError",
    "TorchrunJob",
    "Worker",
    "discover",
    "find_by_log_dir",
    "find_by_pid",
    "latest_attempt",
    "newest_run_dir",
    "workers_of",
]

_ATTEMPT = re.compile(r"^attempt_(\d+)$")


class AttachError(Exception):
    """Why a job cannot be attached to, in one line for a person."""


@dataclass(frozen=True, slots=True)
class Worker:
    """One live worker process of a torchrun agent, as /proc shows it."""

    local_rank: int
    rank: int
    """The global rank (``RANK``)."""
    pid: int
    starttime: int
    """With ``pid``, names this process for ever (a recycled pid has another)."""
    restart_count: int
    """``TORCHELASTIC_RESTART_COUNT``: the attempt this worker belongs to."""
    run_id: str
    role: str
    stdout_path: str
    """"" when the stream is not a file (torchrun without ``-r``/``--tee``)."""
    stderr_path: str
    error_file: str
    local_world_size: int


@dataclass(frozen=True, slots=True)
class TorchrunJob:
    """A torchrun agent and the workers of its current attempt."""

    agent_pid: int
    agent_starttime: int
    agent_command: tuple[str, ...]
    run_id: str
    run_dir: str
    """``<log_dir>/<run_id>_<random>``; "" when the workers write no files."""
    attempt: int
    workers: tuple[Worker, ...]
    """Sorted by local rank."""
    max_restarts: int = 0

    @property
    def attempt_dir(self) -> str:
        return os.path.join(self.run_dir, f"attempt_{self.attempt}") if self.run_dir else ""


def _owner(pid: int) -> int | None:
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return None


def _cmdline(pid: int) -> tuple[str, ...]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            raw = f.read()
    except OSError:
        return ()
    return tuple(x.decode(errors="replace") for x in raw.split(b"\0") if x)


def _fd_file(pid: int, fd: int) -> str:
    try:
        target = os.readlink(f"/proc/{pid}/fd/{fd}")
    except OSError:
        return ""
    return target if target.startswith("/") and os.path.isfile(target) else ""


def _children(pid: int) -> list[int]:
    kids: list[int] = []
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return kids
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", "rb") as f:
                kids.extend(int(x) for x in f.read().split())
        except OSError:
            continue
    if not kids and not os.path.exists(f"/proc/{pid}/task/{pid}/children"):
        # No children files in this kernel: one pass over the process table.
        for name in os.listdir("/proc"):
            if name.isdigit():
                entry = read_entry(int(name))
                if entry is not None and entry.ppid == pid:
                    kids.append(entry.pid)
    return kids


def _looks_like_agent(command: tuple[str, ...]) -> bool:
    text = " ".join(command[:4])
    return any(k in text for k in ("torch.distributed.run", "torchrun", "torch.distributed.launch"))


def _worker(pid: int) -> Worker | None:
    """``pid`` as a torchrun worker, or None if it is none (or gone, or not ours)."""
    if _owner(pid) != os.getuid():
        return None
    env = _environ(pid)
    entry = read_entry(pid)
    if env is None or entry is None:
        return None
    if not all(k in env for k in ("TORCHELASTIC_RUN_ID", "LOCAL_RANK", "RANK")):
        return None
    try:
        local_rank = int(env["LOCAL_RANK"])
        rank = int(env["RANK"])
        restart = int(env.get("TORCHELASTIC_RESTART_COUNT", "0") or 0)
        lws = int(env.get("LOCAL_WORLD_SIZE", "0") or 0)
    except ValueError:
        return None
    error_file = env.get("TORCHELASTIC_ERROR_FILE", "")
    beside = os.path.dirname(error_file) if error_file else ""
    stdout = _fd_file(pid, 1)
    stderr = _fd_file(pid, 2)
    # A stream that is not a file now (a tee'd pipe, a closed fd) may still have its file
    # beside the error file, where torch puts it.
    if not stdout and beside and os.path.isfile(os.path.join(beside, "stdout.log")):
        stdout = os.path.join(beside, "stdout.log")
    if not stderr and beside and os.path.isfile(os.path.join(beside, "stderr.log")):
        stderr = os.path.join(beside, "stderr.log")
    return Worker(
        local_rank=local_rank,
        rank=rank,
        pid=pid,
        starttime=entry.starttime,
        restart_count=restart,
        run_id=env["TORCHELASTIC_RUN_ID"],
        role=env.get("ROLE_NAME", "default"),
        stdout_path=stdout,
        stderr_path=stderr,
        error_file=error_file,
        local_world_size=lws,
    )


def workers_of(agent_pid: int) -> list[Worker]:
    """The live workers of ``agent_pid`` right now, newest attempt only, by local rank."""
    found = [w for w in map(_worker, _children(agent_pid)) if w is not None]
    if not found:
        return []
    newest = max(w.restart_count for w in found)
    return sorted((w for w in found if w.restart_count == newest), key=lambda w: w.local_rank)


def _run_dir_of(worker: Worker) -> str:
    # error_file = <run_dir>/attempt_<n>/<local_rank>/error.json
    for path in (worker.error_file, worker.stdout_path, worker.stderr_path):
        if path:
            attempt_dir = os.path.dirname(os.path.dirname(path))
            if _ATTEMPT.match(os.path.basename(attempt_dir)):
                return os.path.dirname(attempt_dir)
    return ""


def find_by_pid(pid: int) -> TorchrunJob:
    """The job whose agent is ``pid`` (a worker's pid leads to its agent).

    Raises:
        AttachError: no such process, not ours, not a torchrun agent, or no workers now.
    """
    owner = _owner(pid)
    if owner is None:
        raise AttachError(f"no process {pid} (gone?)")
    if owner != os.getuid():
        raise AttachError(f"process {pid} belongs to uid {owner}, not to us (uid {os.getuid()})")
    entry = read_entry(pid)
    if entry is None:
        raise AttachError(f"no process {pid} (gone?)")
    me = _worker(pid)
    if me is not None and workers_of(entry.ppid):
        return find_by_pid(entry.ppid)  # a worker: attach to its agent
    command = _cmdline(pid)
    workers = workers_of(pid)
    if not workers:
        if _looks_like_agent(command):
            raise AttachError(
                f"torchrun agent {pid} has no workers right now (rendezvous, or finished)"
            )
        shown = " ".join(command)[:80] or "?"
        raise AttachError(f"process {pid} ({shown}) is not a torchrun agent: no workers")
    first = workers[0]
    env = _environ(first.pid) or {}
    try:
        max_restarts = int(env.get("TORCHELASTIC_MAX_RESTARTS", "0") or 0)
    except ValueError:
        max_restarts = 0
    return TorchrunJob(
        agent_pid=pid,
        agent_starttime=entry.starttime,
        agent_command=command,
        run_id=first.run_id,
        run_dir=_run_dir_of(first),
        attempt=first.restart_count,
        workers=tuple(workers),
        max_restarts=max_restarts,
    )


def latest_attempt(run_dir: str) -> tuple[int, str] | None:
    """``(n, path)`` of the highest ``attempt_<n>`` in ``run_dir``, None if there is none."""
    best: tuple[int, str] | None = None
    try:
        names = os.listdir(run_dir)
    except OSError:
        return None
    for name in names:
        m = _ATTEMPT.match(name)
        if m and os.path.isdir(os.path.join(run_dir, name)):
            n = int(m.group(1))
            if best is None or n > best[0]:
                best = (n, os.path.join(run_dir, name))
    return best


def newest_run_dir(path: str) -> str:
    """The run directory ``path`` names: itself, the parent of an attempt (or of a rank
    directory in one), or the newest ``<run_id>_<random>`` in a ``--log-dir``.

    Raises:
        AttachError: nothing of torchrun's layout there.
    """
    path = os.path.abspath(path)
    if not os.path.isdir(path):
        raise AttachError(f"{path}: no such directory")
    if latest_attempt(path) is not None:
        return path
    parent = os.path.dirname(path)
    if _ATTEMPT.match(os.path.basename(path)):
        return parent
    if _ATTEMPT.match(os.path.basename(parent)):
        return os.path.dirname(parent)
    runs = []
    for name in os.listdir(path):
        full = os.path.join(path, name)
        if os.path.isdir(full) and latest_attempt(full) is not None:
            runs.append((os.stat(full).st_mtime, full))
    if not runs:
        raise AttachError(
            f"{path} is not a torchrun log dir (no <run_id>_*/attempt_<n> directories)"
        )
    return max(runs)[1]


def _writes_into(pid: int, run_dir: str) -> bool:
    prefix = run_dir.rstrip("/") + "/"
    if any(_fd_file(pid, fd).startswith(prefix) for fd in (1, 2)):
        return True
    env = _environ(pid)
    return env is not None and env.get("TORCHELASTIC_ERROR_FILE", "").startswith(prefix)


def find_by_log_dir(path: str) -> TorchrunJob:
    """The live job writing into ``path`` (a ``--log-dir``, a run directory or an attempt).

    Raises:
        AttachError: not torchrun's layout, or no live worker of ours writes there.
    """
    run_dir = newest_run_dir(path)
    me = os.getuid()
    agents: set[int] = set()
    for name in os.listdir("/proc"):
        if not name.isdigit() or _owner(int(name)) != me:
            continue
        pid = int(name)
        if _writes_into(pid, run_dir) and _worker(pid) is not None:
            entry = read_entry(pid)
            if entry is not None:
                agents.add(entry.ppid)
    if not agents:
        raise AttachError(f"no live torchrun worker of ours writes into {run_dir}")
    if len(agents) > 1:
        raise AttachError(f"several agents write into {run_dir}: {sorted(agents)}; give a pid")
    job = find_by_pid(agents.pop())
    if job.run_dir and os.path.realpath(job.run_dir) != os.path.realpath(run_dir):
        raise AttachError(f"the agent writing into {run_dir} now writes into {job.run_dir}")
    return job


def discover(target: str) -> TorchrunJob:
    """``target`` is the agent's pid (or a worker's) or a log directory; see above."""
    text = target.strip()
    if text.isdigit() and not os.path.isdir(text):
        return find_by_pid(int(text))
    return find_by_log_dir(text)
