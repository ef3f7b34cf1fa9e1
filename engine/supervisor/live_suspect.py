"""A suspect while it hangs, before any timeout: ``LiveSuspect``.

A hang before gloo's or NCCL's timeout shows nothing but silence on every rank, so no rank
stands out and no rank has failed. When every live rank has been quiet well past its usual
cadence (``silence_factor`` times its own median gap between batches, at least
``silence_min_s``; ``STARTUP_QUIET_S`` before every rank has a cadence: they are still
starting up), or when the Flight Recorder shows a collective some ranks have waited in
that long while another never entered it (a heartbeat keeps the output moving), the watch
takes, once per quiet spell, a nonblocking py-spy dump (the ranks are never paused) and a
capture of the collectives, and names a live suspect with that evidence: the FR's verdict
first, else one rank's main thread outside any collective while the others wait in one.
The dumps are taken on a thread of their own (they take seconds; the check runs on the
run loop, beside the ranks' exits) and saved in the run dir; the suspect is the
Supervisor's ``live_suspect`` (in status.json while the run lasts) and a notice says it once.

The check looks when something could have changed, not every second: given the run's
events (``events``), it works out when its rules could next answer if nothing changes (the
moment every rank's quiet spell would be long enough, ``live_rule.quiet_due``; the moment a
Flight Recorder wait would have lasted long enough, ``waited_due``) and looks then, at the
first second of its grid at or after it, which is when a look every second would have
answered; any event of the run (output that moves, a rank held or let go, an exit, an
attempt) and any new Flight Recorder answer bring the look forward to the next second, as
the ranks going on ends a spell within a second. Where it must read files to see a hold (a
rank under ``--post-mortem``, ``--debugpy-wait``) or other nodes' readings, or without the
events, it looks every second as before.

Under ``--debugpy-wait`` each check also reads which ranks wait for a debugger (the marker
their bootstrap keeps beside error.json) and publishes ``RankDebuggerWait`` when that changes:
the pause log, ours and every viewer's, then holds such a rank as a person's, so it is
neither suspect nor straggler and its peers read "waiting for rank 0 (waiting for a
debugger)".
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from .. import clock
from ..events import (
    LIVE_SUSPECT_DROPPED_PREFIX,
    LIVE_SUSPECT_PREFIX,
    Event,
    RankDebuggerWait,
    RankStats,
    Suspect,
)
from ..forensics.live_rule import (
    Quiet,
    RankNow,
    Waited,
    every_rank_quiet,
    quiet_due,
    waited_due,
    waited_verdict,
    why_dropped,
)
from ..forensics.pauses import paused_words
from ..forensics.stack_evidence import outside_collective
from ..process.py_bootstrap import ENV_POST_MORTEM, debugger_wait_since
from ..states import RankState
from .collective_watch import CollectiveWatch
from .monitor import held_ranks
from .publisher import Publisher
from .stack_capture import StackCapture
from .state import RunState
from .ticker import Beat, Ticker

__all__ = ["LiveReading", "LiveSuspect", "held_now"]

log = logging.getLogger(__name__)

_TAKE_LIMIT_S = 8.0
"""The longest a stop waits for a spell's dumps (py-spy's 5 s and the collectives' 1 s)."""
LONGEST_LOOK_S = 60.0
"""The longest the check waits for a look while nothing it reads changes (a net under the
events: none should be missed, and one look a minute costs nothing)."""


@dataclass(frozen=True, slots=True)
class LiveReading:
    """The live suspect, if any, and the dumps it rests on."""

    suspect: Suspect | None
    since_ns: int
    """When the quiet spell (or the collective's wait) began."""
    dumps: tuple[str, ...] = field(default=())
    """The files taken for it (stacks, collectives)."""
    attempt: int = 0
    """The attempt it was read in: no reading outlives its attempt."""


class LiveSuspect:
    """The watch thread; ``reading`` is its latest answer (None outside a quiet spell)."""

    def __init__(
        self, state: RunState, stacks: StackCapture, collectives: CollectiveWatch | None,
        say: Callable[[str], None], *, silence_factor: float, silence_min_s: float,
        interval_s: float = 1.0, debugger_waits: Publisher | None = None,
        beat: Beat | None = None, events: Publisher | None = None,
    ) -> None:
        self._state = state
        self._debugger_events = debugger_waits
        """Where ``RankDebuggerWait`` goes (None: no rank can wait for a debugger)."""
        self._debugger: dict[int, float] = {}
        """The ranks seen waiting for a debugger, and since when."""
        self._stacks = stacks
        self._collectives = collectives
        self._say = say
        self._factor = silence_factor
        self._min_s = silence_min_s
        self._ticker = Ticker("rankvisor-live-suspect", interval_s, self._check, beat=beat)
        self.start = self._ticker.start
        self._lazy = events is not None and debugger_waits is None
        """Whether the check may wait for a change (see the module docstring)."""
        if self._lazy:
            assert events is not None
            events.subscribe(self._heard)
            if collectives is not None:
                collectives.on_change(self._ticker.poke)
        self._spell: object = None
        self._files = False
        """Whether a hold or a reading the check uses comes without an event (a file to
        read each time: a post-mortem hold; other nodes' readings)."""
        self.reading: LiveReading | None = None
        self._taking: threading.Thread | None = None
        """The dumps of a spell under way, off the beat (py-spy and the Flight Recorder
        take seconds; the run loop must not wait for them)."""

    def stop(self) -> None:
        """No check runs or will run once this returns, nor dumps of one."""
        self._ticker.stop()
        taking = self._taking
        if taking is not None:
            taking.join(_TAKE_LIMIT_S)

    def _heard(self, event: Event) -> None:
        """A sink of the run's events: something the check reads may have changed (a
        stats sample changes nothing it reads)."""
        if not isinstance(event, RankStats):
            self._ticker.poke()

    def _now(self, now_ns: int) -> tuple[_Run | None, dict[int, int]]:
        """The running ranks as the rules read them (None: the run is not one to watch:
        ended, failed, stopping, fewer than two running), and their pids."""
        state = self._state
        with state.lock:
            live = [s for s in state.live() if s.state is RankState.RUNNING and s.proc]
            # A post-mortem hold is read from its file, other nodes' readings come from
            # theirs: neither sends an event.
            self._files = any(ENV_POST_MORTEM in s.env for s in state.live()) or (
                self._collectives is not None and self._collectives.remote is not None)
            if len(live) < 2 or state.finished is not None or state.shutting_down:
                return None, {}
            if state.real_failure:
                return None, {}
            pids = {state.shown(s.rank): s.proc.pid for s in live if s.proc is not None}
            paused = held_now(state)
            released = state.pauses.released()
            readings = [state.activity.reading(s.rank, until_ns=now_ns) for s in live]
            attempt = state.attempt
        ranks = {
            state.shown(a.rank): RankNow(
                state.shown(a.rank), a.last_ns, a.median_gap_s, a.gaps, a.steps,
                paused.get(a.rank, ""), released.get(a.rank),
            )
            for a in readings
        }
        return _Run(attempt, ranks), pids

    def _waited(self, run: _Run, now_ns: int) -> tuple[Waited | None, int | None]:
        """A FR verdict whose entered ranks have waited long enough (``waited_verdict``),
        and when the next one will have (``waited_due``)."""
        if self._collectives is None:
            return None, None
        # Every node's ranks (``job_verdicts``): a rank of another node is named too, and one
        # a person holds there holds this node's verdicts as a local one does.
        ranks = dict(run.ranks)
        remote, held = self._collectives.remote_now()
        for reading in remote:
            ranks.setdefault(reading.rank, RankNow(reading.rank, None,
                                                   held=held.get(reading.rank, "")))
        told = [((v.pg, v.seq, v.missing), v.entered_ns, v.missing)
                for v in self._collectives.job_verdicts()]
        return (waited_verdict(told, ranks, now_ns, min_s=self._min_s),
                waited_due(told, ranks, now_ns, min_s=self._min_s))

    def _note_debugger_waits(self) -> None:
        """Publish each rank that began or stopped waiting for a debugger."""
        events = self._debugger_events
        if events is None:
            return
        state = self._state
        with state.lock:
            waits = {s.rank: since for s in state.live()
                     if (since := debugger_wait_since(s.error_file, s.pid)) is not None}
            changed = [RankDebuggerWait(r, since, state.attempt) for r, since in waits.items()
                       if self._debugger.get(r) != since]
            changed += [RankDebuggerWait(r, None, state.attempt)
                        for r in self._debugger.keys() - waits.keys()]
            self._debugger = waits
            for event in changed:
                events.emit(event)
        if changed:
            events.flush()

    def _check(self) -> float | None:
        """One look; returns when the next is needed (the monotonic clock; None: in one
        interval)."""
        self._note_debugger_waits()
        now = clock.wall_ns()
        now_mono = clock.monotonic()
        run, pids = self._now(now)
        if run is None:
            # The run ended or failed: the last live reading stays, for its attempt only.
            attempt = self._state.attempt
            if self.reading is not None and self.reading.attempt != attempt:
                self._drop(f"attempt {attempt} began")
            return self._next(now, now_mono, None)
        quiet = every_rank_quiet(run.ranks.values(), now, factor=self._factor, min_s=self._min_s)
        waited, waited_at = self._waited(run, now)
        # Nothing changing, the rules answer next at ``due``; a spell in force lasts till a
        # change (an event).
        due = waited_at
        if quiet is None:
            quiet_at = quiet_due(run.ranks.values(), factor=self._factor, min_s=self._min_s)
            if quiet_at is not None and (due is None or quiet_at < due):
                due = quiet_at
        if self.reading is not None:
            named = self.reading.suspect.ranks if self.reading.suspect is not None else ()
            why = why_dropped(
                named, self.reading.attempt, run.attempt,
                {r: n.held for r, n in run.ranks.items() if n.held},
                evidence=quiet is not None or waited is not None,
            )
            if why:
                self._drop(why)
        if quiet is None and waited is None:
            self._spell = None
            return self._next(now, now_mono, due)
        if waited is not None:
            key: object = waited.key
        else:
            assert quiet is not None
            key = ("quiet", quiet.since_ns)
        if key == self._spell:
            return self._next(now, now_mono, due)
        if self._taking is not None and self._taking.is_alive():
            return None  # the last spell's dumps are still being taken: this one's come next
        self._spell = key
        since = min(t for t in (quiet.since_ns if quiet else None,
                                waited.since_ns if waited else None) if t)
        self._taking = threading.Thread(
            target=self._take_quietly, args=(key, pids, since, run.attempt, quiet),
            name="rankvisor-live-dumps", daemon=True)
        self._taking.start()
        return None  # a look in a second: the dumps may still be under way then

    def _next(self, now_ns: int, now_mono: float, due_ns: int | None) -> float | None:
        """When to look next: at ``due_ns`` (wall clock) if nothing changes before, on the
        monotonic clock the beat keeps; None (in one interval) where a change may come
        without an event (see the module docstring)."""
        if not self._lazy or self._files:
            return None
        if self._taking is not None and self._taking.is_alive():
            return None
        wait_ns = LONGEST_LOOK_S * 1e9
        if due_ns is not None:
            wait_ns = min(wait_ns, due_ns - now_ns)
        return now_mono + wait_ns / 1e9

    def _take_quietly(self, key: object, pids: dict[int, int], since: int, attempt: int,
                      quiet: Quiet | None) -> None:
        try:
            self._take(key, pids, since, attempt, quiet)
        except Exception:  # noqa: BLE001 - a reading never touches the run
            log.exception("the live suspect's dumps failed")

    def _drop(self, why: str) -> None:
        """The reading's evidence is gone: forget it, and say so if it named a rank."""
        reading, self.reading, self._spell = self.reading, None, None
        if reading is not None and reading.suspect is not None:
            self._say(f"{LIVE_SUSPECT_DROPPED_PREFIX}rank "
                      f"{reading.suspect.rank}: {why}")

    def _take(self, key: object, pids: dict[int, int], since: int, attempt: int,
              quiet: Quiet | None) -> None:
        dumps = []
        # Nobody waits on this reading: one rank after another, on this thread alone.
        dump = self._stacks.dump(pids, nonblocking=True, timeout_s=5.0,
                                 reason="live: every rank quiet", workers=1)
        if dump.path:
            dumps.append(dump.path)
        verdicts = []
        if self._collectives is not None:
            path = self._collectives.capture("live: every rank quiet", timeout_s=1.0)
            if path:
                dumps.append(path)
            verdicts = self._collectives.job_verdicts()
        state = self._state
        with state.lock:
            held = {state.shown(r) for r in held_now(state)}
        if self._collectives is not None:
            held |= set(self._collectives.remote_now()[1])
        suspect = None
        missing = [(r, v) for v in verdicts for r in v.missing if r not in held]
        if missing:
            rank, v = missing[0]
            words = tuple(v.suspect_words(r) for r, v in missing)
            suspect = Suspect(rank=rank, reason="; also ".join(words) + " (live, still hanging)",
                              ranks=tuple(r for r, _ in missing), evidence=words,
                              kind="collective")
        else:
            odd = outside_collective(dump)
            if odd is not None and odd.rank not in held:
                suspect = Suspect(rank=odd.rank, reason=odd.words() + " (live, still hanging)",
                                  ranks=(odd.rank,), evidence=(odd.words(),), kind="stack")
        if self._spell != key:
            return  # the spell ended while its dumps were taken: they name nobody now
        self.reading = LiveReading(suspect, since, tuple(dumps), attempt)
        taken = f" (dumps: {', '.join(dumps)})" if dumps else ""
        if suspect is not None:
            self._say(f"{LIVE_SUSPECT_PREFIX}{suspect.reason}{taken}")
        else:
            quiet_words = quiet.words() if quiet is not None else "every rank is quiet"
            self._say(f"{quiet_words}; no rank stands out{taken}")


def held_now(state: RunState) -> dict[int, str]:
    """The local ranks a person holds now, each with how: at a prompt, stopped, or waiting
    for a debugger to attach (the pause log), at its post-mortem prompt (its debug hold);
    caller holds the lock."""
    held = {r: paused_words(p) for r, p in state.pauses.paused().items()}
    for r in held_ranks(state):
        held.setdefault(r, "at its post-mortem prompt")
    return held


@dataclass(frozen=True, slots=True)
class _Run:
    attempt: int
    ranks: dict[int, RankNow]
