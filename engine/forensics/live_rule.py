"""The live suspect's rules, as pure readings of what each rank did by a given time.

Three questions, asked every half second while ranks run (``engine.supervisor.live_suspect``
asks them, with the times):

- is every rank quiet (``every_rank_quiet``)? Each past its own cadence (``factor`` times
  its median gap between output batches, at least ``min_s``). Before every rank has a
  cadence (``has_cadence``: steps, or enough output batches) the ranks are starting up
  (importing torch, DDP's set-up, a dataset's load, waiting for each other in the
  rendezvous), so only a quiet spell past ``STARTUP_QUIET_S`` counts, and the reading says
  so;
- which ranks a Flight Recorder verdict names (``waited_verdict``): never one a person holds
  (at a prompt, stopped, waiting for a debugger), and the wait is timed from the end of
  such a hold (its peers waited for the person, not for a hang);
- why a verdict given earlier no longer stands (``why_dropped``): a person holds a rank it
  names, a new attempt began, its evidence is gone (the ranks went on).

A rank a person holds is never quiet, silent or a suspect: while one is held, nobody is.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Final

__all__ = [
    "CADENCE_GAPS",
    "CADENCE_STEPS",
    "STARTUP_QUIET_S",
    "Quiet",
    "RankNow",
    "Waited",
    "every_rank_quiet",
    "has_cadence",
    "quiet_due",
    "waited_due",
    "waited_verdict",
    "why_dropped",
]

STARTUP_QUIET_S: Final = 30.0
"""How long every rank must be quiet to count as hung before each has a cadence."""
CADENCE_STEPS: Final = 2
"""Steps a rank's output reported (distinct ones) from which its cadence is known..."""
CADENCE_GAPS: Final = 5
"""... or gaps between its output batches (a few start-up lines are no cadence)."""
WAIT_MIN_S: Final = 2.0
"""The least a collective must have been waited in before its verdict names a rank."""


@dataclass(frozen=True, slots=True)
class RankNow:
    """One running rank as the watch sees it at a given time (times: wall-clock ns)."""

    rank: int
    last_ns: int | None
    """When its output last moved; None if it wrote nothing yet."""
    median_gap_s: float | None = None
    gaps: int = 0
    """Gaps between its output batches so far."""
    steps: int = 0
    """Distinct steps its output reported so far."""
    held: str = ""
    """How a person holds it now ("at a prompt", "stopped by SIGSTOP", "waiting for a
    debugger"); "" when nobody does."""
    released_ns: int | None = None
    """When a person's last hold of it ended (None: never held)."""


@dataclass(frozen=True, slots=True)
class Quiet:
    """Every rank quiet since ``since_ns``; ``startup``: before every rank had a cadence,
    so only past ``STARTUP_QUIET_S`` (the notice names it)."""

    since_ns: int
    startup: bool = False

    def words(self) -> str:
        """How the notice says it: "every rank is quiet" (and the start-up threshold)."""
        if not self.startup:
            return "every rank is quiet"
        return (f"every rank is quiet past the {STARTUP_QUIET_S:g} s start-up threshold "
                "(not every rank has a cadence yet)")


@dataclass(frozen=True, slots=True)
class Waited:
    """A verdict whose entered ranks have waited long enough for ``missing``."""

    key: object
    since_ns: int
    missing: tuple[int, ...]


def has_cadence(r: RankNow) -> bool:
    """Whether ``r``'s own rhythm is known: two steps, or ``CADENCE_GAPS`` batch gaps."""
    return r.steps >= CADENCE_STEPS or r.gaps >= CADENCE_GAPS


def _released(ranks: Iterable[RankNow]) -> int:
    """When the latest hold of any rank ended (0: none): its peers waited for it till then."""
    return max((r.released_ns or 0 for r in ranks), default=0)


def every_rank_quiet(
    ranks: Collection[RankNow], now_ns: int, *, factor: float, min_s: float
) -> Quiet | None:
    """When every rank's quiet spell began, if every one is quiet now (see the module
    docstring); None when one is not, one wrote nothing yet, or a person holds one."""
    if len(ranks) < 2 or any(r.held for r in ranks):
        return None
    startup = not all(has_cadence(r) for r in ranks)
    released = _released(ranks)
    starts = []
    for r in ranks:
        if r.last_ns is None:
            return None
        last = max(r.last_ns, released)
        need = max(min_s, factor * (r.median_gap_s or 0.0))
        if startup:
            need = max(need, STARTUP_QUIET_S)
        if (now_ns - last) / 1e9 < need:
            return None
        starts.append(last)
    return Quiet(max(starts), startup)


def quiet_due(ranks: Collection[RankNow], *, factor: float, min_s: float) -> int | None:
    """The first moment (wall-clock ns) at which ``every_rank_quiet`` answers if no rank's
    output moves and nobody's hold changes meanwhile; None when it cannot answer then
    (fewer than two ranks, one wrote nothing yet, a person holds one). The live watch looks
    again then, not before (unless something changes)."""
    if len(ranks) < 2 or any(r.held for r in ranks):
        return None
    startup = not all(has_cadence(r) for r in ranks)
    released = _released(ranks)
    due = 0
    for r in ranks:
        if r.last_ns is None:
            return None
        need = max(min_s, factor * (r.median_gap_s or 0.0))
        if startup:
            need = max(need, STARTUP_QUIET_S)
        due = max(due, max(r.last_ns, released) + _ns_for(need))
    return due


def _ns_for(seconds: float) -> int:
    """The fewest whole ns ``d`` with ``d / 1e9 >= seconds``: the test the rules make."""
    d = max(0, math.ceil(seconds * 1e9))
    while d / 1e9 < seconds:
        d += 1
    while d > 0 and (d - 1) / 1e9 >= seconds:
        d -= 1
    return d


def waited_due(
    verdicts: Iterable[tuple[object, int | None, Collection[int]]],
    ranks: Mapping[int, RankNow],
    now_ns: int,
    *,
    min_s: float,
) -> int | None:
    """The first moment after ``now_ns`` (wall-clock ns) at which a verdict that
    ``waited_verdict`` does not name yet will have waited long enough, if nothing changes
    meanwhile; None when none will."""
    if any(r.held for r in ranks.values()):
        return None
    released = _released(ranks.values())
    need = _ns_for(max(min_s, WAIT_MIN_S))
    due = None
    for _key, entered_ns, missing in verdicts:
        if not entered_ns or not any(r in ranks for r in missing):
            continue
        at = max(entered_ns, released) + need
        if at > now_ns and (due is None or at < due):
            due = at
    return due


def waited_verdict(
    verdicts: Iterable[tuple[object, int | None, Collection[int]]],
    ranks: Mapping[int, RankNow],
    now_ns: int,
    *,
    min_s: float,
) -> Waited | None:
    """The first verdict (key, when its ranks entered, the ranks that never did) whose
    missing ranks nobody holds and whose wait, timed from the end of the latest hold of
    any rank, has lasted ``max(min_s, WAIT_MIN_S)``; None when there is none."""
    if any(r.held for r in ranks.values()):
        return None  # its peers wait for a person
    released = _released(ranks.values())
    for key, entered_ns, missing in verdicts:
        if not entered_ns:
            continue
        since = max(entered_ns, released)
        named = tuple(r for r in missing if r in ranks)
        if named and (now_ns - since) / 1e9 >= max(min_s, WAIT_MIN_S):
            return Waited(key, since, named)
    return None


def why_dropped(
    named: Collection[int],
    attempt: int,
    now_attempt: int,
    held: Mapping[int, str],
    *,
    evidence: bool,
) -> str:
    """Why a live verdict naming ``named`` in ``attempt`` no longer stands ("": it does).

    Args:
        held: How a person holds each rank held now.
        evidence: Whether what it rests on still holds (every rank still quiet, the
            collective still waited in).
    """
    if now_attempt != attempt:
        return f"attempt {now_attempt} began"
    for r in sorted(named):
        if r in held:
            return f"rank {r} is {held[r]}: a person holds it"
    if held:
        r = min(held)
        return f"the ranks wait for rank {r} ({held[r]})"
    if not evidence:
        return "the ranks went on"
    return ""
