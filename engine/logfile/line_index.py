"""A compact, incremental index of line starts in a growing log file.

``LineIndex`` is fed the file's bytes in order (``feed``), as they are appended, and can then
say where any line starts to within one block, for ``engine.logfile.store.LogStore`` to read it
from disk.

Why sparse: 10 M lines of 8-byte offsets are 80 MB, more than the 64 MB budget for tailing
and indexing 1 GB. Instead the file is cut into fixed blocks of ``block_size`` bytes (16 KiB)
and the index keeps one *checkpoint* per block: the number and offset of the first line that
starts in it (blocks inside one long line have none). That is at most 16 bytes per 16 KiB of
log (1 MB per GB) in two ``array('Q')``, whatever the line lengths, and the work per block is
two C-level calls (``bytes.find``, ``bytes.count``), never a Python loop over lines.

Guarantees ``LogStore`` relies on, with ``cp = checkpoint_for(n)`` (the last checkpoint at or
before line ``n``):
- line ``n`` starts in the same block as ``cp``, so it is less than ``block_size`` bytes
  after ``cp.offset``;
- a line longer than ``block_size`` is followed by a checkpoint for the next line, so its end
  is known without reading it.

Not thread-safe on its own: ``LogStore`` guards it with a lock.
"""

from __future__ import annotations

from array import array
from bisect import bisect_right
from typing import Final, NamedTuple

__all__ = ["DEFAULT_BLOCK_SIZE", "Checkpoint", "LineIndex"]

DEFAULT_BLOCK_SIZE: Final = 16384


class Checkpoint(NamedTuple):
    """Line ``line`` (0-based) starts at byte ``offset``."""

    line: int
    offset: int


class LineIndex:
    """Checkpoints of line starts; see the module docstring."""

    __slots__ = (
        "_block",
        "_last_block",
        "_lines",
        "_offsets",
        "end",
        "line_count",
        "last_line_end",
        "_prev_nl",
    )

    def __init__(self, block_size: int = DEFAULT_BLOCK_SIZE) -> None:
        self._block = block_size
        self._lines = array("Q")
        self._offsets = array("Q")
        self._last_block = -1
        """Index of the last block that has its checkpoint."""
        self._prev_nl = True
        """The byte before ``end`` is a newline (or ``end`` is 0): a line starts at ``end``."""
        self.end = 0
        """Bytes of the file indexed so far."""
        self.line_count = 0
        """Complete (newline-terminated) lines in the indexed bytes."""
        self.last_line_end = 0
        """Offset just after the last newline: where the unterminated tail starts."""

    @property
    def checkpoints(self) -> int:
        """How many checkpoints are stored (two 8-byte integers each)."""
        return len(self._lines)

    def nbytes(self) -> int:
        """Memory held by the arrays' items."""
        return (len(self._lines) + len(self._offsets)) * 8

    def feed(self, data: bytes) -> None:
        """Index ``data``, the next bytes of the file (from offset ``end``)."""
        if not data:
            return
        block = self._block
        base = self.end
        size = len(data)
        newlines = self.line_count
        pos = 0
        while pos < size:
            k = (base + pos) // block
            block_end = (k + 1) * block - base  # relative to data; may lie beyond it
            end = min(block_end, size)
            if k > self._last_block:
                if (data[pos - 1] == 10) if pos else self._prev_nl:
                    self._add(newlines, base + pos, k)
                else:
                    q = data.find(b"\n", pos, end)
                    if 0 <= q and q + 1 < block_end:
                        self._add(newlines + 1, base + q + 1, k)
            newlines += data.count(b"\n", pos, end)
            pos = end
        self.end = base + size
        if newlines != self.line_count:
            self.line_count = newlines
            self.last_line_end = base + data.rindex(b"\n") + 1
        self._prev_nl = data[-1] == 10

    def _add(self, line: int, offset: int, block: int) -> None:
        self._lines.append(line)
        self._offsets.append(offset)
        self._last_block = block

    def checkpoint_for(self, line: int) -> Checkpoint:
        """The last checkpoint at or before ``line`` (line 0 at offset 0 if none)."""
        i = bisect_right(self._lines, line) - 1
        if i < 0:
            return Checkpoint(0, 0)
        return Checkpoint(self._lines[i], self._offsets[i])

    def checkpoint_after(self, line: int) -> Checkpoint | None:
        """The first checkpoint strictly after ``line``, or None."""
        i = bisect_right(self._lines, line)
        if i >= len(self._lines):
            return None
        return Checkpoint(self._lines[i], self._offsets[i])
