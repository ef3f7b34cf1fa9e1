"""Training progress read from a rank's output, and the ranks that fall behind.

``ProgressReader`` finds the step a line reports: tqdm's ``N/M`` (``45%|████▌ | 45/100``),
``step N``, ``iter N`` / ``iteration N``, ``epoch N``, or a person's ``--progress-regex``
(its first group, else its whole match, must be a number). The most specific wins: a step
beats an epoch when a line has both. ``stragglers`` flags, relative to the other ranks (a
slow job is not flagged), a rank at least ``k`` steps behind the median, or silent ``k``
times its peers' median gap between lines.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

__all__ = ["Progress", "ProgressReader", "stragglers"]

_PATTERNS: Final = (
    ("tqdm", re.compile(r"(?<![\d.])(\d+)/(\d+)(?![\d.])")),
    ("step", re.compile(r"\bstep[\s:=#]*(\d+)", re.I)),
    ("iter", re.compile(r"\biter(?:ation)?s?[\s:=#]*(\d+)", re.I)),
    ("epoch", re.compile(r"\bepoch[\s:=#]*(\d+)", re.I)),
)


@dataclass(frozen=True, slots=True)
class Progress:
    """A step read from a line: ``step`` of ``total`` (None when the line gives none)."""

    kind: str
    step: int
    total: int | None = None


class ProgressReader:
    """Reads progress from lines (see the module docstring).

    Args:
        regex: A person's pattern; when given it is tried first.

    Raises:
        re.error: ``regex`` is not a valid pattern.
    """

    def __init__(self, regex: str | None = None) -> None:
        self._custom = re.compile(regex) if regex else None

    def read(self, line: str) -> Progress | None:
        """The progress ``line`` reports, or None."""
        if self._custom is not None:
            m = self._custom.search(line)
            if m:
                text = m.group(1) if m.groups() else m.group(0)
                if text and text.isdigit():
                    return Progress("custom", int(text))
        for kind, pattern in _PATTERNS:
            m = pattern.search(line)
            if m is None:
                continue
            if kind == "tqdm":
                step, total = int(m.group(1)), int(m.group(2))
                if total == 0 or step > total:
                    continue  # a date or a ratio, not a bar
                return Progress(kind, step, total)
            return Progress(kind, int(m.group(1)))
        return None


def stragglers(
    steps: Mapping[int, int | None],
    silent_s: Mapping[int, float | None],
    gaps_s: Mapping[int, float | None],
    *,
    k_steps: int = 3,
    k_silence: float = 3.0,
) -> dict[int, str]:
    """Ranks that fall behind their peers, each with why in words.

    Args:
        steps: each rank's last step (None: no progress read).
        silent_s: seconds since each rank's last output (None: it wrote nothing).
        gaps_s: each rank's median gap between lines (None: not known yet).
        k_steps: steps behind the median that flag a rank.
        k_silence: times its peers' median gap that a silence must last to flag a rank.
    """
    out: dict[int, str] = {}
    known = [s for s in steps.values() if s is not None]
    if len(known) >= 2:
        median = statistics.median(known)
        for rank, step in steps.items():
            if step is not None and median - step >= k_steps:
                out[rank] = f"{median - step:g} steps behind the median ({median:g})"
    for rank, silence in silent_s.items():
        peers = [g for r, g in gaps_s.items() if r != rank and g is not None]
        if silence is None or not peers or rank in out:
            continue
        usual = statistics.median(peers)
        if usual > 0 and silence >= k_silence * usual:
            out[rank] = f"silent {silence:.1f} s, {silence / usual:.0f}x its peers' usual gap"
    return out
