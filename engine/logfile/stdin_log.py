"""``stdin.log``: the lines a person typed to one incarnation of a rank, with their times.

It lives beside the incarnation's ``stdout.log`` and ``stderr.log`` (which keep exactly the
rank's own bytes: a pipe does not echo). Format: one JSON object per line, appended in the
order the lines were sent::

    {"t": 1764606000.123, "text": "p x"}
    {"t": 1764606004.5, "eof": true}

``t`` is the wall-clock time (``time.time()``) the line went into the rank's pipe; ``eof``
marks the moment its stdin was closed. A reader merges these with the rank's output by time
(the arrival index, ``engine.logfile.arrival``, stamps when each output line arrived).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Final

__all__ = ["STDIN_FILE", "StdinEntry", "append_entry", "read_entries", "stdin_log_path"]

STDIN_FILE: Final = "stdin.log"


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
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
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
