"""Small shared types of the output pipeline: blocks of lines, the byte-block batch, prefixes.

``LineBlock`` is the ``lines`` of a ``RankOutput`` the pump reads: a chunk's complete lines
kept as the one UTF-8 block they were read as, made into ``str`` lines only when somebody
reads them all (a pane, a console that shows the rank, a viewer's encoding). Its last few
lines come without that (a rank's last line and step), so a supervisor whose output nobody
shows (tee off, no viewer) costs no Python object per line. Each block counts its full reads
into its pump's counter: the pump slows down while nobody reads (``unread_debounce``).
``TextBatch`` is what ``OutputPump(text_batches=True)`` hands a console writer instead of a
``RankOutput``: the same fields, with the lines as one UTF-8 block. ``Prefixes`` is how
callers give each rank's line prefix (a dict, or a function of the rank).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Callable, Final, Union, overload

from ..events import RankOutput, Stream

__all__ = ["Batch", "LineBlock", "Prefixes", "TextBatch", "prefix_for"]

_TAIL_LINES: Final = 64
"""Lines from the end that ``LineBlock`` gives without making every line."""


class LineBlock(Sequence[str]):
    """Complete lines as one UTF-8 block, each ending in ``\\n``, read as the tuple of its
    lines (and equal to it), which is made only when read whole (see the module docstring).

    Immutable; safe to read from any thread (two first readers make equal tuples).

    Args:
        data: the lines, each ending in a newline.
        count: how many.
        reads: a one-item list counting reads of the whole block (its pump's), or None.
    """

    __slots__ = ("_lines", "_reads", "count", "data")
    # ``_reads`` is a hint (not counted atomically): the pump only asks whether it moved.

    def __init__(self, data: bytes, count: int, reads: list[int] | None = None) -> None:
        self.data = data
        self.count = count
        self._reads = reads
        self._lines: tuple[str, ...] | None = None

    @property
    def text(self) -> str:
        """The lines as one string, each ending in a newline."""
        return self.read_data().decode("utf-8", "surrogatepass")

    def read_data(self) -> bytes:
        """``data``, counted as a read of the whole block (a console writing the bytes)."""
        if self._reads is not None:
            self._reads[0] += 1
        return self.data

    def all(self) -> tuple[str, ...]:
        """Every line (made once)."""
        lines = self._lines
        if lines is None:
            lines = self._lines = tuple(self.text.split("\n")[:-1]) if self.count else ()
        return lines

    def tail(self, n: int) -> tuple[str, ...]:
        """The last ``n`` lines, decoding only them."""
        if self._lines is not None or n >= self.count:
            return self.all()[-n:] if n > 0 else ()
        if n <= 0:
            return ()
        data = self.data
        at = len(data) - 1  # the last line's newline
        for _ in range(n):
            at = data.rfind(b"\n", 0, at)
        return tuple(data[at + 1 :].decode("utf-8", "surrogatepass").split("\n")[:-1])

    def __len__(self) -> int:
        return self.count

    def __bool__(self) -> bool:
        return self.count > 0

    @overload
    def __getitem__(self, i: int) -> str: ...
    @overload
    def __getitem__(self, i: slice) -> tuple[str, ...]: ...
    def __getitem__(self, i: int | slice) -> Any:
        if isinstance(i, slice):
            start, stop, step = i.start, i.stop, i.step
            if (
                stop is None and step is None and isinstance(start, int)
                and -_TAIL_LINES <= start < 0
            ):
                return self.tail(-start)
            return self.all()[i]
        if -_TAIL_LINES <= i < 0 and self._lines is None and -i <= self.count:
            return self.tail(-i)[0]
        return self.all()[i]

    def __iter__(self) -> Iterator[str]:
        return iter(self.all())

    def __reversed__(self) -> Iterator[str]:
        return reversed(self.all())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, LineBlock):
            return self.data == other.data
        if isinstance(other, tuple):
            return self.all() == other
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.all())

    def __add__(self, other: object) -> tuple[str, ...]:
        if isinstance(other, (tuple, LineBlock)):
            return self.all() + tuple(other)
        return NotImplemented

    def __radd__(self, other: object) -> tuple[str, ...]:
        if isinstance(other, tuple):
            return other + self.all()
        return NotImplemented

    def __repr__(self) -> str:
        return repr(self.all())

Prefixes = Union[dict[int, str], Callable[[int], str], None]
"""rank -> prefix, as a dict or a function; None: only the default ``[{name}{rank}]:``."""


def prefix_for(prefixes: Prefixes, name: str, rank: int) -> str:
    """The prefix of ``rank``: given, else torch's default ``f"[{name}{rank}]:"``."""
    if callable(prefixes):
        return prefixes(rank)
    if prefixes is not None and rank in prefixes:
        return prefixes[rank]
    return f"[{name}{rank}]:"


@dataclass(frozen=True, slots=True)
class TextBatch:
    """``RankOutput`` with its lines as one UTF-8 block (see the module docstring)."""

    rank: int
    stream: Stream
    data: bytes
    """Complete lines, UTF-8, each ending in ``\\n`` (b"" if none)."""
    count: int
    """Number of lines in ``data``."""
    partial: str = ""
    attempt: int = 0
    first_line: int = 0

    @property
    def text(self) -> str:
        """``data`` decoded."""
        return self.data.decode("utf-8", "surrogatepass")

    @property
    def lines(self) -> tuple[str, ...]:
        """The lines without their newlines."""
        return tuple(self.text.split("\n")[:-1]) if self.data else ()


Batch = Union[RankOutput, TextBatch]
"""What an output sink receives items of."""
