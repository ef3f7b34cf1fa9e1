"""``rankvisor ls``, ``status`` and ``rm``: the list of runs, one run's state, and removing
a finished run from the list.

They read the registry and the runs' status.json files, never a supervisor: a finished run,
or one whose supervisor died (stale), reads as well as a running one.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from typing import Any, Final

from ...engine.control import registry
from ...engine.control.registry import RunEntry
from ...engine.control.status import FILENAME
from ...engine.output.safe_text import one_line
from ...engine.states import RankState
from .command import EXIT_OK, EXIT_REFUSED, EXIT_STALE, Subcommand, on_a_run, say
from .ranks import is_cluster
from .run_args import PROG

__all__ = ["ls", "rm", "status"]

_ALIVE: Final = frozenset(s.value for s in RankState if s.is_alive)


def _shown(value: Any) -> Any:
    """``value`` with every string in it made one safe line: status.json and the registry
    are files anyone with the run dir could have edited, and a remote node's host is the
    rendezvous store's (JSON output needs none of this: ``json.dumps`` escapes controls)."""
    if isinstance(value, str):
        return one_line(value, 2000)
    if isinstance(value, dict):
        return {k: _shown(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_shown(v) for v in value]
    return value


def _started(t: object) -> str:
    if not isinstance(t, (int, float)) or t <= 0:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))


# -- ls ---------------------------------------------------------------------------------


def _row(entry: RunEntry) -> dict[str, Any]:
    state, status = registry.entry_state(entry)
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


@on_a_run
def ls(sub: Subcommand, argv: list[str]) -> int:
    p = sub.parser()
    p.add_argument("--json", action="store_true", help="a JSON list, one object per run")
    args = p.parse_args(argv)
    problem = registry.state_dir_problem()
    if problem:
        say(sub.name, f"warning: {problem}")
    rows = [_row(e) for e in registry.entries()]
    if args.json:
        print(json.dumps(rows, indent=1))
        return EXIT_OK
    rows = _shown(rows)
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
    cluster = is_cluster(s)
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
    cause = s.get("root_cause")
    if isinstance(cause, dict):
        how = (f"signal {cause.get('signal')}" if cause.get("signal")
               else f"exit code {cause.get('exitcode')}")
        message = " ".join(str(cause.get("message") or "").split())
        where = (f" on node {cause.get('node_rank')} ({cause.get('host')})"
                 if cause.get("node_rank") is not None else "")
        lines.append(f"  root cause  rank {cause.get('rank')}{where} ({how}): {message}")
    return "\n".join(lines)


@on_a_run
def status(sub: Subcommand, argv: list[str]) -> int:
    p = sub.parser()
    p.add_argument("run", nargs="?", metavar="RUN", help="a run dir, log dir or run id")
    p.add_argument("--json", action="store_true", help="the status as JSON (schema 1)")
    args = p.parse_args(argv)
    entry = registry.resolve(args.run, running_only=False)
    state, status = registry.entry_state(entry)
    out = _status_json(entry, state, status)
    print(json.dumps(out, indent=1) if args.json else _status_text(_shown(out)))
    return EXIT_STALE if state == "stale" else EXIT_OK


# -- rm ---------------------------------------------------------------------------------


@on_a_run
def rm(sub: Subcommand, argv: list[str]) -> int:
    p = sub.parser()
    p.add_argument("run", metavar="RUN", help="a run dir, log dir or run id")
    p.add_argument("--logs", action="store_true", help="remove the run directory too")
    args = p.parse_args(argv)
    entry = registry.resolve(args.run, running_only=False)
    state, status = registry.entry_state(entry)
    if state == "running":
        say(sub.name, f"run {entry.run_id} is running (supervisor pid {entry.supervisor_pid}): "
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
            say(sub.name, f"{entry.run_dir} holds no {FILENAME}: not removing a directory "
                          "that does not look like a run's")
            return EXIT_REFUSED
        shutil.rmtree(entry.run_dir)
        removed.append(f"its run directory {entry.run_dir}")
    if removed:
        print(f"run {one_line(entry.run_id)} ({state}): removed {' and '.join(removed)}")
    else:
        print(f"run {one_line(entry.run_id)} ({state}) has no entry in the list; nothing removed"
              + ("" if args.logs else " (--logs removes its run directory)"))
    return EXIT_OK
