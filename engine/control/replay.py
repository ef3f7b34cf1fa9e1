"""``RecordedRun``: a run that is over (or whose supervisor is gone), viewed from its files.

The supervisor keeps ``events.ndjson`` in the run's directory (``engine.control.host``): the
run as its ranks started, then every lifecycle event in wire form, and at the end the run as
it finished. Replaying it into a viewer gives the same panes, error view and notices as
watching live did; the lines come from the log files, as for a late live viewer. Nothing
can be done to such a run: every command is refused with the reason.
"""

from __future__ import annotations

import os
from typing import Callable

from ..events import Event, EventSink
from ..handle import Command, CommandResult, RunInfo, command_problem
from . import wire
from .client import recent_output

__all__ = ["RecordedRun"]

EVENTS_FILE = "events.ndjson"


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
            with open(path, "rb") as f:
                raw = f.read()
        except OSError as e:
            raise LookupError(
                f"{run_dir}: no run record ({EVENTS_FILE}: {e.strerror or e}); "
                "its logs are still there: rankvisor logs " + run_dir
            ) from None
        first: RunInfo | None = None
        last: RunInfo | None = None
        events: list[Event] = []
        for line in raw.split(b"\n"):
            if not line.strip():
                continue
            try:
                message = wire.decode_message(line)
            except wire.WireError:
                continue  # a torn last line (killed mid-write): the rest still stands
            kind = message.get("t")
            if kind == "run":
                info = wire.run_info_from_wire(message["run"])
                if first is None:
                    first = info
                else:
                    last = info
                continue
            event = wire.event_from_wire(message)
            if event is not None:
                events.append(event)
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
