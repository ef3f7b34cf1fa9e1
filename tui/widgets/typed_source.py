"""TypedRows: a rank's merged log with the lines a person typed to it, where they were sent.

A pipe does not echo: the rank's files keep only its own bytes ("(Pdb) 41"), so the zoomed
view puts each typed line back among them itself. A typed line was sent at a wall-clock time;
the arrival index stamps when each batch of output lines arrived (``engine.rundir.arrival``).
The typed line goes after every row that had arrived by then, before the first that had not:
after the prompt it answered, before the answer. Those rows say "stdin" (``streams``), so the
view marks them. Search looks at the rank's own lines only.

The index's records are kept as (time, rows so far), 16 bytes each, as on disk: a typed line
learnt late (the viewer heard of it after the answer was indexed) still lands in its place,
and ``changed_from`` tells the view the first row it must draw again.
"""

from __future__ import annotations

import re
import threading
from array import array
from bisect import bisect_left, bisect_right
from typing import Callable, Iterator, Sequence

from ...engine.logfile.merged import MergedSource
from ...engine.rundir.arrival import read_records

__all__ = ["TypedRows"]

Typed = Sequence[tuple[float, str]]
"""(wall-clock time sent, text as shown) of each line typed, in the order they were sent."""


class TypedRows:
    """``MergedSource`` plus typed rows (see the module docstring)."""

    def __init__(self, merged: MergedSource, index_path: str, typed: Callable[[], Typed]) -> None:
        self._merged = merged
        self._index_path = index_path
        self._typed = typed
        self._offset = 0
        self._ends = [0, 0]
        self._times = array("q")
        """Arrival time (ns) of each record, in order."""
        self._rows = array("q")
        """Rows of both streams arrived by then."""
        self._at: list[int] = []
        """Per typed line: the merged rows before it."""
        self._texts: list[str] = []
        self._count = 0
        """The merged rows at the last refresh."""
        self._lock = threading.Lock()
        self.changed_from: int | None = None
        """After ``refresh``: the first row whose content moved (a typed line placed before
        rows already there), or None when rows were only added at the end."""

    @property
    def line_count(self) -> int:
        return self._merged.line_count + len(self._at)

    def refresh(self) -> int:
        count = self._merged.refresh()
        if self._index_path:
            records, self._offset = read_records(self._index_path, self._offset)
            for stream, end, t_ns in records:
                if end > self._ends[stream]:
                    self._ends[stream] = end
                    self._times.append(t_ns)
                    self._rows.append(self._ends[0] + self._ends[1])
        typed = list(self._typed())
        at = [self._rows_by(t, count) for t, _ in typed]
        for i in range(1, len(at)):
            at[i] = max(at[i], at[i - 1])  # sent in this order: shown in this order
        with self._lock:
            old_total = self._count + len(self._at)
            old, new = _finals(self._at), _finals(at)
            moved = next((min(x, y) for x, y in zip(old, new, strict=False) if x != y), None)
            if moved is None and len(new) > len(old) and new[len(old)] < old_total:
                moved = new[len(old)]  # learnt late: placed before rows already shown
            self.changed_from = moved
            self._at, self._texts, self._count = at, [text for _, text in typed], count
        return self.line_count

    def _rows_by(self, t: float, count: int) -> int:
        """Merged rows that had arrived by wall-clock time ``t``."""
        i = bisect_right(self._times, int(t * 1e9))
        return min(count, self._rows[i - 1] if i else 0)

    # -- rows ------------------------------------------------------------------------------

    def _final_rows(self) -> list[int]:
        return _finals(self._at)

    def _walk(self, start: int, stop: int) -> Iterator[tuple[int, int]]:
        """(typed index or -1, merged row) for each row of ``[start, stop)``, in runs."""
        finals = self._final_rows()
        row = max(0, start)
        stop = min(stop, self.line_count)
        k = bisect_left(finals, row)
        while row < stop:
            if k < len(finals) and finals[k] == row:
                yield k, -1
                k += 1
            else:
                yield -1, row - k
            row += 1

    def get_lines(self, start: int, stop: int) -> list[str]:
        with self._lock:
            steps = list(self._walk(start, stop))
            texts = list(self._texts)
        merged = [m for k, m in steps if k < 0]
        lines = iter(self._merged.get_lines(merged[0], merged[-1] + 1) if merged else [])
        return [texts[k] if k >= 0 else next(lines, "") for k, _ in steps]

    def streams(self, start: int, stop: int) -> list[str]:
        with self._lock:
            steps = list(self._walk(start, stop))
        merged = [m for k, m in steps if k < 0]
        kinds = iter(self._merged.streams(merged[0], merged[-1] + 1) if merged else [])
        return ["stdin" if k >= 0 else next(kinds, "stdout") for k, _ in steps]

    def partials(self) -> list[tuple[str, str]]:
        return self._merged.partials()

    def search(
        self,
        pattern: str | re.Pattern[str],
        *,
        regex: bool = False,
        case_sensitive: bool = False,
        start: int = 0,
        backwards: bool = False,
        cancel: threading.Event | None = None,
    ) -> Iterator[int]:
        with self._lock:
            at = list(self._at)
        merged_start = max(0, start - bisect_left(self._final_rows(), start))
        for row in self._merged.search(pattern, regex=regex, case_sensitive=case_sensitive,
                                       start=merged_start, backwards=backwards, cancel=cancel):
            yield row + bisect_right(at, row)

    def close(self) -> None:
        self._merged.close()


def _finals(at: list[int]) -> list[int]:
    """The row of each typed line in the view (each typed line before it adds one)."""
    return [a + i for i, a in enumerate(at)]
