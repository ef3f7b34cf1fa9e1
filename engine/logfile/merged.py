"""``MergedSource``: a rank's stdout and stderr shown as one log, in the order lines arrived.

Two ``LogStore`` objects read the files (bounded memory, any size); ``MergedOrder`` (from the
arrival index the pump writes, ``engine.rundir.arrival``) says which file each row of the
merged view comes from. Without an index (a run from before it existed, logs that are not
side by side) every stdout line comes first, then every stderr line.

It offers what a viewer needs of a ``LogStore``: ``refresh``, ``line_count``, ``get_lines``,
``search`` (rows that match, in either stream, forwards or backwards), plus ``streams`` (which
stream each row is from) and ``partials`` (the unfinished last line of each file).
"""

from __future__ import annotations

import heapq
import threading
from typing import TYPE_CHECKING, Iterator

from ..rundir.arrival import STREAMS, MergedOrder
from .store import LogStore

if TYPE_CHECKING:
    import re

__all__ = ["MergedSource"]


class MergedSource:
    """Both logs of one rank as one view; see the module docstring.

    Args:
        stdout_path: the rank's stdout log ("" when not redirected).
        stderr_path: the rank's stderr log.
        index_path: its arrival index ("" or a missing file: stdout first, then stderr).
    """

    def __init__(self, stdout_path: str, stderr_path: str, index_path: str = "") -> None:
        self.stores = (LogStore(stdout_path, tail_lines=0), LogStore(stderr_path, tail_lines=0))
        self.order = MergedOrder(index_path)
        self._index_path = index_path

    @property
    def line_count(self) -> int:
        """Complete lines of both files."""
        return self.order.rows

    def refresh(self) -> int:
        """Read what was appended to the index and the files; returns ``line_count``."""
        # The index first: the pump writes it before it delivers, so every line it names is
        # on disk by the time the stores look.
        if self._index_path:
            self.order.refresh()
        out, err = (store.refresh() for store in self.stores)
        self.order.set_counts(out, err)
        return self.order.rows

    def partials(self) -> list[tuple[str, str]]:
        """(stream, text) of each file's unfinished last line (a progress bar), if any."""
        return [
            (name, text)
            for name, store in zip(STREAMS, self.stores, strict=True)
            if (text := store.partial)
        ]

    def _segments(self, start: int, stop: int) -> Iterator[tuple[int, int, int]]:
        """(stream, first line, count) runs covering rows ``[start, stop)``."""
        row = start
        while row < stop:
            stream, line = self.order.locate(row)
            # How far this stream's lines stay consecutive from here.
            count = 1
            while row + count < stop:
                nxt = self.order.locate(row + count)
                if nxt != (stream, line + count):
                    break
                count += 1
            yield stream, line, count
            row += count

    def get_lines(self, start: int, stop: int) -> list[str]:
        """Display text of rows ``[start, stop)``."""
        stop = min(stop, self.line_count)
        out: list[str] = []
        for stream, line, count in self._segments(max(0, start), stop):
            got = self.stores[stream].get_lines(line, line + count)
            out += got + [""] * (count - len(got))
        return out

    def streams(self, start: int, stop: int) -> list[str]:
        """"stdout" or "stderr" for each row of ``[start, stop)``."""
        stop = min(stop, self.line_count)
        out: list[str] = []
        for stream, _, count in self._segments(max(0, start), stop):
            out += [STREAMS[stream]] * count
        return out

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
        """Rows that match, in either stream, from row ``start`` on (or back)."""
        order = self.order
        runs: list[Iterator[int]] = []
        for stream, store in enumerate(self.stores):
            count = store.line_count
            if backwards:
                line = min(order.last_line_upto(stream, start), count - 1)
                if line < 0:
                    continue
            else:
                line = order.first_line_from(stream, start)
                if line >= count:
                    continue
            hits = store.search(
                pattern,
                regex=regex,
                case_sensitive=case_sensitive,
                start=line,
                backwards=backwards,
                cancel=cancel,
            )
            runs.append(_rows(order, stream, hits))
        # Each stream's rows come in order: merging them keeps the view's order.
        return heapq.merge(*runs, reverse=backwards)

    def close(self) -> None:
        for store in self.stores:
            store.close()


def _rows(order: MergedOrder, stream: int, lines: Iterator[int]) -> Iterator[int]:
    for line in lines:
        yield order.row_of(stream, line)
