"""The commands that reach a run from outside: ``ls status stop terminate signal restart wait
logs rm bundle stack``.

Each parses its own flags, resolves RUN (``engine.control.registry.resolve``: a path, a run
id, or the newest run) and then reads the run's status.json and log files, or talks to its
supervisor through the control socket. Exit statuses, the same for every command:

- 0 done; 1 refused (the supervisor's message, or why not, is printed); 2 usage;
- 3 no such run; 4 the run is stale (its status says running, its supervisor is gone).

``wait`` exits with the run's own exit status instead of 0. Nothing here starts, signals or
inspects a process: the engine's registry tells whether a supervisor lives, and commands go
to the supervisor, which carries them out.
"""

from __future__ import annotations

import argparse
import codecs
import json
import os
import shutil
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from ..engine.control import registry
from ..engine.control.registry import NoSuchRun, RunEntry
from ..engine.control.status import FILENAME, current_attempt
from ..engine.process.signals import parse_signal
from ..engine.states import RankState
from .run_args import PROG, _Parser

if TYPE_CHECKING:
    from ..engine.handle import Command, CommandResult

__all__ = [
    "COMMANDS",
    "EXIT_NO_RUN",
    "EXIT_OK",
    "EXIT_REFUSED",
    "EXIT_STALE",
    "EXIT_USAGE",
    "current_log",
    "local_ranks",
    "main",
    "parse_ranks",
    "run_command",
]

COMMANDS: Final = (
    "ls", "status", "stop", "terminate", "signal", "restart", "wait", "logs", "rm", "bundle",
    "stack",
)

EXIT_OK: Final = 0
EXIT_REFUSED: Final = 1
EXIT_USAGE: Final = 2
EXIT_NO_RUN: Final = 3
EXIT_STALE: Final = 4

HELP: Final = {
    "ls": "list your runs: running, finished and stale",
    "status": "a run's state, ranks and root cause (--json for scripts)",
    "stop": "terminate every rank of a run (with escalation) and wait until they are gone",
    "terminate": "terminate some ranks of a run, with escalation",
    "signal": "send a signal to some ranks of a run",
    "restart": "restart one rank of a run, or all of them (a new attempt)",
    "wait": "wait until a run finishes; exit with its exit status",
    "logs": "print a rank's stdout or stderr (-f follows it)",
    "rm": "remove a finished run from the list (--logs: its run directory too)",
    "bundle": "one .tar.gz of a run for a bug report: logs, errors, stacks, status, env",
    "stack": "dump every rank's Python stack (py-spy), merged: the odd ranks first",
}

_ALIVE: Final = frozenset(s.value for s in RankState if s.is_alive)
_WAKE_S: Final = 1.0
"""How often a waiting command looks again without a change notification: the supervisor
can die without touching any file, and only this look notices that the run went stale."""


class _Usage(Exception):
    """A usage error found after parsing (a rank the run does not have)."""


class _Refused(Exception):
    """A command this supervisor cannot carry out: a rank that runs on another node."""


def _say(command: str, message: str) -> None:
    print(f"{PROG} {command}: {message}", file=sys.stderr)


def _parser(command: str) -> argparse.ArgumentParser:
    return _Parser(prog=f"{PROG} {command}", description=HELP[command])


def _started(t: object) -> str:
    if not isinstance(t, (int, float)) or t <= 0:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))


def _stale_line(entry: RunEntry) -> str:
    return (f"run {entry.run_id} is stale: its supervisor (pid {entry.supervisor_pid}) is gone; "
            f"its last status is in {os.path.join(entry.run_dir, FILENAME)} "
            f"(`{PROG} rm {entry.run_dir}` removes it from the list)")


def parse_ranks(text: str, *, allow_all: bool = True) -> tuple[int, ...] | None:
    """"0,2" -> (0, 2); "0-3" -> (0, 1, 2, 3); "1,4-5" -> (1, 4, 5); "all" -> None.

    Raises:
        ValueError: with a line saying what is accepted.
    """
    raw = text.strip()
    accepted = "a rank (2), a list (0,2), a range (0-3)" + (" or all" if allow_all else "")
    if raw.lower() == "all":
        if allow_all:
            return None
        raise ValueError(f"'all' is not accepted here: give {accepted}")
    out: list[int] = []
    for part in raw.split(","):
        lo, dash, hi = part.strip().partition("-")
        try:
            first = int(lo)
            last = int(hi) if dash else first
        except ValueError:
            raise ValueError(f"{text!r} is not {accepted}") from None
        if first < 0 or last < first:
            raise ValueError(f"{part.strip()!r} is not a rank range (give low-high, from 0)")
        out.extend(r for r in range(first, last + 1) if r not in out)
    return tuple(out)


def _check_ranks(ranks: tuple[int, ...], nprocs: int | None) -> None:
    if nprocs is None:
        return
    bad = [r for r in ranks if r >= nprocs]
    if bad:
        raise _Usage(f"rank {bad[0]} is not in this run (its ranks are 0-{nprocs - 1})")


def _is_cluster(status: dict[str, Any] | None) -> bool:
    """Whether ``status`` is a node's of a multi-node run (its ranks carry ``node_rank``)."""
    return bool(status) and isinstance(status.get("node_rank"), int)  # type: ignore[union-attr]


def _here(status: dict[str, Any]) -> list[dict[str, Any]]:
    """This node's ranks in a multi-node status, by local rank."""
    node = status.get("node_rank")
    ranks = [r for r in status.get("ranks") or []
             if isinstance(r, dict) and r.get("node_rank") == node]
    return sorted(ranks, key=lambda r: int(r.get("local_rank", 0)))


def local_ranks(ranks: tuple[int, ...], status: dict[str, Any] | None) -> tuple[int, ...]:
    """Global ranks (as commands take them) as this node's local ranks (as the supervisor's
    commands take them). On one node they are the same.

    In a multi-node run the status lists every rank of every node with its ``node_rank``,
    ``local_rank`` and ``host``: a rank of another node is refused with the node and host
    where the command would act.

    Raises:
        _Refused: a rank that runs on another node (or on none this node has heard of).
    """
    if not _is_cluster(status):
        return ranks
    assert status is not None
    node = status.get("node_rank")
    every = {int(r["rank"]): r for r in status.get("ranks") or []
             if isinstance(r, dict) and isinstance(r.get("rank"), int)}
    out: list[int] = []
    for rank in ranks:
        r = every.get(rank)
        if r is None:
            here = [int(x["rank"]) for x in _here(status)]
            span = f"ranks {min(here)}-{max(here)}" if here else "no ranks yet"
            raise _Refused(f"rank {rank} is not on this node (node {node} has {span}) and no "
                           "other node's record names it yet: run the command on its node")
        if r.get("node_rank") != node:
            raise _Refused(f"rank {rank} runs on node {r.get('node_rank')} ({r.get('host')}): "
                           "run the command there")
        out.append(int(r.get("local_rank", 0)))
    return tuple(out)


def _same_round(status: dict[str, Any] | None, handle: Any) -> None:
    """The global-to-local mapping was read from status.json: check it against the live
    supervisor (a new round may have renumbered this node's ranks since).

    Raises:
        _Refused: the numbering moved; the command is not sent.
    """
    if not _is_cluster(status):
        return
    assert status is not None
    here = _here(status)
    base = int(here[0]["rank"]) - int(here[0].get("local_rank", 0)) if here else 0
    live = int(handle.snapshot().rank_base)
    if live != base:
        raise _Refused(f"a new round renumbered this node's ranks (they start at {live} now, "
                       f"not {base}): run the command again")


def _world(status: dict[str, Any] | None) -> int | None:
    """The rank count to check global ranks against; None in a multi-node run, where a node
    whose record was not read yet is missing from the list (``local_ranks`` says so)."""
    return None if _is_cluster(status) else _nprocs(status)


def _nprocs(status: dict[str, Any] | None) -> int | None:
    ranks = status.get("ranks") if status else None
    return len(ranks) if isinstance(ranks, list) and ranks else None


def _state(entry: RunEntry) -> tuple[str, dict[str, Any] | None]:
    return registry.entry_state(entry)


# -- ls ---------------------------------------------------------------------------------


def _row(entry: RunEntry) -> dict[str, Any]:
    state, status = _state(entry)
    ranks = status.get("ranks") if status else None
    ranks = ranks if isinstance(ranks, list) else []
    live = sum(1 for r in ranks if isinstance(r, dict) and r.get("state") in _ALIVE)
    return {
        "run_id": entry.run_id,
        "state": state,
        "ranks_running": live if state == "running" else 0,
        "ranks_total": len(ranks),
        "attempt": status.get("attempt") if status else None,
        "exitcode": status.get("exitcode") if status else None,
        "started": entry.started,
        "run_dir": entry.run_dir,
        "socket": entry.socket,
        "supervisor_pid": entry.supervisor_pid,
        "mode": entry.mode,
    }


def _ls(argv: list[str]) -> int:
    p = _parser("ls")
    p.add_argument("--json", action="store_true", help="a JSON list, one object per run")
    args = p.parse_args(argv)
    problem = registry.state_dir_problem()
    if problem:
        _say("ls", f"warning: {problem}")
    rows = [_row(e) for e in registry.entries()]
    if args.json:
        print(json.dumps(rows, indent=1))
        return EXIT_OK
    if not rows:
        print(f"no runs (looked in {registry.runs_dir()})")
        return EXIT_OK
    table = [("RUN ID", "STATE", "RANKS", "ATTEMPT", "STARTED", "RUN DIR")]
    for r in rows:
        ranks = f"{r['ranks_running']}/{r['ranks_total']}" if r["ranks_total"] else "-"
        attempt = "-" if r["attempt"] is None else str(r["attempt"])
        table.append((r["run_id"], r["state"], ranks, attempt, _started(r["started"]),
                      r["run_dir"]))
    widths = [max(len(row[i]) for row in table) for i in range(5)]
    for row in table:
        print("  ".join(row[i].ljust(widths[i]) for i in range(5)) + "  " + row[5])
    return EXIT_OK


# -- status -----------------------------------------------------------------------------


def _status_json(entry: RunEntry, state: str, status: dict[str, Any] | None) -> dict[str, Any]:
    if status is None:  # the supervisor has not written one yet, or the run dir is gone
        status = {
            "schema": 1, "run_id": entry.run_id, "run_dir": entry.run_dir,
            "socket": entry.socket, "supervisor_pid": entry.supervisor_pid,
            "supervisor_start": entry.supervisor_start, "state": state, "attempt": None,
            "finished": False, "exitcode": None, "ranks": [], "root_cause": None,
            "started": entry.started, "updated": None, "tracking": None,
        }
    return {**status, "state": state}


def _status_text(s: dict[str, Any]) -> str:
    lines = [f"run {s.get('run_id')}  {s.get('state')}"
             + ("" if s.get("exitcode") is None else f"  exit code {s.get('exitcode')}"),
             f"  run dir     {s.get('run_dir')}",
             f"  started     {_started(s.get('started'))}"
             f"   attempt {'-' if s.get('attempt') is None else s.get('attempt')}",
             f"  supervisor  pid {s.get('supervisor_pid')}  socket {s.get('socket') or '-'}"]
    ranks = [r for r in s.get("ranks") or [] if isinstance(r, dict)]
    cluster = _is_cluster(s)
    if cluster:
        info: dict[str, Any] = s["cluster"] if isinstance(s.get("cluster"), dict) else {}
        store = "" if info.get("store") != "gone" else "  (the rendezvous store is gone)"
        lines.append(f"  node        {s.get('node_rank')} of {s.get('nnodes')} ({s.get('host')})"
                     f"   nodes seen {info.get('nodes_seen', '-')}{store}")
    if ranks and cluster:
        # Every rank of every node; the pid only for this node's (null for the others).
        width = max([4] + [len(str(r.get("host") or "-")) for r in ranks])
        lines.append(f"  RANK  NODE  {'HOST':<{width}}  LOCAL  PID      STATE        EXIT  "
                     "SIGNAL     RESTARTS")
        columns = ("rank", "node_rank", "host", "local_rank", "pid", "state", "exitcode",
                   "signal", "restart_count")
        for r in ranks:
            c = ["-" if r.get(k) is None else str(r.get(k)) for k in columns]
            lines.append(f"  {c[0]:<4}  {c[1]:<4}  {c[2]:<{width}}  {c[3]:<5}  {c[4]:<7}  "
                         f"{c[5]:<11}  {c[6]:<4}  {c[7]:<9}  {c[8]}")
    elif ranks:
        lines.append("  RANK  PID      STATE        EXIT  SIGNAL     RESTARTS")
        keys = ("rank", "pid", "state", "exitcode", "signal", "restart_count")
        for r in ranks:
            c = ["-" if r.get(k) is None else str(r.get(k)) for k in keys]
            lines.append(f"  {c[0]:<4}  {c[1]:<7}  {c[2]:<11}  {c[3]:<4}  {c[4]:<9}  {c[5]}")
        for r in ranks:
            cause = r.get("exit_cause")
            if isinstance(cause, dict) and cause.get("code") not in (None, "stopped"):
                lines.append(f"  rank {r.get('rank')}: {' '.join(str(cause.get('text')).split())}")
    for r in ranks:
        wait = r.get("input_wait")
        if isinstance(wait, dict):  # a person is asked something (`rankvisor input`/`debug`)
            where = f" at {wait.get('where')}" if wait.get("where") else ""
            lines.append(f"  rank {r.get('rank')}: waiting for input{where}, prompt "
                         f"{str(wait.get('prompt') or '')!r}")
    cause = s.get("root_cause")
    if isinstance(cause, dict):
        how = (f"signal {cause.get('signal')}" if cause.get("signal")
               else f"exit code {cause.get('exitcode')}")
        message = " ".join(str(cause.get("message") or "").split())
        where = (f" on node {cause.get('node_rank')} ({cause.get('host')})"
                 if cause.get("node_rank") is not None else "")
        lines.append(f"  root cause  rank {cause.get('rank')}{where} ({how}): {message}")
    return "\n".join(lines)


def _status(argv: list[str]) -> int:
    p = _parser("status")
    p.add_argument("run", nargs="?", metavar="RUN", help="a run dir, log dir or run id")
    p.add_argument("--json", action="store_true", help="the status as JSON (schema 1)")
    args = p.parse_args(argv)
    entry = registry.resolve(args.run, running_only=False)
    state, status = _state(entry)
    out = _status_json(entry, state, status)
    print(json.dumps(out, indent=1) if args.json else _status_text(out))
    return EXIT_STALE if state == "stale" else EXIT_OK


# -- logs and wait ----------------------------------------------------------------------


def current_log(run_dir: str, status: dict[str, Any] | None, rank: int, stream: str) -> str:
    """The path of ``rank``'s ``stream`` ("stdout"/"stderr") file of its current incarnation.

    The layout is the supervisor's: ``attempt_<n>/<rank>/<stream>.log`` for a rank's first
    incarnation in an attempt, ``attempt_<n>/<rank>/restart_<k>/`` once it was restarted
    alone (the highest k is the current one).
    """
    attempt = current_attempt(run_dir, status) or 0
    rank_dir = os.path.join(run_dir, f"attempt_{attempt}", str(rank))
    best = 0
    try:
        for name in os.listdir(rank_dir):
            if name.startswith("restart_") and name[8:].isdigit():
                best = max(best, int(name[8:]))
    except OSError:
        pass
    base = os.path.join(rank_dir, f"restart_{best}") if best else rank_dir
    return os.path.join(base, f"{stream}.log")


class _Copier:
    """Copies a log file's new bytes to stdout: exact bytes into a pipe or a file; on a
    terminal, decoded and with every escape but colours neutralised (a rank writes anything)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.offset = 0
        self._tty = sys.stdout.isatty()
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def pump(self) -> int:
        """Copy what was appended since the last call; returns the bytes copied."""
        try:
            with open(self.path, "rb") as f:
                if os.fstat(f.fileno()).st_size < self.offset:  # truncated: start again
                    self.offset = 0
                f.seek(self.offset)
                total = 0
                while chunk := f.read(1 << 16):
                    self._write(chunk)
                    total += len(chunk)
                self.offset += total
        except FileNotFoundError:
            return 0
        sys.stdout.flush()
        return total

    def _write(self, chunk: bytes) -> None:
        if not self._tty:
            sys.stdout.buffer.write(chunk)
            return
        from ..engine.output.sanitize import sanitize

        sys.stdout.write(sanitize(self._decoder.decode(chunk)))


def _watch(paths: Callable[[], list[str]], step: Callable[[], bool]) -> None:
    """Call ``step`` until it returns True; between calls, sleep until one of ``paths()``
    changes (inotify where there is one) or ``_WAKE_S`` passes."""
    from ..engine.output.wakeups import make_waker

    waker = make_waker("inotify", poll_interval=_WAKE_S, debounce=0.02)
    watched: set[str] = set()
    try:
        while True:
            for path in paths():
                if path not in watched:
                    waker.watch(path)
                    watched.add(path)
            if step():
                return
            waker.wait(_WAKE_S)
    finally:
        waker.close()


def _logs(argv: list[str]) -> int:
    p = _parser("logs")
    p.add_argument("run", nargs="?", metavar="RUN", help="a run dir, log dir or run id")
    p.add_argument("--rank", type=int, default=0, metavar="N", help="the global rank (default 0)")
    p.add_argument("--stderr", action="store_true", help="stderr instead of stdout")
    p.add_argument("-f", "--follow", action="store_true",
                   help="keep printing as the rank writes, until the run finishes")
    p.add_argument("--typed", action="store_true",
                   help="with the lines typed to the rank (its stdin.log), marked, where they "
                        "arrived (not with -f)")
    args = p.parse_args(argv)
    if args.typed and args.follow:
        raise _Usage("--typed shows a log as it is: leave out -f")
    entry = registry.resolve(args.run, running_only=False)
    state, status = _state(entry)
    nprocs = _nprocs(status)
    if args.rank < 0:
        raise _Usage(f"--rank must be 0 or more, not {args.rank}")
    _check_ranks((args.rank,), _world(status) if nprocs is not None else None)
    (local,) = local_ranks((args.rank,), status)  # the files are this node's, by local rank
    stream = "stderr" if args.stderr else "stdout"
    path = current_log(entry.run_dir, status, local, stream)
    if not os.path.exists(path) and (not args.follow or state != "running"):
        _say("logs", f"rank {args.rank} has no {stream} file at {path} "
                     "(its output may have gone to the console only)")
        return EXIT_REFUSED
    if args.typed:
        from ..engine.logfile.stdin_log import typed_view
        from ..engine.output.sanitize import sanitize

        text = "\n".join(typed_view(path, 1 if args.stderr else 0)) + "\n"
        print(sanitize(text) if sys.stdout.isatty() else text, end="")
        return EXIT_OK
    copier = _Copier(path)
    copier.pump()
    if not args.follow:
        return EXIT_OK
    outcome = {"state": state}

    def step() -> bool:
        # The state first, the bytes after: a run seen finished has written its last line,
        # so the copy that follows drains the file.
        now, st = _state(entry)
        newer = current_log(entry.run_dir, st, local, stream)
        if newer != copier.path and os.path.exists(newer):
            copier.pump()  # the rest of the old incarnation, then the new one from its start
            print(f"==> {newer} <==", file=sys.stderr)
            copier.path, copier.offset = newer, 0
        copier.pump()
        outcome["state"] = now
        return now != "running"

    _watch(lambda: [copier.path, os.path.join(entry.run_dir, FILENAME)], step)
    if outcome["state"] == "stale":
        _say("logs", _stale_line(entry))
        return EXIT_STALE
    return EXIT_OK


def _exit_of(status: dict[str, Any] | None) -> int:
    code = status.get("exitcode") if status else None
    if isinstance(code, int) and not isinstance(code, bool) and 0 <= code <= 255:
        return code
    return 1


def _wait(argv: list[str]) -> int:
    p = _parser("wait")
    p.add_argument("run", nargs="?", metavar="RUN", help="a run dir, log dir or run id")
    args = p.parse_args(argv)
    entry = registry.resolve(args.run, running_only=False)
    seen: dict[str, Any] = {}

    def step() -> bool:
        seen["state"], seen["status"] = _state(entry)
        return bool(seen["state"] != "running")

    _watch(lambda: [os.path.join(entry.run_dir, FILENAME)], step)
    if seen["state"] == "stale":
        _say("wait", _stale_line(entry))
        return EXIT_STALE
    return _exit_of(seen["status"])


# -- rm ---------------------------------------------------------------------------------


def _rm(argv: list[str]) -> int:
    p = _parser("rm")
    p.add_argument("run", metavar="RUN", help="a run dir, log dir or run id")
    p.add_argument("--logs", action="store_true", help="remove the run directory too")
    args = p.parse_args(argv)
    entry = registry.resolve(args.run, running_only=False)
    state, status = _state(entry)
    if state == "running":
        _say("rm", f"run {entry.run_id} is running (supervisor pid {entry.supervisor_pid}): "
                   f"stop it first with `{PROG} stop {entry.run_dir}`")
        return EXIT_REFUSED
    removed: list[str] = []
    if entry.key and registry.unregister(entry):
        removed.append("its entry")
    if entry.socket and os.path.dirname(entry.socket) == os.path.join(registry.state_dir(), "s"):
        try:  # a supervisor killed with SIGKILL leaves its socket file behind
            os.unlink(entry.socket)
        except OSError:
            pass
    if args.logs and os.path.isdir(entry.run_dir):
        if status is None:
            _say("rm", f"{entry.run_dir} holds no {FILENAME}: not removing a directory "
                       "that does not look like a run's")
            return EXIT_REFUSED
        shutil.rmtree(entry.run_dir)
        removed.append(f"its run directory {entry.run_dir}")
    if removed:
        print(f"run {entry.run_id} ({state}): removed {' and '.join(removed)}")
    else:
        print(f"run {entry.run_id} ({state}) has no entry in the list; nothing removed"
              + ("" if args.logs else " (--logs removes its run directory)"))
    return EXIT_OK


# -- bundle -----------------------------------------------------------------------------


def _bundle(argv: list[str]) -> int:
    from ..engine.forensics.bundle import DEFAULT_MAX_FILE_BYTES, make_bundle

    p = _parser("bundle")
    p.add_argument("run", nargs="?", metavar="RUN",
                   help="a run dir, log dir or run id (default: your newest run)")
    p.add_argument("-o", "--output", metavar="FILE",
                   help="where to write it (default: ./rankvisor-<run>-<time>.tar.gz)")
    p.add_argument("--max-log-mb", type=float, default=DEFAULT_MAX_FILE_BYTES / (1 << 20),
                   metavar="N", help="keep the last N MiB of each file (default: %(default)g)")
    args = p.parse_args(argv)
    if not args.max_log_mb > 0:
        p.error(f"--max-log-mb must be more than 0, not {args.max_log_mb}")
    entry = registry.resolve(args.run, running_only=False)
    try:
        bundle = make_bundle(entry.run_dir, args.output,
                             max_file_bytes=int(args.max_log_mb * (1 << 20)))
    except OSError as e:
        _say("bundle", f"cannot write the bundle of {entry.run_dir}: {e.strerror or e}")
        return EXIT_REFUSED
    size = os.path.getsize(bundle.path)
    envs = ", ".join(f"{r}: {s}" for r, s in sorted(bundle.environments.items())) or "none"
    print(f"{bundle.path}  ({size / (1 << 20):.1f} MiB, {len(bundle.files)} files; "
          f"environments from {envs}; secrets redacted)")
    if bundle.truncated:
        print(f"  kept the last {args.max_log_mb:g} MiB of: {', '.join(bundle.truncated)}")
    return EXIT_OK


# -- commands through the supervisor ----------------------------------------------------


def _connect_and_run(
    command: str, entry: RunEntry, build: Callable[[Any], Command], *, wait: bool = False,
    show: Callable[[CommandResult], None] | None = None,
) -> int:
    """Send one command to the run's supervisor and print its answer (``show`` prints it
    instead of the message, for a command that hands back data)."""
    state, status = _state(entry)
    if state == "stale":
        _say(command, _stale_line(entry))
        return EXIT_STALE
    code = status.get("exitcode") if status else None
    if state == "finished" and command == "stop":
        print(f"run {entry.run_id} has already finished (exit code {code})")
        return EXIT_OK
    if state == "finished" and not entry.supervisor_alive():
        _say(command, f"run {entry.run_id} has finished (exit code {code}) and its supervisor "
                      "has exited: there is no rank to act on")
        return EXIT_REFUSED
    from ..engine.control.client import NoAnswer, ProtocolMismatch, RemoteHandle

    try:
        handle = RemoteHandle.connect(entry.socket, name=f"{PROG} {command}")
    except (FileNotFoundError, ConnectionRefusedError) as e:
        if not entry.supervisor_alive():
            _say(command, _stale_line(entry))
            return EXIT_STALE
        _say(command, f"the supervisor (pid {entry.supervisor_pid}) does not answer at "
                      f"{entry.socket or '(no socket)'}: {e.strerror or e}")
        return EXIT_REFUSED
    except (ProtocolMismatch, NoAnswer) as e:
        _say(command, str(e))
        return EXIT_REFUSED
    except OSError as e:
        _say(command, f"cannot reach the supervisor at {entry.socket}: {e.strerror or e}")
        return EXIT_REFUSED
    try:
        cmd = build(handle)  # _Usage and _Refused are said by ``main``, as for every command
        result: CommandResult = handle.execute(cmd)
        if show is not None:
            show(result)
        elif result.message:
            print(result.message, file=sys.stdout if result.ok else sys.stderr)
        if not result.ok:
            return EXIT_REFUSED
        if wait:
            finished = handle.wait(None)
            if finished is None:  # the connection ended first: the file says how it ended
                now, st = _state(entry)
                if now == "stale":
                    _say(command, _stale_line(entry))
                    return EXIT_STALE
                print(f"run {entry.run_id} {now}"
                      + (f" (exit code {st.get('exitcode')})" if st else ""))
            else:
                print(f"run {entry.run_id} finished; every rank is gone")
        return EXIT_OK
    finally:
        handle.detach()


def _ranks_arg(text: str, p: argparse.ArgumentParser, *,
               allow_all: bool = True) -> tuple[int, ...] | None:
    try:
        return parse_ranks(text, allow_all=allow_all)
    except ValueError as e:
        p.error(str(e))


def _all_ranks(status: dict[str, Any] | None, handle: Any) -> tuple[int, ...]:
    """Every rank of this node, local (a multi-node status lists the other nodes' too)."""
    n = None if _is_cluster(status) else _nprocs(status)
    return tuple(range(n if n is not None else int(handle.snapshot().nprocs)))


def _timeout(value: float | None, p: argparse.ArgumentParser) -> float | None:
    if value is not None and not value >= 0:
        p.error(f"--timeout must be a number of seconds >= 0, not {value}")
    return value


def _stop(argv: list[str]) -> int:
    from ..engine.handle import TerminateRanks

    p = _parser("stop")
    p.add_argument("run", nargs="?", metavar="RUN",
                   help="a run dir, log dir or run id (default: your newest running run)")
    p.add_argument("--timeout", type=float, default=None, metavar="S",
                   help="seconds from SIGTERM to SIGKILL (default: the run's own)")
    p.add_argument("--no-wait", action="store_true",
                   help="return once the supervisor accepted, not when the ranks are gone")
    args = p.parse_args(argv)
    timeout = _timeout(args.timeout, p)
    entry = registry.resolve(args.run, running_only=True)
    return _connect_and_run("stop", entry, lambda _h: TerminateRanks(None, timeout_s=timeout),
                            wait=not args.no_wait)


def _targets(
    run: str | None, ranks: tuple[int, ...] | None
) -> tuple[registry.RunEntry, dict[str, Any] | None, tuple[int, ...] | None]:
    """The running run RUN names, its status, and ``ranks`` (global, as a person types
    them) as this node's local ranks; None stays None (every rank)."""
    entry = registry.resolve(run, running_only=True)
    status = _state(entry)[1]
    if ranks is not None:
        _check_ranks(ranks, _world(status))
        ranks = local_ranks(ranks, status)
    return entry, status, ranks


def _terminate(argv: list[str]) -> int:
    from ..engine.handle import TerminateRanks

    p = _parser("terminate")
    p.add_argument("run", metavar="RUN", help="a run dir, log dir or run id")
    p.add_argument("ranks", metavar="RANKS", help="global ranks: 2, 0,2, 0-3 or all")
    p.add_argument("--timeout", type=float, default=None, metavar="S",
                   help="seconds from SIGTERM to SIGKILL (default: the run's own)")
    args = p.parse_args(argv)
    timeout = _timeout(args.timeout, p)
    ranks = _ranks_arg(args.ranks, p)
    entry, status, ranks = _targets(args.run, ranks)

    def build(h: Any) -> Command:
        if ranks is not None:
            _same_round(status, h)
        return TerminateRanks(ranks, timeout_s=timeout)

    return _connect_and_run("terminate", entry, build)


def _signal(argv: list[str]) -> int:
    from ..engine.handle import SignalRanks

    p = _parser("signal")
    p.add_argument("run", metavar="RUN", help="a run dir, log dir or run id")
    p.add_argument("ranks", metavar="RANKS", help="global ranks: 2, 0,2, 0-3 or all")
    p.add_argument("sig", metavar="SIG", help="a name (TERM, SIGUSR1) or a number")
    args = p.parse_args(argv)
    ranks = _ranks_arg(args.ranks, p)
    try:
        sig = parse_signal(args.sig)
    except ValueError as e:
        p.error(str(e))
    entry, status, ranks = _targets(args.run, ranks)

    def build(h: Any) -> Command:
        if ranks is not None:
            _same_round(status, h)
        return SignalRanks(ranks if ranks is not None else _all_ranks(status, h), sig)

    return _connect_and_run("signal", entry, build)


def _restart(argv: list[str]) -> int:
    from ..engine.handle import RestartAll, RestartRank

    p = _parser("restart")
    p.add_argument("run", metavar="RUN", help="a run dir, log dir or run id")
    p.add_argument("rank", metavar="RANK",
                   help="a global rank, or all (every rank: a new attempt)")
    args = p.parse_args(argv)
    command: Command
    if args.rank.strip().lower() == "all":
        command = RestartAll()
    else:
        ranks = _ranks_arg(args.rank, p, allow_all=False)
        if ranks is None or len(ranks) != 1:
            p.error(f"RANK is one rank or all, not {args.rank!r}")
        command = RestartRank(ranks[0])
    entry = registry.resolve(args.run, running_only=True)
    status = _state(entry)[1]
    if isinstance(command, RestartRank):
        _check_ranks((command.rank,), _world(status))
        (local,) = local_ranks((command.rank,), status)
        command = RestartRank(local)

    def build(h: Any) -> Command:
        if isinstance(command, RestartRank):
            _same_round(status, h)
        return command

    return _connect_and_run("restart", entry, build)


def _stack(argv: list[str]) -> int:
    from ..engine.handle import DumpStacks

    p = _parser("stack")
    p.add_argument("run", nargs="?", metavar="RUN",
                   help="a run dir, log dir or run id (default: your newest running run)")
    p.add_argument("--rank", metavar="RANKS", default=None,
                   help="ranks to dump: 2, 0,2 or 0-3 (default: every running rank)")
    p.add_argument("--native", action="store_true",
                   help="C/C++ frames too (each rank is paused while it is read)")
    p.add_argument("--nonblocking", action="store_true",
                   help="never pause a rank (Python frames only; a read-only viewer's kind)")
    p.add_argument("--json", action="store_true",
                   help="the dump as JSON: groups (odd first), every rank's threads, path")
    args = p.parse_args(argv)
    if args.native and args.nonblocking:
        p.error("--native needs a blocking dump: leave out --nonblocking")
    ranks = _ranks_arg(args.rank, p) if args.rank is not None else None
    entry, status, ranks = _targets(args.run, ranks)

    def show(result: CommandResult) -> None:
        if args.json and result.data is not None:
            print(json.dumps(result.data, indent=2))
        elif result.data is not None:
            print(_stack_text(result.data))
        if not result.ok or (result.message and not args.json):
            print(result.message, file=sys.stdout if result.ok else sys.stderr)

    return _connect_and_run(
        "stack", entry,
        lambda _h: DumpStacks(ranks, native=args.native, nonblocking=args.nonblocking),
        show=show,
    )


def _stack_text(data: dict[str, Any]) -> str:
    """The merged view, each group's frames, and where the whole dump was saved."""
    from ..engine.forensics.stacks import StackDump

    dump = StackDump.from_dict(data)
    lines = [dump.merged_text()]
    for group in dump.groups:
        if group.frames:
            lines += ["", f"{group.who()}:", *(f"    {f}" for f in group.frame_lines())]
    lines += ["", f"saved to {dump.path}" if dump.path else "not saved"]
    return "\n".join(lines)


_RUNNERS: Final[dict[str, Callable[[list[str]], int]]] = {
    "ls": _ls, "status": _status, "stop": _stop, "terminate": _terminate,
    "signal": _signal, "restart": _restart, "wait": _wait, "logs": _logs, "rm": _rm,
    "bundle": _bundle,
    "stack": _stack,
}


def main(command: str, argv: list[str]) -> int:
    """Run ``command`` (one of ``COMMANDS``) with its arguments; returns the exit status."""
    return run_command(command, _RUNNERS[command], argv)


def run_command(command: str, runner: Callable[[list[str]], int], argv: list[str]) -> int:
    """Run one command's ``runner``, saying its refusals and usage errors as every command
    does (``tui.debug_cli``'s commands come through here too)."""
    try:
        return runner(list(argv))
    except SystemExit as e:  # argparse: -h (0) or a usage error (2), already printed
        return e.code if isinstance(e.code, int) else EXIT_USAGE
    except _Usage as e:
        print(f"{PROG} {command}: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except _Refused as e:
        _say(command, str(e))
        return EXIT_REFUSED
    except NoSuchRun as e:
        _say(command, str(e))
        return EXIT_NO_RUN
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `rankvisor logs | head`: the reader has all it wanted
        try:
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - silence the final flush
        except OSError:
            pass
        return EXIT_OK
