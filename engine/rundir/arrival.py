"""The arrival index: in which order a rank's stdout and stderr lines arrived, kept on disk.

A rank writes two files; neither says how its lines interleave with the other's. The output
pump knows (it reads both), so it appends a small record to ``arrival.idx`` in the rank's log
directory, next to ``stdout.log`` and ``stderr.log``, each time it has read new complete lines
of one of them. A viewer that reads history from the files (the zoomed view, one that attaches
late) merges the two streams on it, without the pump's memory.

Format (little-endian, append-only, written with ``O_APPEND``):

- an 8-byte header, ``MAGIC`` (``b"RVARIDX1"``);
- then 16-byte records ``(tag: u64, time_ns: i64)``: ``tag = lines_end << 1 | stream``, with
  ``stream`` 0 for stdout and 1 for stderr. A record says: that stream's file now holds
  ``lines_end`` complete lines, and those after the stream's previous record arrived
  (were read by the pump) at ``time_ns`` (``clock.wall_ns()``). Records are in arrival order;
  the pump writes one per stream per read pass that completed lines (never one per line),
  stdout's before stderr's within a pass, so a busy rank costs 16 bytes per batch.

A record whose ``lines_end`` is not above its stream's last one is ignored (a file truncated
in place starts its numbering again; from there the index no longer describes it). A reader
must also expect a torn last record (the writer appends while it reads) and lines on disk
that no record covers yet (written, not read by the pump yet): ``MergedOrder`` places those
after the indexed lines, stdout's first.

``MergedOrder`` turns the records into the merged order as *runs* (a stretch of consecutive
lines of one stream), so its memory grows with how often the streams alternate, not with the
number of lines: a GB of stdout with a traceback at the end is two runs.
"""

from __future__ import annotations

import os
import struct
import threading
from array import array
from bisect import bisect_right
from typing import Final

from .. import clock

__all__ = [
    "ARRIVAL_FILE",
    "MAGIC",
    "ArrivalWriter",
    "MergedOrder",
    "arrival_path",
    "read_records",
]

ARRIVAL_FILE: Final = "arrival.idx"
MAGIC: Final = b"RVARIDX1"
_RECORD: Final = struct.Struct("<Qq")
STREAMS: Final = ("stdout", "stderr")


def arrival_path(stdout_path: str, stderr_path: str) -> str:
    """Where the index of a rank's two logs lives: beside them ("" if they are apart)."""
    if not stdout_path or not stderr_path:
        return ""
    directory = os.path.dirname(stdout_path)
    if directory != os.path.dirname(stderr_path):
        return ""
    return os.path.join(directory, ARRIVAL_FILE)


class ArrivalWriter:
    """Appends records to one index file; ``note`` buffers, ``flush`` writes them in one go.

    Not thread-safe: the pump calls it under its own lock.
    """

    __slots__ = ("_buf", "_fd", "_last", "path", "users")

    def __init__(self, path: str) -> None:
        self.path = path
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
        if os.fstat(self._fd).st_size == 0:
            os.write(self._fd, MAGIC)
        self._buf = bytearray()
        self._last = [0, 0]
        self.users = 0
        """How many tails share this file (the pump closes it when none is left)."""

    def note(self, stream: int, lines_end: int) -> None:
        """Stream ``stream`` (0 stdout, 1 stderr) now has ``lines_end`` complete lines."""
        if lines_end <= self._last[stream]:
            return
        self._last[stream] = lines_end
        self._buf += _RECORD.pack(lines_end << 1 | stream, clock.wall_ns())

    @property
    def pending(self) -> bool:
        """Records are buffered, not written yet."""
        return bool(self._buf)

    def flush(self) -> None:
        """Write the buffered records (one ``write``); errors are the caller's to log."""
        if self._buf:
            data, self._buf = bytes(self._buf), bytearray()
            os.write(self._fd, data)

    def close(self) -> None:
        try:
            self.flush()
        finally:
            os.close(self._fd)


def read_records(path: str, offset: int = 0) -> tuple[list[tuple[int, int, int]], int]:
    """``(stream, lines_end, time_ns)`` records from byte ``offset`` (0: after the header),
    and the offset to read from next time (a torn last record is left for then)."""
    try:
        with open(path, "rb") as f:
            if offset == 0:
                if f.read(len(MAGIC)) != MAGIC:
                    return [], 0
                offset = len(MAGIC)
            f.seek(offset)
            data = f.read()
    except OSError:
        return [], offset
    usable = len(data) - len(data) % _RECORD.size
    out = [(tag & 1, tag >> 1, t) for tag, t in _RECORD.iter_unpack(data[:usable])]
    return out, offset + usable


class MergedOrder:
    """Maps rows of the merged view to (stream, line) and back, from the arrival index.

    ``refresh()`` reads the records appended since the last call. ``set_counts`` tells it
    how many complete lines each file has on disk; rows past the indexed ones show the
    lines no record covers yet (stdout's, then stderr's). Thread-safe (one lock).
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self._offset = 0
        self._lock = threading.Lock()
        # Runs in merged order: the first row, the stream and its first line of each.
        self._run_row = array("Q")
        self._run_stream = array("B")
        self._run_line = array("Q")
        # Per stream, the same runs: their first line and first row (for line -> row).
        self._s_line = (array("Q"), array("Q"))
        self._s_row = (array("Q"), array("Q"))
        self.ends = [0, 0]
        """Lines of each stream the index covers."""
        self.indexed_rows = 0
        self.counts = [0, 0]
        """Complete lines of each file on disk (``set_counts``)."""

    def nbytes(self) -> int:
        """Memory held by the runs."""
        arrays = (self._run_row, self._run_line, *self._s_line, *self._s_row)
        return sum(len(a) * 8 for a in arrays) + len(self._run_stream)

    @property
    def runs(self) -> int:
        return len(self._run_row)

    def refresh(self) -> None:
        """Take in the records appended since the last call."""
        records, offset = read_records(self.path, self._offset)
        with self._lock:
            self._offset = offset
            for stream, end, _ in records:
                self._extend(stream, end)

    def _extend(self, stream: int, end: int) -> None:
        start = self.ends[stream]
        if end <= start:
            return  # a truncated file numbers again from 0: not described any more
        if not self._run_stream or self._run_stream[-1] != stream:
            self._run_row.append(self.indexed_rows)
            self._run_stream.append(stream)
            self._run_line.append(start)
            self._s_line[stream].append(start)
            self._s_row[stream].append(self.indexed_rows)
        self.indexed_rows += end - start
        self.ends[stream] = end

    def set_counts(self, stdout_lines: int, stderr_lines: int) -> None:
        with self._lock:
            self.counts = [stdout_lines, stderr_lines]

    def _extra(self, stream: int) -> int:
        return max(0, self.counts[stream] - self.ends[stream])

    @property
    def rows(self) -> int:
        """Rows of the merged view (complete lines of both streams)."""
        with self._lock:
            return self.indexed_rows + self._extra(0) + self._extra(1)

    def locate(self, row: int) -> tuple[int, int]:
        """(stream, line) shown at ``row``."""
        with self._lock:
            if row < self.indexed_rows:
                i = bisect_right(self._run_row, row) - 1
                return self._run_stream[i], self._run_line[i] + row - self._run_row[i]
            row -= self.indexed_rows
            extra0 = self._extra(0)
            if row < extra0:
                return 0, self.ends[0] + row
            return 1, self.ends[1] + row - extra0

    def row_of(self, stream: int, line: int) -> int:
        """The row that shows ``line`` of ``stream``."""
        with self._lock:
            if line < self.ends[stream]:
                lines, rows = self._s_line[stream], self._s_row[stream]
                i = bisect_right(lines, line) - 1
                return rows[i] + line - lines[i]
            base = self.indexed_rows + (self._extra(0) if stream else 0)
            return base + line - self.ends[stream]

    def first_line_from(self, stream: int, row: int) -> int:
        """The first line of ``stream`` shown at ``row`` or below."""
        with self._lock:
            if row < self.indexed_rows:
                lines, rows = self._s_line[stream], self._s_row[stream]
                i = bisect_right(rows, row) - 1
                if i < 0:
                    return 0
                run_end = lines[i + 1] if i + 1 < len(lines) else self.ends[stream]
                inside = lines[i] + row - rows[i]
                return inside if inside < run_end else run_end
            base = self.indexed_rows + (self._extra(0) if stream else 0)
            return self.ends[stream] + min(max(0, row - base), self._extra(stream))

    def last_line_upto(self, stream: int, row: int) -> int:
        """The last line of ``stream`` shown at ``row`` or above (-1: none)."""
        return self.first_line_from(stream, row + 1) - 1
