"""Ranks as a person types them on a command line: ``0``, ``0,2``, ``0-3``, ``all``.

One reader for every command that names ranks (``terminate``, ``signal``, ``input``, and
``run``'s ``--post-mortem`` / ``--debugpy``), so that they all accept the same words.
"""

from __future__ import annotations

__all__ = ["parse_ranks"]


def parse_ranks(text: str, *, allow_all: bool = True) -> tuple[int, ...] | None:
    """"0,2" -> (0, 2); "0-3" -> (0, 1, 2, 3); "1,4-5" -> (1, 4, 5); "all" -> None.

    Raises:
        ValueError: with a line saying what is accepted.
    """
    raw = text.strip()
    accepted = "a rank (2), a list (0,2), a range (0-3)" + (" or all" if allow_all else "")
    if raw.lower() == "all":
        if allow_all:
            return None
        raise ValueError(f"'all' is not accepted here: give {accepted}")
    out: list[int] = []
    for part in raw.split(","):
        lo, dash, hi = part.strip().partition("-")
        try:
            first = int(lo)
            last = int(hi) if dash else first
        except ValueError:
            raise ValueError(f"{text!r} is not {accepted}") from None
        if first < 0 or last < first:
            raise ValueError(f"{part.strip()!r} is not a rank range (give low-high, from 0)")
        out.extend(r for r in range(first, last + 1) if r not in out)
    return tuple(out)
