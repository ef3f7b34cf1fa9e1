"""The ranks' stdin under ``--stdin pipe``: lines sent to them, and which of them wait for one.

``send``/``close`` carry out ``SendInput``/``CloseInput`` for the command handler (state lock
held): each line goes whole into the rank's pipe (``engine.process.stdin_pipe``) or is
refused with the reason, and a line that went is a ``RankInput`` event and an entry of the
incarnation's ``stdin.log``. A line that went also ends the rank's wait: it is answered, and
the rank is busy with it until it reads again.

The watch thread looks every ``interval`` seconds at every live rank with an open pipe
(``engine.process.input_probe``: its main thread at each pass, every thread and its children
at every ``deep_every``-th pass, staggered across ranks, and at each pass while it waits),
and publishes ``RankInputWait`` when a rank starts or stops waiting, or when what it asks
changes. What it asks is read from the ends of its log files (``engine.output.prompt``).
"""

from __future__ import annotations

import logging
import os
import threading
import time

from ..events import InputWait, RankInput, RankInputWait
from ..logfile.stdin_log import StdinEntry, append_entry, stdin_log_path
from ..output.prompt import read_prompt
from ..process.input_probe import StdinProbe
from ..process.stdin_pipe import StdinRefused
from .publisher import Publisher
from .rank_slot import RankSlot
from .state import RunState

__all__ = ["InputWatch"]

log = logging.getLogger(__name__)

DEFAULT_INTERVAL_S = 0.2
"""A wait is seen within this (plus the look itself): the goal is half a second."""
DEFAULT_DEEP_EVERY = 5
"""Every thread and child of a rank is looked at once in this many passes (one second)."""


class InputWatch:
    """The input side of a run's ranks: sending, closing, and the "waiting for input" watch."""

    def __init__(
        self, state: RunState, events: Publisher, *, interval: float = DEFAULT_INTERVAL_S,
        deep_every: int = DEFAULT_DEEP_EVERY,
    ) -> None:
        self._state = state
        self._events = events
        self._interval = interval
        self._deep_every = max(1, deep_every)
        self._probe = StdinProbe()
        self._sizes: dict[int, tuple[int, int]] = {}
        """rank -> the sizes of its two log files when its current wait was last read."""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
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
        self._record(slot, StdinEntry(time.time(), text))

    def close(self, slot: RankSlot) -> None:
        """Close the rank's stdin: it reads EOF once it has read what was sent."""
        pipe = slot.stdin
        if pipe is None or pipe.closed:
            raise StdinRefused("its stdin is closed already")
        pipe.close()
        self._record(slot, StdinEntry(time.time(), eof=True))

    def _record(self, slot: RankSlot, entry: StdinEntry) -> None:
        path = stdin_log_path(slot.stdout_path)
        if path:
            try:
                append_entry(path, entry)
            except OSError as e:  # a full disk: the line went; the log says it could not
                self._events.notice(f"rank {self._state.shown(slot.rank)}: could not write "
                                    f"{path}: {e.strerror or e}", "warning")
        self._events.emit(RankInput(slot.rank, entry.text, entry.t, slot.attempt, entry.eof))
        self.ended(slot)

    def ended(self, slot: RankSlot) -> None:
        """The rank stopped waiting (it was answered, or its process is gone): say so."""
        if slot.input_wait is not None:
            slot.input_wait = None
            self._sizes.pop(slot.rank, None)
            self._events.emit(RankInputWait(slot.rank, None, slot.attempt))

    # -- the watch thread -------------------------------------------------------------------

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="rankvisor-input",
                                            daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5.0)
        self._probe.close()

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                self.look()
            except Exception:  # noqa: BLE001 - a view of the ranks must not end the run
                log.exception("input watch pass failed")

    def look(self) -> None:
        """One pass over every live rank with an open pipe (the thread calls it)."""
        self.passes += 1
        with self._state.lock:
            targets = [
                (s.rank, s.proc.pid, s.stdin, s.stdout_path, s.stderr_path, s.input_wait)
                for s in self._state.slots.values()
                if s.alive and s.proc is not None and s.stdin is not None and not s.stdin.closed
            ]
        changes: list[tuple[int, int, InputWait | None]] = []
        pids = set()
        for i, (rank, pid, pipe, out, err, wait) in enumerate(targets):
            pids.add(pid)
            deep = wait is not None or (self.passes + i) % self._deep_every == 0
            if not self._probe.waiting(pid, pipe.inode, deep=deep):
                if wait is not None:
                    changes.append((rank, pid, None))
                continue
            sizes = (_size(out), _size(err))
            if wait is not None and self._sizes.get(rank) == sizes:
                continue  # waiting still, and it wrote nothing since we read its prompt
            prompt, where = read_prompt(out, err)
            self._sizes[rank] = sizes
            if wait is None:
                changes.append((rank, pid, InputWait(time.time(), prompt, where)))
            elif (prompt, where) != (wait.prompt, wait.where):
                changes.append((rank, pid, InputWait(wait.since, prompt, where)))
        for pid in self._probe.pids() - pids:
            self._probe.forget(pid)
        if changes:
            self._apply(changes)

    def _apply(self, changes: list[tuple[int, int, InputWait | None]]) -> None:
        with self._state.lock:
            for rank, pid, wait in changes:
                slot = self._state.slots.get(rank)
                if slot is None or slot.pid != pid or not slot.alive or slot.stdin is None:
                    continue  # it exited (or was restarted) meanwhile
                if wait is None:
                    self.ended(slot)
                    continue
                slot.input_wait = wait
                self._events.emit(RankInputWait(rank, wait, slot.attempt))
        self._events.flush()


def _size(path: str) -> int:
    try:
        return os.stat(path).st_size if path else 0
    except OSError:
        return 0
