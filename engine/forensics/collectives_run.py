"""The collectives of a run from outside its supervisor: ``rankvisor collectives``.

Each rank incarnation's worker server listens at a path derived from its files' directory
(``worker_server.socket_path``), so a run's directory is enough to find every rank's: the
newest incarnation of each rank of the current attempt. A finished run (nobody answers)
is read from its last saved capture, ``<run_dir>/collectives/latest.json``. The workers of a
torchrun job rankvisor did not start are found by the socket their environment names
(``ask_workers``): only a script under torch's ``worker_main()`` serves one.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from typing import Any

from ..names.refusals import NO_WORKER_SERVER
from ..process.proc_table import read_environ
from ..rundir.regular_file import read_regular
from .collectives import RankCollectives, parse_answer, snapshot_json
from .worker_server import DEFAULT_TIMEOUT_S, ask_all, socket_path

__all__ = ["CAPTURES_DIR", "NO_VERDICT", "ask_workers", "rank_sockets", "read_run",
           "saved_captures", "text_of"]

NO_VERDICT = ("no collective that some ranks entered and others did not, nor one number "
              "entered as different collectives")
TORCH_SOCKET_ENV = "TORCH_WORKER_SERVER_SOCKET"
"""Where torch's ``worker_main()`` serves its worker server."""

CAPTURES_DIR = "collectives"
"""Where a run's captures are saved, in its run dir."""
_RESTART = re.compile(r"restart_(\d+)$")
_MAX_SAVED = 64 << 20
"""A saved capture read at most (one is a few KB a rank)."""


def saved_captures(run_dir: str) -> list[str]:
    """The captures saved for a run (``<run_dir>/collectives/<time>.json``), oldest first."""
    folder = os.path.join(run_dir, CAPTURES_DIR)
    try:
        names = sorted(n for n in os.listdir(folder) if n.endswith(".json") and n[:1].isdigit())
    except OSError:
        return []
    return [os.path.join(folder, n) for n in names]


def rank_sockets(run_dir: str, attempt: int) -> dict[int, str]:
    """Each rank's worker socket in ``attempt_<attempt>`` (its newest incarnation)."""
    base = os.path.join(run_dir, f"attempt_{attempt}")
    out: dict[int, str] = {}
    try:
        names = os.listdir(base)
    except OSError:
        return out
    for name in names:
        if not name.isdigit():
            continue
        rank_dir = os.path.join(base, name)
        restarts = []
        try:
            for sub in os.listdir(rank_dir):
                m = _RESTART.match(sub)
                if m:
                    restarts.append(int(m.group(1)))
        except OSError:
            continue
        where = os.path.join(rank_dir, f"restart_{max(restarts)}") if restarts else rank_dir
        try:
            out[int(name)] = socket_path(where)
        except OSError:  # no private directory of ours: nothing of ours to ask
            continue
    return out


def read_run(run_dir: str, attempt: int, *, live: bool = True,
             timeout_s: float = 2.0) -> tuple[dict[str, Any], str]:
    """The run's collectives JSON, and where it came from ("live" or a saved capture's
    path; "" when there is none)."""
    if live:
        sockets = rank_sockets(run_dir, attempt)
        answers = ask_all(sockets, "fr_trace_json", timeout_s=timeout_s) if sockets else {}
        readings: list[RankCollectives] = [parse_answer(r, a) for r, a in answers.items()]
        if any(not r.error for r in readings):
            return snapshot_json(readings), "live"
    saved = os.path.join(run_dir, CAPTURES_DIR, "latest.json")
    try:  # a file of the run dir: a regular one only (a FIFO never blocks), capped
        data = json.loads(read_regular(saved, _MAX_SAVED))
    except (OSError, ValueError, RecursionError):
        return {"ranks": [], "verdicts": []}, ""
    if not isinstance(data, dict):
        return {"ranks": [], "verdicts": []}, ""
    return data, saved


def ask_workers(pids: Mapping[int, int], timeout_s: float = DEFAULT_TIMEOUT_S,
                ) -> dict[str, Any] | None:
    """The collectives JSON of processes rankvisor did not start (rank -> pid), asked at the
    socket each one's environment names; None when none names one (nothing to ask)."""
    sockets: dict[int, str] = {}
    for rank, pid in pids.items():
        path = (read_environ(pid) or {}).get(TORCH_SOCKET_ENV)
        if path:
            sockets[rank] = path
    if not sockets:
        return None
    answers = ask_all(sockets, "fr_trace_json", timeout_s=timeout_s)
    readings = [parse_answer(r, a) for r, a in answers.items()]
    readings += [RankCollectives(r, error=NO_WORKER_SERVER) for r in pids if r not in sockets]
    return {**snapshot_json(readings), "source": "live", "path": ""}


def _coll(c: dict[str, Any] | None) -> str:
    if not c:
        return "-"
    return f"{c.get('op', '?')} #{c.get('seq', '?')}"


def text_of(data: dict[str, Any]) -> str:
    """The human view: one line per rank and group, then the verdicts in words."""
    lines = []
    for r in data.get("ranks", []):
        if r.get("error"):
            lines.append(f"rank {r['rank']}: {r['error']}")
            continue
        for g in r.get("groups", []):
            desc = f" ({g['desc']})" if g.get("desc") else ""
            sizes = (g.get("last_enqueued") or {}).get("sizes") or []
            lines.append(
                f"rank {r['rank']}  pg {g['pg']}{desc}: enqueued {_coll(g.get('last_enqueued'))}"
                f", started {_coll(g.get('last_started'))}, completed "
                f"{_coll(g.get('last_completed'))}" + (f", sizes {sizes}" if sizes else "")
            )
    verdicts = data.get("verdicts", [])
    lines.append("")
    lines += [v.get("words", "") for v in verdicts] or [NO_VERDICT]
    return "\n".join(lines)
