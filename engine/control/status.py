"""status.json: a run's state on disk, for scripts, cron and viewers that come later.

The supervisor process rewrites ``<run_dir>/status.json`` on every lifecycle event. It is
written to a temporary file in the same directory, flushed to disk and renamed over the old
one, so a reader sees the previous status or the new one, never half of either, and a
supervisor killed with SIGKILL leaves its last status behind. That status may still say
"running": ``effective_state`` tells a live run from a stale one by checking that the
supervisor's pid still names the same process (its start time, /proc/<pid>/stat field 22,
must match: pids are reused). The fields are described in ``STATUS.md`` beside this module.

Standard library, ``engine.process`` (signal names, /proc reads), ``engine.logfile`` and
``engine.forensics.own_traceback`` (a failed rank's last stderr line, its exception) only:
the CLI, the UI and the supervisor process all read and write it.
"""

from __future__ import annotations

import json
import os
import re
import secrets
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final, Literal

from .. import clock
from ..forensics.own_traceback import raised_line
from ..logfile.torch_log import said_lines
from ..names.signals import exit_signal_name
from ..process.proc_table import stat_fields
from ..rundir.atomic import write_atomic
from ..rundir.regular_file import NotRegular, TooBig, read_regular

if TYPE_CHECKING:
    from ..errors import ProcessFailure
    from ..events import RunFinished
    from ..handle import RunInfo

__all__ = [
    "FILENAME",
    "NOT_ANSWERING_S",
    "SCHEMA",
    "EffectiveState",
    "StatusTemplate",
    "build_status",
    "current_attempt",
    "effective_state",
    "encode_status",
    "failure_message",
    "process_start_time",
    "read_status",
    "status_age",
    "status_problem",
    "supervisor_alive",
    "write_status",
]

SCHEMA: Final = 1
"""Bumped when a field changes meaning or goes away; new fields keep the number."""

FILENAME: Final = "status.json"

EffectiveState = Literal["running", "finished", "stale"]

NOT_ANSWERING_S: Final = 5.0
"""A running run's status (or a viewer's stream) older than this: its supervisor is not
answering (SIGSTOPped, swapped out, stuck). It writes status.json every 2 s and sends
each viewer every rank's stats every second, so this is several beats missed. Readers then
say how old the status is and judge no rank (no straggler, no stall) from it."""

_MESSAGE_CAP: Final = 2000
"""A root cause's message is a traceback's last line or an error file's message; a rank can
write megabytes there, and status.json is rewritten on every event."""


def process_start_time(pid: int) -> int | None:
    """When ``pid`` started (clock ticks since boot, /proc/<pid>/stat field 22), or None if
    there is no such process, or it is a zombie (it has exited, only its record is left)."""
    if pid <= 0:
        return None
    fields = stat_fields(pid)
    if fields is None or fields[0] in (b"Z", b"X"):
        return None
    try:
        return int(fields[19])
    except (IndexError, ValueError):
        return None


def supervisor_alive(pid: object, start: object) -> bool:
    """Whether process ``pid`` exists and is the one that started at ``start``.

    A pid alone is not enough: after the supervisor dies the number may be given to any new
    process, which must not make a dead run look alive. With no start time recorded (None)
    the pid alone decides.
    """
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return False
    now = process_start_time(pid)
    if now is None:
        return False
    return start is None or now == start


def failure_message(failure: ProcessFailure, stderr_path: str = "") -> str:
    """What a person should read about a failed rank, capped in length.

    The error file's message when the rank left one; else (torch's stock "To enable
    traceback see ..." says nothing about this failure) the last line of the failing
    incarnation's stderr; else how it ended in words ("exit code 1", "signal SIGKILL").
    """
    message: Any = failure.message
    if isinstance(message, dict):
        message = message.get("message", "")
    lines = [ln for ln in str(message or "").splitlines() if "To enable traceback" not in ln]
    text = "\n".join(lines).strip()
    if (failure.exitcode < 0 and not failure.caused_by_us and stderr_path
            and not isinstance(failure.message, dict)):
        # It raised, then died of a signal nobody sent on its way out (torch's threads at
        # the interpreter's end: SIGABRT): its exception says more than the signal.
        text = raised_line(stderr_path) or text
    if not text and stderr_path:
        # torch's own log lines at the rank's exit ("[c10d] Server exited" when its worker
        # server stops) say nothing about the failure: the last line before them does.
        tail = said_lines(stderr_path, 8)
        text = tail[-1].strip() if tail else ""
    if not text:
        name = exit_signal_name(failure.exitcode)
        text = f"signal {name}" if name else f"exit code {failure.exitcode}"
    if len(text) > _MESSAGE_CAP:
        text = text[: _MESSAGE_CAP - 1] + "\u2026"
    return text


def _root_cause(finished: RunFinished | None) -> dict[str, Any] | None:
    if finished is None or finished.root_cause_rank is None:
        return None
    rank = finished.root_cause_rank
    result = finished.result
    failure = result.failures.get(rank) or result.stopped.get(rank)
    if failure is None:
        return {"rank": rank, "exitcode": None, "signal": None, "message": ""}
    return {
        "rank": rank,
        "exitcode": failure.exitcode,
        "signal": exit_signal_name(failure.exitcode),
        "message": failure_message(failure, str(result.stderrs.get(rank, "") or "")),
    }


def _suspect(finished: RunFinished | None) -> dict[str, Any] | None:
    suspect = finished.suspect if finished is not None else None
    if suspect is None:
        return None
    reason = suspect.reason
    if len(reason) > _MESSAGE_CAP:
        reason = reason[: _MESSAGE_CAP - 1] + "\u2026"
    return {"rank": suspect.rank, "reason": reason, "ranks": list(suspect.ranks or (suspect.rank,))}


def build_status(
    info: RunInfo,
    finished: RunFinished | None,
    *,
    socket: str,
    supervisor_pid: int,
    supervisor_start: int,
    exitcode: int | None,
    started: float,
) -> dict[str, Any]:
    """The status.json object of a run as ``info`` shows it (and ``finished`` once it ended).

    Args:
        info: the supervisor's snapshot (or the snapshot folded with later events).
        finished: the run's end, None while it runs.
        socket: the control socket's path.
        supervisor_pid: the supervisor process.
        supervisor_start: its start time (``process_start_time``), to tell a reused pid.
        exitcode: the run's exit status as ``rankvisor run`` returns it; None while running.
        started: when the run started (epoch seconds).
    """
    done = finished is not None or info.finished
    now = clock.wall()
    ranks = []
    for r in info.ranks:
        signal = r.signal_name if r.signal_name else exit_signal_name(r.exitcode)
        ranks.append({
            "rank": r.rank,
            # rankvisor runs one node: a rank's global and local numbers are the same.
            "local_rank": r.rank,
            "pid": r.pid,
            "state": r.state.value,
            "exitcode": r.exitcode,
            "signal": signal,
            "restart_count": r.restart_count,
            "exit_cause": r.exit_cause.to_json() if r.exit_cause is not None else None,
            "input_wait": r.input_wait.to_json() if r.input_wait is not None else None,
        })
    return {
        "schema": SCHEMA,
        "run_id": info.run_id,
        "run_dir": info.log_dir,
        "socket": socket,
        "supervisor_pid": supervisor_pid,
        "supervisor_start": supervisor_start,
        "state": "finished" if done else "running",
        "attempt": finished.attempt if finished is not None else info.attempt,
        "finished": done,
        "exitcode": exitcode if done else None,
        "ranks": ranks,
        "root_cause": _root_cause(finished),
        "suspect": _suspect(finished),
        "started": started,
        "updated": now,
        "written_at": now,
        "tracking": info.tracking,
    }


def write_status(run_dir: str, status: dict[str, Any], *, durable: bool = True) -> str:
    """Replace ``<run_dir>/status.json`` with ``status`` atomically; returns its path.

    A reader, or a crash at any point, sees the old status or the new one, never a torn
    file (``engine.rundir.atomic``). ``durable=False``: not flushed to disk (a refresh of
    the live figures, not a change of the run's state).
    """
    path = os.path.join(run_dir, FILENAME)
    write_atomic(path, encode_status(status), durable=durable)
    return path


def encode_status(status: dict[str, Any]) -> bytes:
    """status.json's bytes: a key a line and a rank a line, for a person's ``cat``.

    Each value goes through json's C encoder; ``indent=`` would take the pure-Python one,
    which cost most of the once-a-second refresh of an idle run (the JSON is the same).
    """
    lines = []
    for key, value in status.items():
        if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            items = ",\n  ".join(json.dumps(v) for v in value)
            lines.append(f" {json.dumps(key)}: [\n  {items}\n ]")
        else:
            lines.append(f" {json.dumps(key)}: {json.dumps(value)}")
    return ("{\n" + ",\n".join(lines) + "\n}\n").encode()


class StatusTemplate:
    """status.json's bytes with the values the clock alone changes left open: ``updated``
    and ``written_at``, and each rank's ``last_output_age_s``.

    The refresh of a run where nothing happened rewrites the same status with those values
    moved on: filling them in costs a few joins, where building the record (the run's
    snapshot, every rank's fields) and encoding it cost most of an idle supervisor's CPU.
    ``fill`` gives the bytes ``encode_status`` gives for the record with those values.
    """

    def __init__(self, record: Mapping[str, Any]) -> None:
        token = secrets.token_hex(8)  # no value of the record can be mistaken for a slot
        opened = dict(record)
        opened["updated"] = opened["written_at"] = f"{token}-now"
        ranks = []
        for r in record.get("ranks", []):
            if isinstance(r, dict) and "last_output_age_s" in r and "rank" in r:
                r = {**r, "last_output_age_s": f"{token}-age-{r['rank']}"}
            ranks.append(r)
        opened["ranks"] = ranks
        parts = re.split(rb'"' + token.encode() + rb'-(now|age-(-?\d+))"',
                         encode_status(opened))
        self._parts = parts[0::3]
        """The fixed bytes, between the slots."""
        self._slots = [None if age is None else int(age) for age in parts[2::3]]
        """Each slot in order: None for the time of writing, else a rank's age."""

    def fill(self, now: float, ages: Mapping[int, float | None]) -> bytes:
        """The bytes with ``now`` as the time of writing and each rank's age from ``ages``."""
        out = [self._parts[0]]
        stamp = json.dumps(now).encode()
        for slot, part in zip(self._slots, self._parts[1:], strict=True):
            out.append(stamp if slot is None else json.dumps(ages.get(slot)).encode())
            out.append(part)
        return b"".join(out)


MAX_STATUS_BYTES = 1 << 24
"""16 MiB: a status of thousands of ranks is a few MiB; more is read as no status."""


def read_status(run_dir: str) -> dict[str, Any] | None:
    """The status in ``run_dir``, or None when there is none or it is not a status object
    (a file of another program, another schema's shape, a FIFO, a link, over 16 MiB): never
    raises for bad content, never blocks; ``status_problem`` says which."""
    data, _problem = _load_status(run_dir)
    return data


def status_problem(run_dir: str) -> str | None:
    """Why ``read_status(run_dir)`` gives None, in words ("status.json is not valid JSON");
    None when it reads, or when there is no status.json at all."""
    return _load_status(run_dir)[1]


def _load_status(run_dir: str) -> tuple[dict[str, Any] | None, str | None]:
    try:
        data = json.loads(read_regular(os.path.join(run_dir, FILENAME), MAX_STATUS_BYTES))
    except FileNotFoundError:
        return None, None
    except (NotRegular, TooBig) as e:
        return None, f"{FILENAME} {e}"
    except OSError as e:
        return None, f"{FILENAME} cannot be read ({e.strerror or e})"
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None, f"{FILENAME} is not valid JSON"
    if not isinstance(data, dict) or isinstance(data.get("schema"), bool) or not isinstance(
        data.get("schema"), int
    ):
        return None, f"{FILENAME} is not a rankvisor status (no schema number)"
    return data, None


def effective_state(status: dict[str, Any]) -> EffectiveState:
    """"finished" when the run ended, "running" while its supervisor lives, else "stale"
    (the status says running but the supervisor is gone, or its pid is another process)."""
    if status.get("finished") is True or status.get("state") == "finished":
        return "finished"
    if supervisor_alive(status.get("supervisor_pid"), status.get("supervisor_start")):
        return "running"
    return "stale"


def status_age(status: dict[str, Any], now: float | None = None) -> float | None:
    """Seconds since ``status`` was written (``written_at``; ``now``: ``clock.wall()``), or
    None for a finished run or a status without the field (nothing is expected of it)."""
    if status.get("finished") is True or status.get("state") == "finished":
        return None
    written = status.get("written_at", status.get("updated"))
    if isinstance(written, bool) or not isinstance(written, (int, float)):
        return None
    return max(0.0, (clock.wall() if now is None else now) - float(written))


def current_attempt(run_dir: str, status: dict[str, Any] | None) -> int | None:
    """The run's current attempt: status.json's, else the highest ``attempt_<n>`` in
    ``run_dir`` (a run whose status is missing or torn); None when neither says."""
    attempt = status.get("attempt") if status else None
    if isinstance(attempt, int) and not isinstance(attempt, bool):
        return attempt
    found = []
    try:
        for name in os.listdir(run_dir):
            if name.startswith("attempt_") and name[8:].isdigit():
                found.append(int(name[8:]))
    except OSError:
        pass
    return max(found) if found else None
