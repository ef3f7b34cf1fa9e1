"""A suspect while it hangs, before any timeout: ``LiveSuspect``.

A hang before gloo's or NCCL's timeout shows nothing but silence on every rank, so no rank
stands out and no rank has failed. When every live rank has been quiet well past its usual
cadence (``silence_factor`` times its own median gap between batches, at least
``silence_min_s``; ``STARTUP_QUIET_S`` for a rank without a cadence yet, one still starting
up), or when the Flight Recorder shows a collective some ranks have waited in
that long while another never entered it (a heartbeat keeps the output moving), the watch
takes, once per quiet spell, a nonblocking py-spy dump (the ranks are never paused) and a
capture of the collectives, and names a live suspect with that evidence: the FR's verdict
first, else one rank's main thread outside any collective while the others wait in one.
Both dumps are saved in the run dir; the suspect is the Supervisor's ``live_suspect`` (in
status.json while the run lasts) and a notice says it once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

from .. import clock
from ..events import LIVE_SUSPECT_PREFIX, Suspect
from ..forensics.stack_evidence import outside_collective
from ..states import RankState
from .collective_watch import CollectiveWatch
from .stack_capture import StackCapture
from .state import RunState
from .ticker import Ticker

__all__ = ["LiveReading", "LiveSuspect"]

STARTUP_QUIET_S: Final = 30.0
"""How long a rank that has not yet written with a cadence must be quiet to count as hung."""
_CADENCE_GAPS: Final = 2
"""Gaps between batches from which a rank's own cadence is known."""


@dataclass(frozen=True, slots=True)
class LiveReading:
    """The live suspect, if any, and the dumps it rests on."""

    suspect: Suspect | None
    since_ns: int
    """When the quiet spell (or the collective's wait) began."""
    dumps: tuple[str, ...] = field(default=())
    """The files taken for it (stacks, collectives)."""


class LiveSuspect:
    """The watch thread; ``reading`` is its latest answer (None outside a quiet spell)."""

    def __init__(
        self, state: RunState, stacks: StackCapture, collectives: CollectiveWatch | None,
        say: Callable[[str], None], *, silence_factor: float, silence_min_s: float,
        interval_s: float = 0.5,
    ) -> None:
        self._state = state
        self._stacks = stacks
        self._collectives = collectives
        self._say = say
        self._factor = silence_factor
        self._min_s = silence_min_s
        self._ticker = Ticker("rankvisor-live-suspect", interval_s, self._check)
        self.start, self.stop = self._ticker.start, self._ticker.stop
        self._spell: object = None
        self.reading: LiveReading | None = None

    def _quiet_since(self, now_ns: int) -> tuple[int | None, dict[int, int]]:
        """When every live rank's quiet spell began (None: one is not quiet), and pids."""
        state = self._state
        with state.lock:
            live = [s for s in state.live() if s.state is RankState.RUNNING and s.proc]
            if len(live) < 2 or state.finished is not None or state.shutting_down:
                return None, {}
            if state.pauses.paused() or state.real_failure:
                return None, {}
            pids = {state.shown(s.rank): s.proc.pid for s in live if s.proc is not None}
            readings = [state.activity.reading(s.rank, until_ns=now_ns) for s in live]
        starts = []
        for a in readings:
            if a.last_ns is None:
                return None, pids
            need = max(self._min_s, self._factor * (a.median_gap_s or 0.0))
            if a.gaps < _CADENCE_GAPS:
                # No cadence yet: a rank still starting up (importing torch, waiting for its
                # peers in the rendezvous) is quiet for seconds at a time, and is no hang.
                need = max(need, STARTUP_QUIET_S)
            if (now_ns - a.last_ns) / 1e9 < need:
                return None, pids
            starts.append(a.last_ns)
        return max(starts), pids

    def _waited_verdict(self, now_ns: int) -> tuple[object, int] | None:
        """A FR verdict whose entered ranks have waited ``silence_min_s``: (key, since)."""
        if self._collectives is None:
            return None
        for v in self._collectives.verdicts():
            since = v.entered_ns
            if since and (now_ns - since) / 1e9 >= max(self._min_s, 2.0):
                return (v.pg, v.seq, v.missing), since
        return None

    def _check(self) -> None:
        now = clock.wall_ns()
        quiet, pids = self._quiet_since(now)
        waited = self._waited_verdict(now) if pids else None
        if quiet is None and waited is None:
            if self.reading is not None and not pids:
                return  # the run ended or failed: the last live reading stays
            if quiet is None and waited is None and self._spell is not None:
                self._spell = None
                self.reading = None
            return
        key = waited[0] if waited is not None else ("quiet", quiet)
        if key == self._spell:
            return
        self._spell = key
        self._take(pids, min(t for t in (quiet, waited[1] if waited else None) if t))

    def _take(self, pids: dict[int, int], since: int) -> None:
        dumps = []
        dump = self._stacks.dump(pids, nonblocking=True, timeout_s=5.0,
                                 reason="live: every rank quiet")
        if dump.path:
            dumps.append(dump.path)
        verdicts = []
        if self._collectives is not None:
            path = self._collectives.capture("live: every rank quiet", timeout_s=1.0)
            if path:
                dumps.append(path)
            verdicts = self._collectives.verdicts()
        suspect = None
        missing = [(r, v) for v in verdicts for r in v.missing]
        if missing:
            rank, v = missing[0]
            words = tuple(v.suspect_words(r) for r, v in missing)
            suspect = Suspect(rank=rank, reason="; also ".join(words) + " (live, still hanging)",
                              ranks=tuple(r for r, _ in missing), evidence=words,
                              kind="collective")
        else:
            odd = outside_collective(dump)
            if odd is not None:
                suspect = Suspect(rank=odd.rank, reason=odd.words() + " (live, still hanging)",
                                  ranks=(odd.rank,), evidence=(odd.words(),), kind="stack")
        self.reading = LiveReading(suspect, since, tuple(dumps))
        taken = f" (dumps: {', '.join(dumps)})" if dumps else ""
        if suspect is not None:
            self._say(f"{LIVE_SUSPECT_PREFIX}{suspect.reason}{taken}")
        else:
            self._say(f"every rank is quiet; no rank stands out{taken}")
