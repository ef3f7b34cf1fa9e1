"""Periodic readings on one beat: the run's background looks share one timer heap.

The stats sample, the live suspect's check, the status refresh and the like each used to
sleep on a thread of its own, each woken on a clock of its own: an idle supervisor of 8
sleeping ranks woke five threads several times a second. A ``Ticker`` now joins a ``Beat``,
one heap of deadlines on the monotonic clock. Deadlines sit on a grid of each ticker's own
interval, so tickers of 0.5 s and 1 s fall due together and cost one wake-up, not two.

A reading that knows when it next has something to look at says so: its tick returns that
moment (the first grid point at or after it is its next call), and ``Ticker.poke`` brings
the call forward to the next grid point when something it reads has changed. An idle run
then wakes for what must happen (status.json's refresh), not for looks that find nothing.

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

    ``tick`` may return the monotonic moment of its next call instead (None: one interval
    on): the first point of its grid at or after that moment, never before the next one.

    Args:
        name: What a failed tick is logged as.
        beat: The beat to join (the process's by default; tests give their own).
    """

    def __init__(self, name: str, interval_s: float, tick: Callable[[], float | None], *,
                 beat: Beat | None = None) -> None:
        if not interval_s > 0:
            raise ValueError(f"a ticker's interval must be positive, not {interval_s!r}")
        self.name = name
        self.interval_s = interval_s
        self._tick = tick
        self._beat = beat or _BEAT

    def start(self) -> None:
        """Join the beat: the first call comes one interval from now, on the grid."""
        self._beat.add(self)

    def stop(self) -> None:
        """Leave the beat; once this returns no call of ours runs or will run (unless it is
        called from inside our own tick, which then ends as usual)."""
        self._beat.remove(self)

    def poke(self) -> None:
        """Call us at the next point of our grid if our next call is later (from any
        thread; nothing once stopped): what the tick reads has changed."""
        self._beat.poke(self)

    def call(self) -> float | None:
        try:
            return self._tick()
        except Exception:  # noqa: BLE001 - see the module docstring
            log.exception("%s failed", self.name)
            return None


def next_on_grid(now: float, interval_s: float) -> float:
    """The first point of ``interval_s``'s grid after ``now``: tickers of commensurate
    intervals fall due at the same moments. Strictly after, whatever the floats do: on a
    point of the grid (a wake-up a hair early is moved onto one), ``now / interval_s`` can
    round below it (149.6 / 0.05 is 2991.9999999999995), and a next call at ``now`` itself
    had the beat put the same ticker back at the same moment for ever, its lock held."""
    k = math.floor(now / interval_s) + 1
    while k * interval_s <= now:
        k += 1
    return k * interval_s


def on_grid_from(at: float, interval_s: float) -> float:
    """The first point of ``interval_s``'s grid at or after ``at`` (not before it, whatever
    the floats do)."""
    k = math.ceil(at / interval_s)
    while k * interval_s < at:
        k += 1
    return k * interval_s


class Beat:
    """The tickers' timers in one heap, woken only when one is due.

    A beat runs its tickers on a thread of its own, or, given ``driver``, on a loop that
    drives it: the Supervisor's run loop (``engine.supervisor.monitor``) already sleeps in
    ``poll()`` on its ranks' exits and its wake-up pipe until its nearest deadline, so the
    run's readings ride that sleep (``next_due`` is one more deadline, ``run_due`` runs what
    fell due) instead of a thread and a clock of their own. ``driver`` wakes that loop when
    a deadline comes nearer (a ticker joins, one is poked), so that it sleeps no longer.
    """

    def __init__(self, name: str = "rankvisor-beat", *,
                 driver: Callable[[], None] | None = None) -> None:
        self._name = name
        self._driver = driver
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int, int, Ticker]] = []
        """(due, the ticker's order of joining, the entry's id, the ticker): tickers due
        together are called in the order they joined."""
        self._ids = itertools.count()
        self._order: dict[int, int] = {}
        self._entry: dict[int, tuple[int, float]] = {}
        """id(ticker) -> (its heap entry's id, when it is due): an entry of the heap is
        current only while it is here (a stopped or moved ticker's is dropped when it comes
        up)."""
        self._running: Ticker | None = None
        self._poked: set[int] = set()
        """The tickers poked during their own call: the call's answer does not move them."""
        self._thread: threading.Thread | None = None
        """The beat's own thread (none when driven)."""
        self._ticking: threading.Thread | None = None
        """The thread running ticks now: a ticker stopped from it never waits for itself."""

    def add(self, ticker: Ticker) -> None:
        with self._cond:
            if id(ticker) in self._entry:
                return
            self._order[id(ticker)] = next(self._ids)
            self._schedule(ticker, next_on_grid(clock.monotonic(), ticker.interval_s))
            if self._driver is None and self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()
            self._cond.notify_all()
        if self._driver is not None:
            self._driver()

    def remove(self, ticker: Ticker) -> None:
        on_beat = threading.current_thread() is self._ticking
        with self._cond:
            self._entry.pop(id(ticker), None)  # its heap entry is dropped when it comes up
            self._order.pop(id(ticker), None)
            self._poked.discard(id(ticker))
            self._cond.notify_all()
            if on_beat:
                return
            # Its call in progress (if any) ends before we return.
            self._cond.wait_for(lambda: self._running is not ticker, timeout=5.0)
            thread = self._thread if not self._entry else None
        if thread is not None:
            thread.join(5.0)  # no ticker left: the beat's thread is gone when we return

    def poke(self, ticker: Ticker) -> None:
        """``Ticker.poke``."""
        with self._cond:
            entry = self._entry.get(id(ticker))
            if entry is None:
                return  # stopped
            if self._running is ticker:
                self._poked.add(id(ticker))
            due = next_on_grid(clock.monotonic(), ticker.interval_s)
            if entry[1] <= due:
                return  # it comes as soon already
            self._drop_stale()
            nearer = not self._heap or due < self._heap[0][0]
            self._schedule(ticker, due)
            self._cond.notify_all()
        if nearer and self._driver is not None:
            self._driver()

    def next_due(self) -> float | None:
        """When the earliest ticker falls due (the monotonic clock); None: no ticker."""
        with self._cond:
            self._drop_stale()
            return self._heap[0][0] if self._heap else None

    def run_due(self, now: float) -> None:
        """Call every ticker due at ``now`` (a wake-up a hair early counts) and schedule
        each one's next call; from the driving loop's thread, never under its locks."""
        with self._cond:
            due, now = self._take_due(now)
        self._call(due, now)

    def _schedule(self, ticker: Ticker, due: float) -> None:
        """Make ``due`` the ticker's next call (its earlier entry goes stale); caller holds
        _cond."""
        key = next(self._ids)
        self._entry[id(ticker)] = (key, due)
        heapq.heappush(self._heap, (due, self._order[id(ticker)], key, ticker))

    def _drop_stale(self) -> None:
        while self._heap:
            _, _, key, ticker = self._heap[0]
            entry = self._entry.get(id(ticker))
            if entry is not None and entry[0] == key:
                return
            heapq.heappop(self._heap)  # stopped or moved since

    def _take_due(self, now: float) -> tuple[list[Ticker], float]:
        """The tickers due at ``now``, each put back one interval on, and the moment they
        are called for (``now``, or the deadline it came a hair early for); caller holds
        _cond."""
        self._drop_stale()
        if self._heap:
            # A timed wait may end a hair early: within a millisecond is due (else a second
            # wake-up for nothing).
            now = max(now, self._heap[0][0]) if self._heap[0][0] <= now + _EARLY_S else now
        due: list[Ticker] = []
        while self._heap and self._heap[0][0] <= now:
            _, _, key, ticker = heapq.heappop(self._heap)
            entry = self._entry.get(id(ticker))
            if entry is not None and entry[0] == key:
                due.append(ticker)
                self._schedule(ticker, next_on_grid(now, ticker.interval_s))
        return due, now

    def _call(self, due: list[Ticker], now: float) -> None:
        self._ticking = threading.current_thread()
        try:
            for ticker in due:
                with self._cond:
                    if id(ticker) not in self._entry:
                        continue  # stopped by an earlier tick of this pass
                    self._running = ticker
                at = None
                try:
                    at = ticker.call()
                finally:
                    with self._cond:
                        self._running = None
                        poked = id(ticker) in self._poked
                        self._poked.discard(id(ticker))
                        if at is not None and not poked and id(ticker) in self._entry:
                            later = max(on_grid_from(at, ticker.interval_s),
                                        next_on_grid(now, ticker.interval_s))
                            self._schedule(ticker, later)
                        self._cond.notify_all()
        finally:
            self._ticking = None

    def _run(self) -> None:
        while True:
            with self._cond:
                while True:
                    self._drop_stale()
                    if not self._heap:
                        self._thread = None
                        self._cond.notify_all()
                        return
                    due, now = self._take_due(clock.monotonic())
                    if due:
                        break
                    self._cond.wait(self._heap[0][0] - now)
            self._call(due, now)


_EARLY_S = 0.001
"""How early a wake-up may come and still count as due."""

_BEAT = Beat()
"""The process's beat: every ticker joins it unless told otherwise."""
