"""The ranks' stdin under ``--stdin pipe``: lines sent to them, and which of them wait for one.

``send``/``close`` carry out ``SendInput``/``CloseInput`` for the command handler (state lock
held): each line goes whole into the rank's pipe (``engine.process.stdin_pipe``) or is
refused with the reason, and a line that went is a ``RankInput`` event and an entry of the
incarnation's ``stdin.log``. A line that went also ends the rank's wait: it is answered, and
the rank is busy with it until it reads again.

The watch passes every ``interval`` seconds over every live rank with an open pipe
(``engine.process.input_probe``) and publishes ``RankInputWait`` when a rank starts or stops
waiting, or when what it asks changes; what it asks is read from the ends of its log files
(``engine.output.prompt``). To stay cheap with many ranks, a pass looks at a rank's main
thread only if the rank may have begun to read: it wrote lately or ends in an unfinished
line (a prompt), else at every ``quiet_every``-th pass; every thread and its children at
every ``deep_every``-th pass (staggered across ranks), and at each pass while it waits.
The passes are one of the run's periodic readings: a ticker on the run loop's beat
(``ticker.py``), not a thread of its own.
"""

from __future__ import annotations

import logging
import os
import threading

from .. import clock
from ..events import Event, InputWait, RankInput, RankInputWait, RankOutput
from ..forensics.redaction import HIDDEN, asks_secret
from ..logfile.stdin_log import StdinEntry, append_entry, stdin_log_path
from ..output.prompt import read_prompt
from ..process.input_probe import StdinProbe
from ..process.stdin_pipe import StdinRefused
from .publisher import Publisher
from .rank_slot import RankSlot
from .state import RunState
from .ticker import Beat, Ticker

__all__ = ["InputWatch"]


class _Target:
    """One watched incarnation: what a pass needs, without taking the state lock."""

    __slots__ = ("answers", "attempt", "err", "inode", "moved", "out", "partial", "pid", "rank",
                 "sizes", "wait")

    def __init__(self, rank: int, pid: int, inode: int, attempt: int, out: str,
                 err: str) -> None:
        self.rank, self.pid, self.inode, self.attempt = rank, pid, inode, attempt
        self.out, self.err = out, err
        self.moved = clock.monotonic()  # just started: looked at closely at first
        self.partial = False
        self.wait: InputWait | None = None
        self.sizes: tuple[int, int] | None = None
        """The sizes of its two log files when its current wait was last read."""
        self.answers = 0
        """Lines sent to it so far: a change found before the latest one is not applied."""

log = logging.getLogger(__name__)

DEFAULT_INTERVAL_S = 0.25
"""A wait is seen within this (plus the look itself): the goal is half a second."""
UNWATCHED_INTERVAL_S = 2.0
"""The pace while nobody is attached (``Supervisor.viewers``): nobody could answer a wait
then, and the first viewer to attach gets a pass at once."""
DEFAULT_DEEP_EVERY = 40
"""Every thread and child of a rank is looked at once in this many passes (10 s): reading a
torch rank's dozens of threads at every pass would cost more than the whole watch may."""
DEFAULT_QUIET_EVERY = 8
"""A rank whose output has not moved lately and ends in a complete line (no prompt) is
looked at once in this many passes (2 s). A rank about to ask something nearly always
writes first (pdb's location and "(Pdb) ", input()'s prompt): that one is looked at every
pass."""
RECENT_OUTPUT_S = 2.0
"""Output this recent (a prompt, pdb's location) makes a rank looked at every pass."""


class InputWatch:
    """The input side of a run's ranks: sending, closing, and the "waiting for input" watch."""

    def __init__(
        self, state: RunState, events: Publisher, *, interval: float = DEFAULT_INTERVAL_S,
        deep_every: int = DEFAULT_DEEP_EVERY, quiet_every: int = DEFAULT_QUIET_EVERY,
        beat: Beat | None = None,
    ) -> None:
        self._state = state
        self._events = events
        self._interval = interval
        self._deep_every = max(1, deep_every)
        self._quiet_every = max(1, quiet_every)
        self._every_s = (self._deep_every * interval, self._quiet_every * interval)
        """How often, in seconds, a rank is looked at deeply and a quiet rank at all: the
        same whatever the pace (``pace``)."""
        self._beat = beat
        self._ticker: Ticker | None = None
        self._stopped = False
        self._look_lock = threading.Lock()
        """One pass at a time (the beat's, and the one a pace change asks at once)."""
        self._probe = StdinProbe()
        self._targets: dict[int, _Target] = {}
        """The ranks to watch, by rank: changed under the state lock, read by a pass."""
        self._busy: dict[int, None] = {}
        """Ranks whose output moved lately or ends unfinished: looked at every pass."""
        self._waiting: dict[int, None] = {}
        """Ranks waiting now: looked at (closely) every pass."""
        events.subscribe(self._output)
        self.passes = 0
        """How many passes the watch has made (for tests and the benchmark)."""

    # -- commands (the caller holds the state lock) -----------------------------------------

    def send(self, slot: RankSlot, text: str) -> None:
        """Write ``text`` and a newline to the rank's pipe; record and publish it.

        Raises:
            StdinRefused: the line did not go (the message says why).
        """
        pipe = slot.stdin
        if pipe is None:
            raise StdinRefused("it has no stdin pipe")
        pipe.send(text.encode("utf-8", "surrogateescape") + b"\n")
        # A password asked for without a terminal (getpass reads the pipe): not kept or shown.
        # The prompt is read now when the watch has not seen the rank wait yet.
        wait = slot.input_wait
        secret = asks_secret(wait.prompt if wait is not None
                             else read_prompt(slot.stdout_path, slot.stderr_path)[0])
        self._record(slot, StdinEntry(clock.wall(), HIDDEN if secret else text))

    def close(self, slot: RankSlot) -> None:
        """Close the rank's stdin: it reads EOF once it has read what was sent."""
        pipe = slot.stdin
        if pipe is None or pipe.closed:
            raise StdinRefused("its stdin is closed already")
        pipe.close()
        self._record(slot, StdinEntry(clock.wall(), eof=True))

    def _record(self, slot: RankSlot, entry: StdinEntry) -> None:
        path = stdin_log_path(slot.stdout_path)
        if path:
            try:
                append_entry(path, entry)
            except OSError as e:  # a full disk: the line went; the log says it could not
                self._events.notice(f"rank {self._state.shown(slot.rank)}: could not write "
                                    f"{path}: {e.strerror or e}", "warning")
        self._events.emit(RankInput(slot.rank, entry.text, entry.t, slot.attempt, entry.eof))
        if entry.eof:
            self.ended(slot)
        else:
            self.answered(slot)

    def started(self, slot: RankSlot) -> None:
        """A process of the rank started with a pipe: watch it (state lock held)."""
        if slot.proc is not None and slot.stdin is not None:
            self._targets[slot.rank] = _Target(
                slot.rank, slot.proc.pid, slot.stdin.inode, slot.attempt, slot.stdout_path,
                slot.stderr_path,
            )
            self._busy[slot.rank] = None  # just started: looked at closely at first

    def answered(self, slot: RankSlot) -> None:
        """The rank stopped waiting (a line went to it): say so (state lock held)."""
        target = self._targets.get(slot.rank)
        if target is not None:
            target.wait = None
            target.sizes = None
            target.answers += 1  # a look begun before this answer is out of date
        self._waiting.pop(slot.rank, None)
        if slot.input_wait is not None:
            slot.input_wait = None
            self._events.emit(RankInputWait(slot.rank, None, slot.attempt))

    def ended(self, slot: RankSlot) -> None:
        """The rank's process is gone, or its stdin closed: watch it no more."""
        self._targets.pop(slot.rank, None)
        self.answered(slot)

    # -- the watch ---------------------------------------------------------------------------

    def start(self) -> None:
        """Pass every ``interval`` seconds, on the beat (idempotent)."""
        with self._look_lock:
            if self._ticker is None and not self._stopped:
                self._ticker = Ticker("rankvisor-input", self._interval, self._look_quietly,
                                      beat=self._beat)
                self._ticker.start()

    def pace(self, interval: float) -> None:
        """A pass every ``interval`` seconds from now on, the first at once (a viewer who
        just attached sees who waits); quiet and deep looks keep their pace in seconds."""
        deep_s, quiet_s = self._every_s
        self._interval = interval
        self._deep_every = max(1, round(deep_s / interval))
        self._quiet_every = max(1, round(quiet_s / interval))
        with self._look_lock:
            ticker, self._ticker = self._ticker, None
        if ticker is None:
            return  # not started: the start takes the new pace
        ticker.stop()
        self.start()
        self._look_quietly()

    @property
    def interval(self) -> float:
        """Seconds between passes now."""
        return self._interval

    def stop(self) -> None:
        """No pass runs or will run once this returns."""
        with self._look_lock:
            self._stopped = True
            ticker, self._ticker = self._ticker, None
        if ticker is not None:
            ticker.stop()
        with self._look_lock:
            self._probe.close()

    def _look_quietly(self) -> None:
        try:
            with self._look_lock:
                if not self._stopped:
                    self.look()
        except Exception:  # noqa: BLE001 - a view of the ranks must not end the run
            log.exception("input watch pass failed")

    def look(self) -> None:
        """One pass over the live ranks with an open pipe that may have begun to read."""
        self.passes += 1
        n = self.passes
        now = clock.monotonic()
        count = len(self._state.slots)
        quiet, deep_every = self._quiet_every, self._deep_every
        deep_ranks = range(n % deep_every, count, deep_every)
        ranks = {*self._busy, *self._waiting, *range(n % quiet, count, quiet), *deep_ranks}
        changes: list[tuple[_Target, int, InputWait | None]] = []
        for rank in sorted(ranks):
            t = self._targets.get(rank)
            if t is None:
                continue
            if rank in self._busy and not t.partial and now - t.moved >= RECENT_OUTPUT_S:
                self._busy.pop(rank, None)
                if t.moved > now:  # it wrote again just now: busy still
                    self._busy[rank] = None
            wait, answers = t.wait, t.answers
            deep = wait is not None or rank in deep_ranks
            if not self._probe.waiting(t.pid, t.inode, deep=deep):
                if wait is not None:
                    changes.append((t, answers, None))
                continue
            sizes = (_size(t.out), _size(t.err))
            if wait is not None and t.sizes == sizes:
                continue  # waiting still, and it wrote nothing since we read its prompt
            prompt, where = read_prompt(t.out, t.err)
            t.sizes = sizes
            if wait is None:
                changes.append((t, answers, InputWait(clock.wall(), prompt, where)))
            elif (prompt, where) != (wait.prompt, wait.where):
                changes.append((t, answers, InputWait(wait.since, prompt, where)))
        if n % deep_every == 0:
            live = {t.pid for t in list(self._targets.values())}
            for pid in self._probe.pids() - live:
                self._probe.forget(pid)
        if changes:
            self._apply(changes)

    def _output(self, event: Event) -> None:
        """A sink: when each rank's output last moved, and whether it ends unfinished."""
        if type(event) is RankOutput and event.stream in ("stdout", "stderr"):
            t = self._targets.get(event.rank)
            if t is not None and t.attempt == event.attempt:
                t.moved = clock.monotonic()
                if event.stream == "stdout" or event.partial:
                    t.partial = bool(event.partial)
                self._busy[event.rank] = None

    def _apply(self, changes: list[tuple[_Target, int, InputWait | None]]) -> None:
        with self._state.lock:
            for t, answers, wait in changes:
                slot = self._state.slots.get(t.rank)
                if self._targets.get(t.rank) is not t or t.answers != answers or slot is None:
                    continue  # it exited, was restarted or was answered meanwhile
                if wait is None:
                    self.answered(slot)
                    continue
                slot.input_wait = t.wait = wait
                self._waiting[t.rank] = None
                self._events.emit(RankInputWait(t.rank, wait, slot.attempt))
        self._events.flush()


def _size(path: str) -> int:
    try:
        return os.stat(path).st_size if path else 0
    except OSError:
        return 0
