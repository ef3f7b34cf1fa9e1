"""A tile's segments, built directly, against what ``rich.text.Text`` gives for the same
appends, truncation and render (how tiles were drawn before: the same cells and styles)."""

from __future__ import annotations

import random

from rankvisor.tui.widgets.rank_tiles import tile_segments
from rich.console import Console
from rich.segment import Segment
from rich.style import Style
from rich.text import Text

_STYLES = [
    None,
    Style(color="green"),
    Style(color="red", bold=True),
    Style(dim=True),
    Style(color="yellow", bgcolor="black", bold=True),
]
_WORDS = [
    "", " ", "run", "step 120", "⚠-12", "  4% 1.2G ", "loss=0.1234", "中文字符", "é", "x" * 70,
    "a\x07b", "tab\there", "…", "🙂 ok", "e\u0301", " " * 9,
]


def _cells(segments: list[Segment]) -> list[tuple[str, Style]]:
    """One (character, style) per character: what a terminal shows, however it is cut."""
    return [(char, segment.style) for segment in segments for char in segment.text]


def _through_text(pieces: list[tuple[str, Style | None]], width: int, row: Style) -> list[Segment]:
    text = Text(no_wrap=True, overflow="ellipsis", end="")
    for piece, style in pieces:
        text.append(piece, style or "")
    text.truncate(width - 1, overflow="ellipsis", pad=True)
    text.append(" ")
    segments = list(text.render(Console(width=200, color_system="truecolor")))
    return list(Segment.apply_style(segments, row))


def test_a_tile_is_what_rich_text_makes_of_it() -> None:
    rng = random.Random(21)
    row = Style(bgcolor="grey11")
    for _ in range(3000):
        pieces = [
            (rng.choice(_WORDS) + rng.choice(_WORDS), rng.choice(_STYLES))
            for _ in range(rng.randint(1, 6))
        ]
        width = rng.randint(2, 90)
        ours = tile_segments(pieces, width, row)
        theirs = _through_text(pieces, width, row)
        assert _cells(ours) == _cells(theirs), (pieces, width)
        assert sum(s.cell_length for s in ours) == sum(s.cell_length for s in theirs)


def test_a_tile_fills_its_width_exactly() -> None:
    row = Style()
    long = [("  3 ", Style(color="green")), ("● ", None), ("run      ", None), ("x" * 200, None)]
    for width in (2, 10, 36, 40, 80):
        segments = tile_segments(long, width, row)
        assert sum(s.cell_length for s in segments) == width
        assert "".join(s.text for s in segments).endswith("… ")
