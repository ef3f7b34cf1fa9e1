"""Progress read from lines, and stragglers relative to their peers."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rankvisor.engine.forensics.progress import (
    Progress,
    ProgressReader,
    check_regex,
    peers_gap,
    step_threshold,
    stragglers,
)


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
        ("rank 0/4: gloo process group up", None),  # a ratio, not a bar
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


def test_a_regex_names_its_step_and_total() -> None:
    reader = ProgressReader(r"(?P<total>\d+) batches, at (?P<step>\d+)")
    assert reader.read("100 batches, at 7") == Progress("custom", 7, 100)
    # The only named group, else the first group, else the whole match is the step.
    assert ProgressReader(r"it=(?P<n>\d+)").read("it=12") == Progress("custom", 12)
    assert ProgressReader(r"(\w+)=(\d+)").read("k=3") is None  # "k" is not a number
    assert ProgressReader(r"\d+(?= done)").read("41 done") == Progress("custom", 41)


@pytest.mark.parametrize(
    ("regex", "words"),
    [("x(", "not a regular expression"), (r"(?P<a>\d)(?P<b>\d)", "name the step's")],
)
def test_a_bad_regex_is_refused_in_one_line(regex: str, words: str) -> None:
    with pytest.raises(ValueError, match=words) as caught:
        check_regex(regex)
    assert "\n" not in str(caught.value)


def test_the_step_threshold_grows_with_the_median() -> None:
    assert step_threshold(10) == 2
    assert step_threshold(1000) == 50
    steps = {0: 1000, 1: 1000, 2: 1000, 3: 960, 4: 940}
    assert list(stragglers(steps, {}, {})) == [4]  # 60 behind; 40 is within 5 %


def test_silence_is_said_before_lag_and_needs_a_floor() -> None:
    # Rank 3 stopped writing: it is behind too, but "silent" says more.
    flagged = stragglers({0: 50, 1: 50, 2: 50, 3: 20}, {3: 9.0}, {0: 1.0, 1: 1.0, 2: 1.0})
    assert flagged[3].startswith("silent 9.0 s, 9x")
    # Peers writing every 0.1 s: a 0.5 s pause is 5x their gap, but under the floor.
    gaps = {0: 0.1, 1: 0.1, 2: 0.1}
    assert stragglers({}, {2: 0.5}, gaps, min_silence_s=2.0) == {}
    assert stragglers({}, {2: 0.5}, gaps) == {2: "silent 0.5 s, 5x its peers' usual gap"}


def test_a_rank_s_own_gap_is_left_out_of_its_peers_median() -> None:
    # Rank 2 writes rarely (10 s gaps): its own cadence does not excuse its silence.
    gaps = {0: 1.0, 1: 1.0, 2: 10.0}
    assert peers_gap(sorted(gaps.values()), 10.0) == 1.0
    assert peers_gap(sorted(gaps.values()), 1.0) == 5.5
    assert peers_gap([1.0], 1.0) is None
    assert set(stragglers({}, {2: 4.0}, gaps)) == {2}


def test_a_reading_names_the_kind_of_line_it_came_from() -> None:
    reader = ProgressReader()
    step_line = reader.read("\rstep   20 | loss 1.0")
    warning = reader.read("UserWarning: rank 1: WARNING clipped to 1.0 (step 25)")
    assert step_line is not None and warning is not None
    assert step_line.source == reader.read("step 30 | loss 0.9").source  # type: ignore[union-attr]
    assert warning.source != step_line.source
    bar = reader.read("train  14%|██▊     | 29/200")
    assert bar is not None and bar.source == reader.read("train  15%|███   | 30/200").source  # type: ignore[union-attr]


def _searched_in_full(line: str) -> Progress | None:
    """The reader's answer with every pattern searched (no substring test first)."""
    from rankvisor.engine.forensics import progress

    for kind, pattern in progress._PATTERNS:
        m = pattern.search(line)
        if m is None:
            continue
        if kind == "tqdm":
            step, total = int(m.group(1)), int(m.group(2))
            if total == 0 or step > total or not progress._BAR.search(line):
                continue
            return Progress(kind, step, total, progress.source_of(kind, line, m.start()))
        return Progress(kind, int(m.group(1)), None, progress.source_of(kind, line, m.start()))
    return None


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(
    ["step", "STEP", "Iter", "iterations", "epoch", "EPOCH", " ", ":", "=", "#", "/", "%",
     "|", "it/s", "3", "45", "100", "0", ".", "x", "loss", "ſtep", "ıter", "é"]
), max_size=12).map("".join))
def test_the_substring_test_before_each_search_changes_no_answer(line: str) -> None:
    assert ProgressReader().read(line) == _searched_in_full(line)
