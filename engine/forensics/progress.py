"""Training progress read from a rank's output, and the ranks that fall behind.

``ProgressReader`` finds the step a line reports: tqdm's ``N/M`` (``45%|████▌ | 45/100``),
``step N``, ``iter N`` / ``iteration N``, ``epoch N``, or a person's ``--progress-regex``
(its group named ``step``, else its only or first group, else its whole match, must be a
number; a group named ``total`` gives the end). The most specific wins: a step beats an
epoch when a line has both. Each reading names its source, the kind of line it came from
(its text before the number, digits masked): a step quoted by a warning every 25 steps is
not the step line printed every 10, and ranks are compared on one source only.
``stragglers`` flags, relative to the other ranks (a slow job is not flagged), a rank far
enough behind the median step (``step_threshold``: at least 2 steps and 5 % of the median,
so that ranks a step apart in a collective's rhythm are not flagged), or silent ``k`` times
its peers' median gap between lines.
"""

from __future__ import annotations

import bisect
import re
import statistics
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

__all__ = [
    "KINDS",
    "Progress",
    "ProgressReader",
    "check_regex",
    "peers_gap",
    "source_of",
    "step_threshold",
    "stragglers",
]

_PATTERNS: Final = (
    ("tqdm", re.compile(r"(?<![\d.])(\d+)/(\d+)(?![\d.])")),
    ("step", re.compile(r"\bstep[\s:=#]*(\d+)", re.I)),
    ("iter", re.compile(r"\biter(?:ation)?s?[\s:=#]*(\d+)", re.I)),
    ("epoch", re.compile(r"\bepoch[\s:=#]*(\d+)", re.I)),
)

KINDS: Final = ("custom", "tqdm", "step", "iter", "epoch")
_NEEDS: Final = {"tqdm": "/", "step": "step", "iter": "iter", "epoch": "epoch"}
"""What an ASCII line must hold (lower-cased) for a kind's pattern to match: a substring test
costs a tenth of a search, and a pane under a flood reads a rank's last lines each frame,
most of them holding none (a non-ASCII line is searched in every case: re.I folds more)."""
"""Kinds of progress, the best first: a person's pattern, then a bar (redrawn every step, so
always current, where a counter in prose is printed every N steps and lags by up to N),
then counters in prose, then epochs (too coarse)."""

_BAR: Final = re.compile(r"%|\||it/s|s/it")
"""What a progress bar's line has beside its N/M (tqdm's percentage, bar or rate)."""

SOURCE_CHARS: Final = 60
"""Of a line's text before its number, the part that names its source."""

_NUMBER: Final = re.compile(r"[0-9]+")
"""ASCII digits only: ``str.isdigit`` also takes "²", which ``int`` refuses."""

STEP_FRACTION: Final = 0.05
MIN_STEPS_BEHIND: Final = 2


def step_threshold(median: float) -> float:
    """Steps behind the median that make a straggler: 5 % of the median, at least 2."""
    return max(float(MIN_STEPS_BEHIND), STEP_FRACTION * median)


def check_regex(regex: str) -> re.Pattern[str]:
    """Compile a ``--progress-regex``, or say in one line why it cannot be one.

    Raises:
        ValueError: not a pattern, or several named groups and none named ``step``.
    """
    try:
        pattern = re.compile(regex)
    except re.error as e:
        raise ValueError(f"{regex!r} is not a regular expression: {e}") from None
    names = set(pattern.groupindex) - {"total"}
    if len(names) > 1 and "step" not in names:
        raise ValueError(
            f"{regex!r}: several named groups; name the step's (?P<step>...)"
        )
    return pattern


def _step_group(pattern: re.Pattern[str]) -> int | str:
    """Which group of a person's pattern is the step (0: the whole match)."""
    names = [n for n in pattern.groupindex if n != "total"]
    if "step" in pattern.groupindex:
        return "step"
    if len(names) == 1:
        return names[0]
    if pattern.groups:
        first = min(
            (i for i in range(1, pattern.groups + 1)
             if i != pattern.groupindex.get("total")),
            default=0,
        )
        return first
    return 0


@dataclass(frozen=True, slots=True)
class Progress:
    """A step read from a line: ``step`` of ``total`` (None when the line gives none)."""

    kind: str
    step: int
    total: int | None = None
    source: str = field(default="", compare=False)
    """The kind of line it was read from (``source_of``): only readings of one source are
    compared, across ranks and within a rank."""


def source_of(kind: str, line: str, start: int) -> str:
    """``kind`` and the text before position ``start`` of ``line``, digits masked: the same
    for every line a ``print(f"step {i} | loss ...")`` writes, on every rank (a tqdm bar's
    text stops at its first ``|``: the bar itself grows)."""
    before = line[:start]
    if kind == "tqdm":
        before = before.split("|", 1)[0]
    before = _NUMBER.sub("#", before).strip(" \t\r")
    return f"{kind}:{before[-SOURCE_CHARS:]}"


class ProgressReader:
    """Reads progress from lines (see the module docstring).

    Args:
        regex: A person's pattern; when given it is tried first.

    Raises:
        ValueError: ``regex`` is not a valid pattern (``check_regex``).
    """

    def __init__(self, regex: str | None = None) -> None:
        self._custom = check_regex(regex) if regex else None
        self._group = _step_group(self._custom) if self._custom is not None else 0
        self._total = (
            self._custom.groupindex.get("total") if self._custom is not None else None
        )

    def read(self, line: str) -> Progress | None:
        """The progress ``line`` reports, or None."""
        if self._custom is not None:
            m = self._custom.search(line)
            if m:
                text = m.group(self._group)
                if text and _NUMBER.fullmatch(text):
                    total_text = m.group(self._total) if self._total else None
                    total = (
                        int(total_text) if total_text and _NUMBER.fullmatch(total_text)
                        else None
                    )
                    return Progress("custom", int(text), total, "custom")
        lower = line.lower() if line.isascii() else None
        for kind, pattern in _PATTERNS:
            if lower is not None and _NEEDS[kind] not in lower:
                continue
            m = pattern.search(line)
            if m is None:
                continue
            if kind == "tqdm":
                step, total = int(m.group(1)), int(m.group(2))
                if total == 0 or step > total or not _BAR.search(line):
                    continue  # a date, a ratio, "rank 0/4": not a bar
                return Progress(kind, step, total, source_of(kind, line, m.start()))
            return Progress(kind, int(m.group(1)), None, source_of(kind, line, m.start()))
        return None


def stragglers(
    steps: Mapping[int, int | None],
    silent_s: Mapping[int, float | None],
    gaps_s: Mapping[int, float | None],
    *,
    k_steps: float | None = None,
    k_silence: float = 3.0,
    min_silence_s: float = 0.0,
    startup_s: float | None = None,
) -> dict[int, str]:
    """Ranks that fall behind their peers, each with why in words.

    Args:
        steps: each rank's last step (None: no progress read).
        silent_s: seconds since each rank's last output (None: it wrote nothing).
        gaps_s: each rank's median gap between lines (None: not known yet).
        k_steps: steps behind the median that flag a rank (None: ``step_threshold``).
        k_silence: times its peers' median gap that a silence must last to flag a rank.
        min_silence_s: ... and at least this long (a rank whose peers write every tenth
            of a second is not a straggler for pausing half a second).
        startup_s: Given while the ranks start up (not every one has a cadence yet): only
            a rank silent this long is a silent straggler, its reason naming the threshold
            (steps the ranks report still set one behind the others).
    """
    out: dict[int, str] = {}
    silence_s = min_silence_s
    if startup_s is not None:
        silence_s = max(silence_s, startup_s)
    # Silence first: a rank that stopped writing is also behind, and "silent" says more.
    # Each rank against the median of the others' gaps: one sorted list, and the median
    # without a rank's own gap read off it by index, so that 512 ranks cost n log n.
    ordered = sorted(g for g in gaps_s.values() if g is not None)
    for rank, silence in silent_s.items():
        if silence is None:
            continue
        usual = _median_without(ordered, gaps_s.get(rank))
        if startup_s is not None and silence >= silence_s:
            out[rank] = f"silent {silence:.1f} s, past the {startup_s:g} s start-up threshold"
        elif usual is not None and usual > 0 and silence >= max(k_silence * usual, silence_s):
            out[rank] = f"silent {silence:.1f} s, {silence / usual:.0f}x its peers' usual gap"
    known = [s for s in steps.values() if s is not None]
    if len(known) >= 2:
        median = statistics.median(known)
        least = step_threshold(median) if k_steps is None else k_steps
        for rank, step in steps.items():
            if rank not in out and step is not None and median - step >= least:
                out[rank] = f"{median - step:g} steps behind the median ({median:g})"
    return out


def peers_gap(ordered: list[float], own: float | None) -> float | None:
    """The median of the sorted gaps ``ordered`` without one rank's own (``own``, which is
    among them unless None): its peers' usual gap between lines; None without peers."""
    return _median_without(ordered, own)


def _median_without(ordered: list[float], own: float | None) -> float | None:
    if own is None:
        return statistics.median(ordered) if ordered else None
    n = len(ordered) - 1
    if n < 1:
        return None
    skip = bisect.bisect_left(ordered, own)

    def at(j: int) -> float:
        return ordered[j if j < skip else j + 1]

    return (at((n - 1) // 2) + at(n // 2)) / 2
