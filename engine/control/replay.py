"""``RecordedRun``: a run that is over (or whose supervisor is gone), viewed from its files.

The supervisor keeps ``events.ndjson`` in the run's directory (``engine.control.host``): the
run as its ranks started, then every lifecycle event in wire form, and at the end the run as
it finished. Replaying it into a viewer gives the same panes, error view and notices as
watching live did; the lines come from the log files, as for a late live viewer. Nothing
can be done to such a run: every command is refused with the reason.
"""

from __future__ import annotations

import os
from typing import Any, BinaryIO, Callable, Iterator

from ..events import Event, EventSink
from ..handle import Command, CommandResult, RunInfo, command_problem
from ..rundir.regular_file import open_regular
from . import wire
from .client import recent_output

__all__ = ["RecordedRun"]

EVENTS_FILE = "events.ndjson"

MAX_RECORD_BYTES = 256 * 1024 * 1024
"""Bytes of a record replayed: millions of events; a bigger one is replayed up to here."""

_LINE_CAP = 16 * 1024 * 1024
"""The longest line read whole (the run's first line names every rank's files)."""

_TAIL_BYTES = 32 * 1024 * 1024
"""Bytes read at the end of a record bigger than the cap, for its last run line."""


def _lines(f: BinaryIO, cap: int) -> Iterator[bytes]:
    """The lines of ``f`` from where it is, up to ``cap`` bytes; each at most a wire line."""
    left = cap
    while left > 0:
        line = f.readline(min(left, _LINE_CAP))
        if not line:
            return
        left -= len(line)
        yield line


def _decode(line: bytes) -> tuple[str, Any]:
    """("run", RunInfo), ("event", Event) or ("", None) for a line of the record."""
    if not line.strip():
        return "", None
    try:
        message = wire.decode_message(line)
        if message.get("t") == "run":
            return "run", wire.run_info_from_wire(message["run"])
        event = wire.event_from_wire(message)
    except (wire.WireError, KeyError, TypeError, ValueError):
        return "", None  # a torn last line (killed mid-write), a tampered one: skip it
    return ("event", event) if event is not None else ("", None)


class RecordedRun:
    """A read-only handle over a run's record (see the module docstring)."""

    def __init__(self, run_dir: str, first: RunInfo, events: list[Event],
                 last: RunInfo | None, *, recent_lines: int = 5_000) -> None:
        self.run_dir = run_dir
        self._first = first
        self._events = events
        self._last = last
        self._recent_lines = recent_lines
        self.finished_cleanly = last is not None
        """False when the record stops short: the supervisor was killed (a stale run)."""

    @classmethod
    def open(cls, run_dir: str) -> RecordedRun:
        """Read ``<run_dir>/events.ndjson``.

        Raises:
            LookupError: no record there (a run from before records were kept, or not a
                run's directory); the message says so.
        """
        path = os.path.join(run_dir, EVENTS_FILE)
        try:
            f = open_regular(path)
        except OSError as e:
            raise LookupError(
                f"{run_dir}: no run record ({EVENTS_FILE}: {e.strerror or e}); "
                "its logs are still there: rankvisor logs " + run_dir
            ) from None
        first: RunInfo | None = None
        last: RunInfo | None = None
        events: list[Event] = []
        with f:
            # A stream, capped: a record of many GB (or a link swapped in for one) costs
            # at most MAX_RECORD_BYTES of reading; past it, only the end is looked at, for
            # the run as it finished.
            for line in _lines(f, MAX_RECORD_BYTES):
                kind, value = _decode(line)
                if kind == "run":
                    first, last = (value, last) if first is None else (first, value)
                elif kind == "event":
                    events.append(value)
            if f.read(1):
                f.seek(max(f.tell(), os.fstat(f.fileno()).st_size - _TAIL_BYTES))
                f.readline(_LINE_CAP)  # the rest of a line cut in half
                for line in _lines(f, _TAIL_BYTES):
                    kind, value = _decode(line)
                    if kind == "run" and first is not None:
                        last = value
        if first is None:
            raise LookupError(f"{path}: the record is empty or unreadable")
        return cls(run_dir, first, events, last)

    # -- SupervisorHandle ------------------------------------------------------------------

    @property
    def detachable(self) -> bool:
        """True: closing this viewer changes nothing (there is nothing running to stop)."""
        return True

    def subscribe(self, sink: EventSink) -> Callable[[], None]:
        return lambda: None  # nothing live will ever come

    def watch(self, sink: EventSink) -> tuple[RunInfo, Callable[[], None]]:
        for event in self._events:
            sink(event)
        info = self.snapshot()
        for rank in info.ranks:
            if rank.stdout_path or rank.stderr_path:
                batches, _counts = recent_output(
                    rank.rank, rank.attempt, rank.stdout_path, rank.stderr_path,
                    self._recent_lines,
                )
                for batch in batches:
                    sink(batch)
        return self._first, lambda: None

    def start(self) -> None:
        """Nothing to start: the run is over."""

    def execute(self, command: Command) -> CommandResult:
        problem = command_problem(command)
        if problem is not None:
            return CommandResult(False, problem)
        why = "is finished" if self.finished_cleanly else "lost its supervisor (stale)"
        return CommandResult(False, f"this run {why}: nothing here can act on it")

    def snapshot(self) -> RunInfo:
        return self._last or self._first

    def shutdown(self, timeout_s: float | None = None) -> None:
        """Nothing to stop."""

    def detach(self) -> None:
        """Nothing to let go of."""
