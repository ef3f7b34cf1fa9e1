"""Progress read from lines, and stragglers relative to their peers."""

from __future__ import annotations

import pytest

from engine.forensics.progress import Progress, ProgressReader, stragglers


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("train  45%|█████     | 45/100 [00:03<00:04]", Progress("tqdm", 45, 100)),
        ("step  120 | loss 0.31", Progress("step", 120)),
        ("Epoch 3 step=1200 loss=0.2", Progress("step", 1200)),
        ("iteration 77 done", Progress("iter", 77)),
        ("iter: 5", Progress("iter", 5)),
        ("epoch 2 starting", Progress("epoch", 2)),
        ("saved 2024/05/06", None),
        ("loss 0.25", None),
    ],
)
def test_progress_is_read_from_common_shapes(line: str, expected: Progress | None) -> None:
    assert ProgressReader().read(line) == expected


def test_a_progress_regex_comes_first() -> None:
    reader = ProgressReader(r"batch#(\d+)")
    assert reader.read("batch#41 step 9") == Progress("custom", 41)
    assert reader.read("step 9") == Progress("step", 9)


def test_stragglers_are_relative_to_their_peers() -> None:
    flagged = stragglers(
        {0: 100, 1: 101, 2: 95, 3: 100},
        {0: 0.1, 1: 0.2, 2: 0.1, 3: 2.0},
        {0: 0.5, 1: 0.5, 2: 0.5, 3: 0.5},
    )
    assert flagged == {
        2: "5 steps behind the median (100)",
        3: "silent 2.0 s, 4x its peers' usual gap",
    }
    # A slow job (every gap long) flags nobody for the same silence.
    assert stragglers({0: 1, 1: 1}, {0: 2.0, 1: 2.0}, {0: 10.0, 1: 10.0}) == {}
