"""Every rank's lines in the order they arrived, from the files: the timeline.

Each rank's arrival index (``engine.rundir.arrival``) says when the pump read each stretch of
its stdout and stderr lines (``time_ns`` per record); merging every rank's lines on those
times gives what happened first, across ranks, as it was seen. Lines on disk that no record
covers yet (written, not read by the pump yet) come last, timed by their file's mtime. The
lines a person typed to a rank (its ``stdin.log``) come in at the times they were sent, as
stream ``"stdin"``, marked (``engine.logfile.stdin_log.TYPED_MARK``).

Bounded: at most ``max_lines`` lines per stream are read (the last ones), so a rank that
wrote gigabytes costs a bounded read.
"""

from __future__ import annotations

import heapq
import os
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from ..logfile.stdin_log import TYPED_MARK, read_entries, stdin_log_path
from ..output.sanitize import sanitize
from ..rundir.arrival import arrival_path, read_records

__all__ = ["TimelineLine", "merge_ranks", "rank_lines"]

_STREAMS = ("stdout", "stderr")
_ORDER = {"stdout": 0, "stdin": 1, "stderr": 2}


@dataclass(frozen=True, slots=True)
class TimelineLine:
    t_ns: int
    rank: int
    stream: str
    line_no: int
    """0-based number of the line in its stream's file."""
    text: str


def _read_lines(path: str, max_lines: int) -> tuple[int, list[str]]:
    """(number of the first line kept, the last ``max_lines`` complete lines of ``path``)."""
    kept: deque[str] = deque(maxlen=max_lines)
    total = 0
    try:
        with open(path, "rb") as f:
            for raw in f:
                if not raw.endswith(b"\n"):
                    break  # an unfinished line: not a line yet
                kept.append(raw[:-1].decode("utf-8", "replace").rstrip("\r").rsplit("\r", 1)[-1])
                total += 1
    except OSError:
        return 0, []
    return total - len(kept), list(kept)


def rank_lines(
    rank: int, stdout_path: str, stderr_path: str, max_lines: int = 20_000
) -> list[TimelineLine]:
    """One rank's lines of both streams, each with the time it arrived, in arrival order."""
    index = arrival_path(stdout_path, stderr_path)
    records, _ = read_records(index) if index else ([], 0)
    out: list[TimelineLine] = []
    for s, path in enumerate((stdout_path, stderr_path)):
        if not path:
            continue
        first, lines = _read_lines(path, max_lines)
        try:
            late = int(os.stat(path).st_mtime_ns)
        except OSError:
            late = 0
        ends = [(end, t) for stream, end, t in records if stream == s]
        i = 0
        for k, text in enumerate(lines):
            no = first + k
            while i < len(ends) and ends[i][0] <= no:
                i += 1
            t = ends[i][1] if i < len(ends) else late
            out.append(TimelineLine(t, rank, _STREAMS[s], no, sanitize(text)))
    for k, entry in enumerate(read_entries(stdin_log_path(stdout_path))):
        text = "(end of input)" if entry.eof else sanitize(entry.text)
        out.append(TimelineLine(int(entry.t * 1e9), rank, "stdin", k, TYPED_MARK + text))
    out.sort(key=lambda x: (x.t_ns, _ORDER.get(x.stream, 1), x.line_no))
    return out


def merge_ranks(
    ranks: Iterable[tuple[int, str, str]], max_lines: int = 20_000
) -> list[TimelineLine]:
    """Every rank's lines (``(rank, stdout_path, stderr_path)`` each) merged by arrival time."""
    per_rank = [rank_lines(r, out, err, max_lines) for r, out, err in ranks]
    merged: Iterator[TimelineLine] = heapq.merge(*per_rank, key=lambda x: (x.t_ns, x.rank))
    return list(merged)
