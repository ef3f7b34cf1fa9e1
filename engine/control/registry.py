"""This user's runs: where their sockets live, the entry each supervisor leaves, RUN lookup.

The state directory is ``RANKVISOR_STATE_DIR``, else ``$XDG_STATE_HOME/rankvisor``, else
``~/.local/state/rankvisor``. Not ``$XDG_RUNTIME_DIR``: systemd-logind empties that at the
user's last logout, and a detached run must stay findable after it. It holds:

- ``s/<8 hex>.sock``: control sockets. A socket's path must fit in ``sun_path`` (108 bytes),
  hence the short names. The directory must be the user's own and closed to others (0700):
  anyone who can enter it could reach a supervisor's socket.
- ``runs/<key>.json``: one entry per run (``RunEntry``), written by its supervisor at start.
  Entries are never trusted to be whole: a torn or foreign file is skipped, not fatal.

RUN, as a person types it, resolves (``resolve``) as: an existing path (a run directory, or
a log directory holding runs: its newest), else a run id (the newest run with that id; the
nodes of a multi-node job on one machine share one), else, with nothing given, the newest
running run (for commands that act on a run) or the newest of any (for those that read).
"""

from __future__ import annotations

import json
import os
import secrets
import stat
from dataclasses import asdict, dataclass
from typing import Any, Final

from .. import clock
from ..output.safe_text import one_line
from ..rundir.atomic import write_atomic
from ..rundir.regular_file import read_regular
from .status import (
    EffectiveState,
    effective_state,
    process_start_time,
    read_status,
    status_problem,
    supervisor_alive,
)

__all__ = [
    "NoSuchRun",
    "RunEntry",
    "StateDirUnsafe",
    "entries",
    "entry_state",
    "new_socket_path",
    "register",
    "resolve",
    "runs_dir",
    "state_dir",
    "state_dir_problem",
    "unregister",
]

_SUN_PATH_MAX: Final = 107
"""sun_path holds 108 bytes, the last one the terminating NUL."""


class NoSuchRun(LookupError):
    """RUN named nothing; the message says what was tried and how to list the runs."""


class StateDirUnsafe(RuntimeError):
    """The state directory is open to others or not ours: no socket may be put there."""


@dataclass(frozen=True, slots=True)
class RunEntry:
    """One run as the registry (or, lacking an entry, its status.json) knows it."""

    run_id: str
    run_dir: str
    socket: str
    supervisor_pid: int
    supervisor_start: int | None
    """The supervisor's start time (/proc/<pid>/stat field 22), to tell a reused pid."""
    started: float
    """When the run started (epoch seconds)."""
    mode: str = ""
    """How it was started ("tui", "headless", ...), for display."""
    key: str = ""
    """The entry's file name without ".json"; "" for a run found by its path alone."""

    def supervisor_alive(self) -> bool:
        """Whether the supervisor process is still the one that registered."""
        return supervisor_alive(self.supervisor_pid, self.supervisor_start)


def state_dir() -> str:
    """The state directory's path (not created here)."""
    explicit = os.environ.get("RANKVISOR_STATE_DIR")
    if explicit:
        return os.path.abspath(explicit)
    xdg = os.environ.get("XDG_STATE_HOME")
    if xdg and os.path.isabs(xdg):
        return os.path.join(xdg, "rankvisor")
    return os.path.join(os.path.expanduser("~"), ".local", "state", "rankvisor")


def runs_dir() -> str:
    """Where the entries live."""
    return os.path.join(state_dir(), "runs")


def _problem(path: str) -> str | None:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as e:
        return f"the state directory {path} cannot be read ({e.strerror})"
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        return (f"{path} is not a directory; remove it or set RANKVISOR_STATE_DIR "
                "to a directory of your own")
    if st.st_uid != os.getuid():
        return (f"the state directory {path} belongs to uid {st.st_uid}, not to you "
                f"(uid {os.getuid()}); set RANKVISOR_STATE_DIR to a directory of your own")
    mode = stat.S_IMODE(st.st_mode)
    if mode & 0o077:
        return (f"the state directory {path} is open to others (mode {mode:o}); "
                f"fix it with: chmod 700 {path}")
    return None


def state_dir_problem() -> str | None:
    """One line saying why the state directory (or its socket directory) is unsafe, with the
    fix; None when it is fine or does not exist yet."""
    root = state_dir()
    return _problem(root) or _problem(os.path.join(root, "s")) or _problem(runs_dir())


def _ensure(path: str) -> None:
    try:
        os.makedirs(path, mode=0o700)
    except FileExistsError:
        pass


def _ensure_state_dir() -> str:
    root = state_dir()
    _ensure(root)
    problem = _problem(root)  # nothing is created inside a directory others may enter
    if problem:
        raise StateDirUnsafe(problem)
    for sub in ("s", "runs"):
        _ensure(os.path.join(root, sub))
    problem = state_dir_problem()
    if problem:
        raise StateDirUnsafe(problem)
    return root


def new_socket_path() -> str:
    """A fresh, unused socket path ``<state>/s/<8 hex>.sock``; creates the directories 0700.

    Raises:
        StateDirUnsafe: the state directory is open to others, not ours, or its path is too
            long for a socket (the message says what to do).
    """
    root = _ensure_state_dir()
    for _ in range(100):
        path = os.path.join(root, "s", secrets.token_hex(4) + ".sock")
        if len(os.fsencode(path)) > _SUN_PATH_MAX:
            raise StateDirUnsafe(
                f"the state directory {root} is too long a path for a Unix socket "
                f"({len(os.fsencode(path))} bytes, at most {_SUN_PATH_MAX}); "
                "set RANKVISOR_STATE_DIR to a shorter one"
            )
        if not os.path.lexists(path):
            return path
    raise StateDirUnsafe(f"no free socket name in {os.path.join(root, 's')}")


def _key_for(socket: str) -> str:
    name = os.path.basename(socket)
    stem = name[: -len(".sock")] if name.endswith(".sock") else ""
    if stem and all(c in "0123456789abcdef" for c in stem):
        return stem
    return secrets.token_hex(4)


def register(
    run_id: str,
    run_dir: str,
    socket: str,
    *,
    supervisor_pid: int | None = None,
    supervisor_start: int | None = None,
    started: float | None = None,
    mode: str = "",
) -> RunEntry:
    """Write the run's entry (atomically) and return it.

    ``supervisor_pid`` defaults to this process, ``supervisor_start`` to that process's start
    time, ``started`` to now. The key is the socket's name, so one run has one entry.
    """
    pid = os.getpid() if supervisor_pid is None else supervisor_pid
    start = process_start_time(pid) if supervisor_start is None else supervisor_start
    entry = RunEntry(
        run_id=run_id,
        run_dir=os.path.abspath(run_dir),
        socket=socket,
        supervisor_pid=pid,
        supervisor_start=start,
        started=clock.wall() if started is None else started,
        mode=mode,
        key=_key_for(socket),
    )
    _ensure_state_dir()
    data = {k: v for k, v in asdict(entry).items() if k != "key"}
    path = os.path.join(runs_dir(), entry.key + ".json")
    write_atomic(path, json.dumps(data).encode(), 0o600)
    return entry


def unregister(entry: RunEntry | str) -> bool:
    """Remove an entry (a ``RunEntry`` or its key); True if there was one to remove."""
    key = entry if isinstance(entry, str) else entry.key
    if not key or "/" in key or key.startswith("."):
        return False
    try:
        os.unlink(os.path.join(runs_dir(), key + ".json"))
    except FileNotFoundError:
        return False
    return True


def _entry_from(data: Any, key: str) -> RunEntry | None:
    """A RunEntry from decoded JSON, or None when any field is missing or of the wrong type."""
    if not isinstance(data, dict):
        return None
    try:
        run_id, run_dir, socket = data["run_id"], data["run_dir"], data["socket"]
        pid, start, started = data["supervisor_pid"], data.get("supervisor_start"), data["started"]
        mode = data.get("mode", "") or ""
    except KeyError:
        return None
    if not all(isinstance(v, str) for v in (run_id, run_dir, socket, mode)):
        return None
    if not isinstance(pid, int) or isinstance(pid, bool):
        return None
    if start is not None and (not isinstance(start, int) or isinstance(start, bool)):
        return None
    if not isinstance(started, (int, float)) or isinstance(started, bool):
        return None
    return RunEntry(run_id, run_dir, socket, pid, start, float(started), mode, key)


def _read_small(path: str) -> Any:
    """Decoded JSON of a regular file, or None. O_NONBLOCK: a FIFO in its place must not
    hang ``ls``; O_NOFOLLOW: an entry is never a link to elsewhere."""
    try:
        return json.loads(read_regular(path, 1 << 16))
    except (OSError, ValueError, UnicodeDecodeError, RecursionError):
        return None


def entries() -> list[RunEntry]:
    """Every readable entry, newest first. Torn, foreign or unreadable files are skipped."""
    found: list[RunEntry] = []
    try:
        names = os.listdir(runs_dir())
    except OSError:
        return []
    for name in names:
        if not name.endswith(".json") or name.startswith("."):
            continue
        data = _read_small(os.path.join(runs_dir(), name))
        if data is None:
            continue
        entry = _entry_from(data, name[: -len(".json")])
        if entry is not None:
            found.append(entry)
    found.sort(key=lambda e: e.started, reverse=True)
    return found


def entry_state(entry: RunEntry) -> tuple[EffectiveState, dict[str, Any] | None]:
    """The run's state and its status.json (None when unreadable).

    With no status yet (the supervisor is starting) or none any more (the run dir was
    removed), the supervisor's liveness decides between running and stale.
    """
    status = read_status(entry.run_dir)
    if status is not None:
        return effective_state(status), status
    return ("running" if entry.supervisor_alive() else "stale"), None


def _same_dir(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.realpath(a) == os.path.realpath(b)


def _entry_from_status(run_dir: str, status: dict[str, Any]) -> RunEntry:
    def field(name: str, kind: type | tuple[type, ...], default: Any) -> Any:
        value = status.get(name)
        ok = isinstance(value, kind) and not isinstance(value, bool)
        return value if ok else default

    return RunEntry(
        run_id=field("run_id", str, os.path.basename(run_dir)),
        run_dir=os.path.abspath(run_dir),
        socket=field("socket", str, ""),
        supervisor_pid=field("supervisor_pid", int, 0),
        supervisor_start=field("supervisor_start", int, None),
        started=float(field("started", (int, float), 0.0)),
    )


def _runs_in(log_dir: str) -> list[str]:
    """Run directories directly inside ``log_dir``, newest first (by their status's start)."""
    found: list[tuple[float, str]] = []
    try:
        names = os.listdir(log_dir)
    except OSError:
        return []
    for name in names:
        path = os.path.join(log_dir, name)
        status = read_status(path)
        if status is not None:
            started = status.get("started")
            if not isinstance(started, (int, float)):
                try:
                    started = os.stat(path).st_mtime
                except OSError:
                    started = 0.0
            found.append((float(started), path))
    found.sort(reverse=True)
    return [p for _, p in found]


def _by_path(path: str, known: list[RunEntry]) -> RunEntry:
    run_dir = path
    status = read_status(path)
    if status is None:
        inside = _runs_in(path)
        if not inside:
            problem = status_problem(path)
            if problem is not None:
                raise NoSuchRun(f"{one_line(path)}: {problem}; `rankvisor ls` lists your runs")
            raise NoSuchRun(
                f"{path} is neither a run directory (it has no status.json) nor a log "
                "directory holding one; `rankvisor ls` lists your runs"
            )
        run_dir = inside[0]
        status = read_status(run_dir) or {}
    for entry in known:
        if _same_dir(entry.run_dir, run_dir):
            return entry
    # No entry (it was removed, or the run belongs to another machine's state dir): the
    # status.json says all a reader needs.
    return _entry_from_status(run_dir, status)


def resolve(run: str | None, *, running_only: bool) -> RunEntry:
    """The run ``run`` names (see the module's docstring for the order of the rules).

    ``running_only`` (commands that act on a run): with no RUN, the newest *running* run;
    among several runs sharing an id, the newest running one first.

    Raises:
        NoSuchRun: nothing matched; the message says what was tried.
    """
    known = entries()
    hint = "`rankvisor ls` lists your runs"
    if run:
        if os.path.exists(run):
            return _by_path(run, known)
        same = [e for e in known if e.run_id == run or os.path.basename(e.run_dir) == run]
        if same:
            if running_only:
                live = [e for e in same if entry_state(e)[0] == "running"]
                if live:
                    return live[0]
            return same[0]
        raise NoSuchRun(f"no run {run!r}: it is no path, and no run of yours has that id; {hint}")
    if running_only:
        for entry in known:
            if entry_state(entry)[0] == "running":
                return entry
        more = f" ({len(known)} finished or stale)" if known else ""
        raise NoSuchRun(f"no running run of yours{more} in {runs_dir()}; {hint}")
    if known:
        return known[0]
    raise NoSuchRun(f"no run of yours in {runs_dir()}; {hint}")
