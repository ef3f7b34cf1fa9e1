"""``stdin.log``: the lines a person typed to one incarnation of a rank, with their times.

It lives beside the incarnation's ``stdout.log`` and ``stderr.log`` (which keep exactly the
rank's own bytes: a pipe does not echo). Format: one JSON object per line, appended in the
order the lines were sent::

    {"t": 1764606000.123, "text": "p x"}
    {"t": 1764606004.5, "eof": true}

``t`` is the wall-clock time (``clock.wall()``) the line went into the rank's pipe; ``eof``
marks the moment its stdin was closed. A reader merges these with the rank's output by time
(the arrival index, ``engine.rundir.arrival``, stamps when each output line arrived).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Final

__all__ = [
    "STDIN_FILE", "STDIN_MODE", "TYPED_MARK", "StdinEntry", "append_entry", "read_entries",
    "stdin_log_path", "typed_view",
]

STDIN_FILE: Final = "stdin.log"
STDIN_MODE: Final = 0o600
"""What a person typed is the run owner's alone (a run dir is 0700 too)."""


@dataclass(frozen=True, slots=True)
class StdinEntry:
    t: float
    text: str = ""
    eof: bool = False


def stdin_log_path(stdout_path: str) -> str:
    """Where an incarnation's typed lines go: beside its stdout.log ("" without one)."""
    return os.path.join(os.path.dirname(stdout_path), STDIN_FILE) if stdout_path else ""


def append_entry(path: str, entry: StdinEntry) -> None:
    """Append one entry (a single ``O_APPEND`` write: entries never interleave)."""
    record: dict[str, object] = {"t": round(entry.t, 6)}
    if entry.eof:
        record["eof"] = True
    else:
        record["text"] = entry.text
    data = (json.dumps(record, ensure_ascii=False) + "\n").encode()
    # Owner-only, whatever the umask: a line typed may be a password.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, STDIN_MODE)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def read_entries(path: str) -> list[StdinEntry]:
    """Every entry of ``path`` in order; [] if there is none (a torn last line is skipped)."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError:
        return []
    out = []
    for line in raw.splitlines():
        try:
            record = json.loads(line)
            out.append(StdinEntry(float(record["t"]), str(record.get("text", "")),
                                  bool(record.get("eof", False))))
        except (ValueError, KeyError, TypeError):
            continue
    return out


TYPED_MARK: Final = "\u2328 "
"""How a typed line is marked among a rank's output (``typed_view``, the consoles)."""


def typed_view(log_path: str, stream: int) -> list[str]:
    """The lines of one of an incarnation's logs (``stream`` 0: stdout, 1: stderr) with the
    lines typed to it placed where they arrived, marked with ``TYPED_MARK``.

    A typed line goes after the output lines the pump had read when it was sent (the
    arrival index beside the logs says when each was read); without an index, at the end.
    """
    from ..rundir.arrival import ARRIVAL_FILE, read_records

    directory = os.path.dirname(log_path)
    try:
        with open(log_path, "rb") as f:
            lines = f.read().decode("utf-8", "replace").split("\n")
    except OSError:
        lines = [""]
    records, _ = read_records(os.path.join(directory, ARRIVAL_FILE))
    ends = [(t_ns / 1e9, end) for s, end, t_ns in records if s == stream]
    out: list[str] = []
    done = 0
    for entry in read_entries(os.path.join(directory, STDIN_FILE)):
        upto = max((end for t, end in ends if t <= entry.t), default=done)
        upto = min(max(upto, done), len(lines) - 1)
        out += lines[done:upto]
        done = upto
        out.append(TYPED_MARK + ("(end of input)" if entry.eof else entry.text))
    out += lines[done:]
    if out and out[-1] == "":
        out.pop()  # the file's last newline
    return out
