"""Periodic readings on one beat: the run's background looks share one timer heap.

The stats sample (1 s), the live suspect's check, the status refresh and the like each used
to sleep on a thread of its own, each woken on a clock of its own: an idle supervisor of 8
sleeping ranks woke five threads several times a second. A ``Ticker`` now joins a ``Beat``,
one heap of deadlines on the monotonic clock. Deadlines sit on a grid of each ticker's own
interval, so tickers of 0.5 s and 1 s fall due together and cost one wake-up, not two.

A Supervisor's beat has no thread: its run loop (``monitor.Monitor``) drives it, sleeping
until the nearest of its ranks' exits, its escalation deadlines and its readings. Elsewhere
(the stats of a torchrun job that rankvisor watches) the process's beat runs on a thread of
its own that exists only while a ticker is registered.

A tick must be short (a few milliseconds: a /proc read, a look at the activity): one that
blocks delays every other ticker, and on a run loop the ranks' exits too, so a reading that
waits on something outside (a socket, py-spy) hands its work to a thread of its own. A call that
raises is logged and the next one comes as usual: a reading never touches the run.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import math
import threading
from collections.abc import Callable

from .. import clock

__all__ = ["Beat", "Ticker"]

log = logging.getLogger(__name__)


class Ticker:
    """Calls ``tick`` every ``interval_s`` seconds from ``start`` until ``stop``.

    Args:
        name: What a failed tick is logged as (and the thread's name with ``own_thread``).
        own_thread: A thread of its own instead of the beat (a tick that may block).
        beat: The beat to join (the process's by default; tests give their own).
    """

    def __init__(self, name: str, interval_s: float, tick: Callable[[], None], *,
                 own_thread: bool = False, beat: Beat | None = None) -> None:
        if not interval_s > 0:
            raise ValueError(f"a ticker's interval must be positive, not {interval_s!r}")
        self.name = name
        self.interval_s = interval_s
        self._tick = tick
        # A thread of its own ticks between the beat's: at the same moments, the two would
        # wake together and hand the GIL to each other, a wake-up each time.
        self._beat = Beat(name, phase=0.5) if own_thread else (beat or _BEAT)

    def start(self) -> None:
        """Join the beat: the first call comes one interval from now, on the grid."""
        self._beat.add(self)

    def stop(self) -> None:
        """Leave the beat; once this returns no call of ours runs or will run (unless it is
        called from inside our own tick, which then ends as usual)."""
        self._beat.remove(self)

    def call(self) -> None:
        try:
            self._tick()
        except Exception:  # noqa: BLE001 - see the module docstring
            log.exception("%s failed", self.name)


def next_on_grid(now: float, interval_s: float, phase: float = 0.0) -> float:
    """The first point of ``interval_s``'s grid after ``now`` (shifted by ``phase`` of an
    interval): tickers of commensurate intervals fall due at the same moments."""
    shift = phase * interval_s
    return (math.floor((now - shift) / interval_s) + 1) * interval_s + shift


class Beat:
    """The tickers' timers in one heap, woken only when one is due.

    A beat runs its tickers on a thread of its own, or, given ``driver``, on a loop that
    drives it: the Supervisor's run loop (``engine.supervisor.monitor``) already sleeps in
    ``poll()`` on its ranks' exits and its wake-up pipe until its nearest deadline, so the
    run's readings ride that sleep (``next_due`` is one more deadline, ``run_due`` runs what
    fell due) instead of a thread and a clock of their own. ``driver`` wakes that loop when
    a ticker joins, so that it sleeps no longer than the new ticker's first deadline.
    """

    def __init__(self, name: str = "rankvisor-beat", phase: float = 0.0, *,
                 driver: Callable[[], None] | None = None) -> None:
        self._name = name
        self._phase = phase
        self._driver = driver
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int, Ticker]] = []
        self._live: dict[int, Ticker] = {}
        self._ids = itertools.count()
        self._key: dict[int, int] = {}  # id(ticker) -> its heap id
        self._running: Ticker | None = None
        self._thread: threading.Thread | None = None
        """The beat's own thread (none when driven)."""
        self._ticking: threading.Thread | None = None
        """The thread running ticks now: a ticker stopped from it never waits for itself."""

    def add(self, ticker: Ticker) -> None:
        with self._cond:
            if id(ticker) in self._key:
                return
            key = next(self._ids)
            self._key[id(ticker)] = key
            self._live[key] = ticker
            due = next_on_grid(clock.monotonic(), ticker.interval_s, self._phase)
            heapq.heappush(self._heap, (due, key, ticker))
            if self._driver is None and self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()
            self._cond.notify_all()
        if self._driver is not None:
            self._driver()

    def remove(self, ticker: Ticker) -> None:
        on_beat = threading.current_thread() is self._ticking
        with self._cond:
            key = self._key.pop(id(ticker), None)
            if key is not None:
                self._live.pop(key, None)  # its heap entry is dropped when it comes up
            self._cond.notify_all()
            if on_beat:
                return
            # Its call in progress (if any) ends before we return.
            self._cond.wait_for(lambda: self._running is not ticker, timeout=5.0)
            thread = self._thread if not self._live else None
        if thread is not None:
            thread.join(5.0)  # no ticker left: the beat's thread is gone when we return

    def next_due(self) -> float | None:
        """When the earliest ticker falls due (the monotonic clock); None: no ticker."""
        with self._cond:
            self._drop_removed()
            return self._heap[0][0] if self._heap else None

    def run_due(self, now: float) -> None:
        """Call every ticker due at ``now`` (a wake-up a hair early counts) and schedule
        each one's next call; from the driving loop's thread, never under its locks."""
        with self._cond:
            due = self._take_due(now)
        self._call(due)

    def _drop_removed(self) -> None:
        while self._heap and self._heap[0][1] not in self._live:
            heapq.heappop(self._heap)  # removed since

    def _take_due(self, now: float) -> list[Ticker]:
        """The tickers due at ``now``, each put back one interval on; caller holds _cond."""
        self._drop_removed()
        if self._heap:
            # A timed wait may end a hair early: within a millisecond is due (else a second
            # wake-up for nothing).
            now = max(now, self._heap[0][0]) if self._heap[0][0] <= now + _EARLY_S else now
        due: list[Ticker] = []
        while self._heap and self._heap[0][0] <= now:
            _, key, ticker = heapq.heappop(self._heap)
            if key in self._live:
                due.append(ticker)
                heapq.heappush(self._heap, (next_on_grid(now, ticker.interval_s, self._phase),
                                            key, ticker))
        return due

    def _call(self, due: list[Ticker]) -> None:
        self._ticking = threading.current_thread()
        try:
            for ticker in due:
                with self._cond:
                    if id(ticker) not in self._key:
                        continue  # stopped by an earlier tick of this pass
                    self._running = ticker
                try:
                    ticker.call()
                finally:
                    with self._cond:
                        self._running = None
                        self._cond.notify_all()
        finally:
            self._ticking = None

    def _run(self) -> None:
        while True:
            with self._cond:
                while True:
                    self._drop_removed()
                    if not self._heap:
                        self._thread = None
                        self._cond.notify_all()
                        return
                    now = clock.monotonic()
                    due = self._take_due(now)
                    if due:
                        break
                    self._cond.wait(self._heap[0][0] - now)
            self._call(due)


_EARLY_S = 0.001
"""How early a wake-up may come and still count as due."""

_BEAT = Beat()
"""The process's beat: every ticker joins it unless told otherwise."""
