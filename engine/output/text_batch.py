"""Small shared types of the output pipeline: the byte-block batch and rank prefixes.

``TextBatch`` is what ``OutputPump(text_batches=True)`` hands a console writer instead of a
``RankOutput``: the same fields, with the lines as one UTF-8 block, so that a busy console
costs no per-line Python objects and no decode/encode round trip. ``Prefixes`` is how callers
give each rank's line prefix (a dict, or a function of the rank).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Union

from ..events import RankOutput, Stream

__all__ = ["Batch", "Prefixes", "TextBatch", "prefix_for"]

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
