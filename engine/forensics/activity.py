"""When each rank's output last moved, and how often it usually does: ``OutputActivity``.

The supervisor's output pump hands every batch it reads to ``note`` (complete lines and a
changed unfinished line alike: a rank that only redraws a progress bar with ``\\r`` writes no
complete line for minutes, yet it is plainly alive). Per rank it keeps the times of its last
``HISTORY`` batches and its last few lines, so memory stays flat however much a rank writes.

``cutoff`` marks the first failure of the attempt: what a rank wrote after it (tracebacks,
the teardown's messages) is not what it was doing before, and is left out of ``reading``.
Batches are timed by when the rank wrote them (the file's mtime, as the pump read it), not
when the pump read them: on a loaded machine the pump reads late, and a peer's last lines,
written before the first failure and read a second after it, are what it was doing before.
A batch without that time is timed when it is noted. Thread-safe: the pump's thread notes,
the monitor's thread reads.
"""

from __future__ import annotations

import statistics
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from .. import clock
from ..events import RankOutput

__all__ = ["HISTORY", "OutputActivity", "RankActivity"]

HISTORY: Final = 256
"""Batch times kept per rank: the recent cadence is what tells a stall from a slow step."""

_LAST_LINES: Final = 16
_STEP_LINES: Final = 8
"""How many of a batch's last lines are read for a step (a batch's end is its newest)."""


@dataclass(frozen=True, slots=True)
class RankActivity:
    """What one rank's output did up to the cutoff."""

    rank: int
    last_ns: int | None
    """When its output last moved (a line or a redraw); None if it wrote nothing."""
    median_gap_s: float | None
    """The median time between its batches; None with fewer than two."""
    gaps: int
    last_line: str = ""
    """Its last line (complete, else the unfinished one) before the cutoff."""
    last_line_stream: str = ""
    last_line_no: int = -1
    """0-based number of ``last_line`` in its stream's file; -1 for an unfinished line."""
    steps: int = 0
    """How many times the step its output reports changed (``OutputActivity.step_of``)."""


class _Rank:
    __slots__ = ("lines", "step", "steps", "times")

    def __init__(self) -> None:
        self.times: deque[int] = deque(maxlen=HISTORY)
        self.lines: deque[tuple[int, str, int, str]] = deque(maxlen=_LAST_LINES)
        self.step: int | None = None
        self.steps = 0


class OutputActivity:
    """Per-rank output times of the current attempt (see the module docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ranks: dict[int, _Rank] = {}
        self._attempt = 0
        self._cutoff_ns: int | None = None
        self.step_of: Callable[[str], int | None] | None = None
        """Reads the step a line reports (set by the Supervisor): each batch's last lines
        are read with it, so that a rank's last step is known however much it wrote since."""

    def new_attempt(self, attempt: int) -> None:
        """Forget everything: ``attempt`` starts with fresh processes."""
        with self._lock:
            self._attempt = attempt
            self._ranks.clear()
            self._cutoff_ns = None

    def note(self, event: RankOutput, t_ns: int | None = None) -> None:
        """A batch of a rank's stdout or stderr, written at ``t_ns`` (default: the batch's
        ``written_ns``, else now; other streams are ignored)."""
        if event.stream not in ("stdout", "stderr"):
            return
        now = t_ns if t_ns is not None else event.written_ns or clock.wall_ns()
        with self._lock:
            if event.attempt < self._attempt:
                return  # a late batch of an attempt that is over
            if self._cutoff_ns is not None and now > self._cutoff_ns:
                return
            rank = self._ranks.get(event.rank)
            if rank is None:
                rank = self._ranks[event.rank] = _Rank()
            rank.times.append(now)
            if event.lines:
                no = event.first_line + len(event.lines) - 1
                rank.lines.append((now, event.stream, no, event.lines[-1]))
                if self.step_of is not None:
                    for line in reversed(event.lines[-_STEP_LINES:]):
                        step = self.step_of(line)
                        if step is not None:
                            rank.steps += step != rank.step
                            rank.step = step
                            break
            if event.partial:
                rank.lines.append((now, event.stream, -1, event.partial))

    def cutoff(self, t_ns: int) -> None:
        """A failure of the attempt happened at ``t_ns``: output after the earliest such
        time is left out (exits seen in one pass may be told in any order)."""
        with self._lock:
            if self._cutoff_ns is None or t_ns < self._cutoff_ns:
                self._cutoff_ns = t_ns

    def last_step(self, rank: int) -> int | None:
        """The last step ``rank``'s output reported (``step_of``), None if none yet."""
        with self._lock:
            data = self._ranks.get(rank)
            return data.step if data is not None else None

    def last_ns(self, rank: int, until_ns: int) -> int | None:
        """When ``rank`` last wrote up to ``until_ns`` (``reading(...).last_ns`` without the
        rest of a reading: status.json's refresh asks it of every rank every two seconds)."""
        with self._lock:
            data = self._ranks.get(rank)
            if data is None:
                return None
            return next((t for t in reversed(data.times) if t <= until_ns), None)

    def reading(self, rank: int, until_ns: int | None = None) -> RankActivity:
        """What ``rank`` wrote up to ``until_ns`` (default: the cutoff, else now)."""
        with self._lock:
            limit = until_ns if until_ns is not None else self._cutoff_ns
            data = self._ranks.get(rank)
            if data is None:
                return RankActivity(rank, None, None, 0)
            times = [t for t in data.times if limit is None or t <= limit]
            lines = [x for x in data.lines if limit is None or x[0] <= limit]
        gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
        median = statistics.median(gaps) / 1e9 if gaps else None
        last = lines[-1] if lines else None
        return RankActivity(
            rank,
            times[-1] if times else None,
            median,
            len(gaps),
            last_line=last[3] if last else "",
            last_line_stream=last[1] if last else "",
            last_line_no=last[2] if last else -1,
            steps=data.steps,
        )
