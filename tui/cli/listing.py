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

from ...engine import clock
from ...engine.control import registry
from ...engine.control.registry import RunEntry
from ...engine.control.status import FILENAME, NOT_ANSWERING_S, status_age
from ...engine.output.safe_text import one_line, safe_tree
from ...engine.states import RankState
from .command import EXIT_OK, EXIT_REFUSED, EXIT_STALE, Subcommand, Usage, on_a_run, say
from .ranks import is_cluster
from .run_args import PROG

__all__ = ["ls", "rm", "run_row", "status", "status_json", "status_text"]

_ALIVE: Final = frozenset(s.value for s in RankState if s.is_alive)


def _shown(value: Any) -> Any:
    """``value`` with every string in it made one safe line: status.json and the registry
    are files anyone with the run dir could have edited, and a remote node's host is the
    rendezvous store's (JSON output needs none of this: ``json.dumps`` escapes controls)."""
    return safe_tree(value)


def _started(t: object) -> str:
    if not isinstance(t, (int, float)) or t <= 0:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))


# -- ls ---------------------------------------------------------------------------------

COMMAND_CHARS: Final = 48
"""Of a run's command, what ``ls`` shows (the script and its first arguments)."""


def run_row(entry: RunEntry) -> dict[str, Any]:
    """One run as ``ls --json`` (and the MCP server's ``list_runs``) gives it."""
    state, status = registry.entry_state(entry)
    ranks = status.get("ranks") if status else None
    ranks = ranks if isinstance(ranks, list) else []
    live = sum(1 for r in ranks if isinstance(r, dict) and r.get("state") in _ALIVE)
    command = status.get("command") if status else None
    updated = status.get("updated") if status else None
    return {
        "run_id": entry.run_id,
        "state": state,
        "ranks_running": live if state == "running" else 0,
        "ranks_total": len(ranks),
        "attempt": status.get("attempt") if status else None,
        "exitcode": status.get("exitcode") if status else None,
        "started": entry.started,
        "ended": updated if state != "running" and isinstance(updated, (int, float)) else None,
        "command": command if isinstance(command, list) else None,
        "cwd": status.get("cwd") if status else None,
        "run_dir": entry.run_dir,
        "socket": entry.socket,
        "supervisor_pid": entry.supervisor_pid,
        "mode": entry.mode,
    }


def _result(row: dict[str, Any]) -> str:
    """ok, failed (exit N), running (live/total ranks) or stale."""
    if row["state"] == "running":
        return f"running {row['ranks_running']}/{row['ranks_total']}"
    if row["state"] == "stale":
        return "stale"
    code = row["exitcode"]
    if code == 0:
        return "ok"
    return "failed" if code is None else f"failed (exit {code})"


def _failed(row: dict[str, Any]) -> bool:
    return row["state"] == "finished" and row["exitcode"] != 0


def _duration(row: dict[str, Any]) -> str:
    end = row["ended"] if row["state"] != "running" else clock.wall()
    if not isinstance(end, (int, float)) or not row["started"] or end < row["started"]:
        return "-"
    seconds = int(end - row["started"])
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    if seconds < 86400:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    return f"{seconds // 86400}d{seconds % 86400 // 3600:02d}h"


def _command(row: dict[str, Any]) -> str:
    """The script and its first arguments: ``train.py --lr 0.1``, ``demo``, ``-m pkg``."""
    argv = [str(a) for a in row["command"] or []]
    if argv[:1] == [PROG] and len(argv) > 1:
        if argv[1] == "demo":
            shown = ["demo"]
        else:
            shown = _script_and_args(argv[2:])
            if shown and os.path.isabs(shown[0]):  # as typed, but a path as short as it goes
                cwd = str(row["cwd"] or "")
                inside = cwd and shown[0].startswith(cwd.rstrip("/") + "/")
                shown[0] = os.path.relpath(shown[0], cwd) if inside else os.path.basename(
                    shown[0])
    elif argv:
        shown = _script_and_args_of_rank(argv)
    else:
        return "-"
    text = " ".join(shown)
    return text if len(text) <= COMMAND_CHARS else text[: COMMAND_CHARS - 1] + "…"


def _script_and_args(args: list[str]) -> list[str]:
    """The training script and its arguments of a ``rankvisor run`` line, as the run
    parser reads them (its own flags left out)."""
    from .run_args import build_run_parser

    try:
        parsed, _ = build_run_parser().parse_known_args(args)
    except SystemExit:  # not a line the parser takes: show it as typed
        return args
    script = ["-m", parsed.training_script] if parsed.module else [parsed.training_script]
    return script + list(parsed.training_script_args)


def _script_and_args_of_rank(argv: list[str]) -> list[str]:
    """A rank's own command line without its interpreter and the interpreter's flags."""
    rest = argv[1:] if os.path.basename(argv[0]).startswith("python") else argv
    while rest[:1] and rest[0].startswith("-") and rest[0] != "-m":
        rest = rest[1:]
    return rest or argv


@on_a_run
def ls(sub: Subcommand, argv: list[str]) -> int:
    p = sub.parser()
    p.add_argument("--json", action="store_true", help="a JSON list, one object per run")
    only = p.add_mutually_exclusive_group()
    only.add_argument("--running", action="store_true", help="running runs only")
    only.add_argument("--failed", action="store_true",
                      help="finished runs that failed only (exit status other than 0)")
    args = p.parse_args(argv)
    problem = registry.state_dir_problem()
    if problem:
        say(sub.name, f"warning: {problem}")
    rows = [run_row(e) for e in registry.entries()]  # newest first
    if args.running:
        rows = [r for r in rows if r["state"] == "running"]
    elif args.failed:
        rows = [r for r in rows if _failed(r)]
    if args.json:
        print(json.dumps(rows, indent=1))
        return EXIT_OK
    rows = _shown(rows)
    if not rows:
        which = " running" if args.running else " failed" if args.failed else ""
        print(f"no{which} runs (looked in {registry.runs_dir()})")
        return EXIT_OK
    table = [("STARTED", "DURATION", "RESULT", "COMMAND", "RUN ID", "RUN DIR")]
    for r in rows:
        table.append((_started(r["started"]), _duration(r), _result(r), _command(r),
                      r["run_id"], r["run_dir"]))
    widths = [max(len(row[i]) for row in table) for i in range(5)]
    for row in table:
        print("  ".join(row[i].ljust(widths[i]) for i in range(5)) + "  " + row[5])
    return EXIT_OK


# -- status -----------------------------------------------------------------------------


def status_json(entry: RunEntry, state: str, status: dict[str, Any] | None) -> dict[str, Any]:
    """``status --json``: the run's status.json with its state as a reader sees it."""
    if status is None:  # the supervisor has not written one yet, or the run dir is gone
        status = {
            "schema": 1, "run_id": entry.run_id, "run_dir": entry.run_dir,
            "socket": entry.socket, "supervisor_pid": entry.supervisor_pid,
            "supervisor_start": entry.supervisor_start, "state": state, "attempt": None,
            "finished": False, "exitcode": None, "ranks": [], "root_cause": None,
            "started": entry.started, "updated": None, "tracking": None,
        }
    out = {**status, "state": state}
    age = status_age(out) if state == "running" else None
    out["status_age_s"] = None if age is None else round(age, 1)
    out["supervisor_answering"] = None if age is None else age < NOT_ANSWERING_S
    return out


def _not_answering(s: dict[str, Any]) -> list[str]:
    """The line that says the status is old, before anything it says about the ranks."""
    if s.get("supervisor_answering") is not False:
        return []
    pid = s.get("supervisor_pid")
    return [f"  status      {s.get('status_age_s'):.0f} s old: the supervisor (pid {pid}) is "
            f"not answering (stopped? kill -CONT {pid}); the ranks below are as they were "
            "then, not judged"]


def status_text(s: dict[str, Any]) -> str:
    """``status`` for a person (``s`` made safe first)."""
    lines = [f"run {s.get('run_id')}  {s.get('state')}"
             + ("" if s.get("exitcode") is None else f"  exit code {s.get('exitcode')}"),
             f"  run dir     {s.get('run_dir')}",
             f"  started     {_started(s.get('started'))}"
             f"   attempt {'-' if s.get('attempt') is None else s.get('attempt')}",
             f"  supervisor  pid {s.get('supervisor_pid')}  socket {s.get('socket') or '-'}",
             *_not_answering(s)]
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
    lines += _debugpy_section(s)
    return "\n".join(lines)


def _debugpy_section(s: dict[str, Any]) -> list[str]:
    """A ``--debugpy`` run's attach lines (ports, launch.json, ``ssh -L``), kept here: the
    app's notice line shows them only until the next notice."""
    from ...engine.supervisor.debug_options import LAUNCH_FILE, debugpy_lines, launch_ports

    run_dir = str(s.get("run_dir") or "")
    ports = launch_ports(run_dir) if run_dir else {}
    if not ports:
        return []
    host = s.get("host") if isinstance(s.get("host"), str) else None
    launch = os.path.join(run_dir, LAUNCH_FILE)
    return ["  debugpy", *("    " + line for line in debugpy_lines(ports, launch, host))]


@on_a_run
def status(sub: Subcommand, argv: list[str]) -> int:
    p = sub.parser()
    p.add_argument("run", nargs="?", metavar="RUN", help="a run dir, log dir or run id")
    p.add_argument("--json", action="store_true", help="the status as JSON (schema 1)")
    args = p.parse_args(argv)
    entry = registry.resolve(args.run, running_only=False)
    state, status = registry.entry_state(entry)
    out = status_json(entry, state, status)
    print(json.dumps(out, indent=1) if args.json else status_text(_shown(out)))
    return EXIT_STALE if state == "stale" else EXIT_OK


# -- rm ---------------------------------------------------------------------------------


_UNITS: Final = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def _age(text: str) -> float:
    """``7d``, ``12h``, ``30m``, ``90s``, ``2w`` -> seconds."""
    number, unit = text[:-1], text[-1:].lower()
    if unit not in _UNITS or not number.isdigit():
        raise Usage(f"--older-than {text!r}: a number and a unit, as 7d, 12h, 30m or 90s")
    return int(number) * _UNITS[unit]


@on_a_run
def rm(sub: Subcommand, argv: list[str]) -> int:
    p = sub.parser()
    p.add_argument("run", nargs="?", metavar="RUN", help="a run dir, log dir or run id")
    p.add_argument("--finished", action="store_true",
                   help="every run that is not running (finished or stale) instead of one")
    p.add_argument("--older-than", metavar="AGE", default=None,
                   help="with --finished: only runs that ended longer ago than AGE (7d, 12h)")
    p.add_argument("--logs", action="store_true", help="remove the run directory too")
    args = p.parse_args(argv)
    if bool(args.run) == args.finished:
        raise Usage("give one RUN, or --finished for every run that is not running")
    if args.older_than is not None and not args.finished:
        raise Usage("--older-than goes with --finished")
    if args.finished:
        return _rm_finished(sub, _age(args.older_than) if args.older_than else 0.0, args.logs)
    entry = registry.resolve(args.run, running_only=False)
    state, status = registry.entry_state(entry)
    if state == "running":
        say(sub.name, f"run {entry.run_id} is running (supervisor pid {entry.supervisor_pid}): "
                      f"stop it first with `{PROG} stop {entry.run_dir}`")
        return EXIT_REFUSED
    return EXIT_OK if _remove(sub, entry, state, status, logs=args.logs) else EXIT_REFUSED


def _rm_finished(sub: Subcommand, older_than: float, logs: bool) -> int:
    now, removed, ok = clock.wall(), 0, True
    for entry in registry.entries():
        state, status = registry.entry_state(entry)
        if state == "running":
            continue
        ended = status.get("updated") if status else None
        ended = ended if isinstance(ended, (int, float)) else entry.started
        if now - ended < older_than:
            continue
        ok = _remove(sub, entry, state, status, logs=logs) and ok
        removed += 1
    if not removed:
        print("no run to remove" + (" that ended that long ago" if older_than else ""))
    return EXIT_OK if ok else EXIT_REFUSED


def _remove(sub: Subcommand, entry: RunEntry, state: str, status: dict[str, Any] | None,
            *, logs: bool) -> bool:
    """Remove a run that is not running from the list (and its run dir with ``logs``);
    False when its directory was kept because it does not look like a run's."""
    removed: list[str] = []
    if entry.key and registry.unregister(entry):
        removed.append("its entry")
    if entry.socket and os.path.dirname(entry.socket) == os.path.join(registry.state_dir(), "s"):
        try:  # a supervisor killed with SIGKILL leaves its socket file behind
            os.unlink(entry.socket)
        except OSError:
            pass
    if logs and os.path.isdir(entry.run_dir):
        if status is None:
            say(sub.name, f"{entry.run_dir} holds no {FILENAME}: not removing a directory "
                          "that does not look like a run's")
            return False
        shutil.rmtree(entry.run_dir)
        removed.append(f"its run directory {entry.run_dir}")
    if removed:
        print(f"run {one_line(entry.run_id)} ({state}): removed {' and '.join(removed)}")
    else:
        print(f"run {one_line(entry.run_id)} ({state}) has no entry in the list; nothing removed"
              + ("" if logs else " (--logs removes its run directory)"))
    return True
