"""The Supervisor's link to the output pump (engine.output.pump): which files to tail.

Every rank's stdout and stderr always go to files; the pump tails them into batched
``RankOutput`` events, delivered on the pump's thread straight to the sinks, and notes in
each rank's ``arrival.idx`` (``engine.rundir.arrival``) the order their lines arrived in.
A batch's lines are made into ``str`` only if a sink reads them whole; while none does
(tee off, no viewer), the pump reads every ``UNREAD_DEBOUNCE_S``.

Pump calls are queued under the state lock and run by ``run_ops`` outside it: the pump
calls our sink while holding its own lock, and a sink may call back into the Supervisor, so
holding both locks in opposite orders could deadlock. ``run_ops`` runs on the monitor
thread after each pass (and in ``start`` and ``shutdown``, before and after it runs).
"""

from __future__ import annotations

import collections
import logging
import threading
from collections.abc import Callable
from functools import partial
from typing import Final

from ..events import Event, RankOutput
from ..forensics.activity import OutputActivity
from ..logs_specs import LogsDest
from ..output.pump import OutputPump, StdStream
from ..output.text_batch import Batch
from ..rundir.arrival import arrival_path
from .rank_slot import RankSlot
from .run_config import SupervisorConfig

__all__ = ["PumpLink"]

log = logging.getLogger(__name__)

_STREAMS: tuple[StdStream, StdStream] = ("stdout", "stderr")

UNREAD_DEBOUNCE_S: Final = 0.25
"""How long the pump lets a rank's output gather while nobody reads its lines (no console
shows them, no viewer is attached): four reads a second, each a chunk of every busy file,
is what the supervisor's own uses need (arrival index, activity, progress, filters)."""


class _AddBatch:
    """One queued ``OutputPump.add_many`` that consecutive ``add`` calls join (a group of
    ranks started together is one pump call, so one wake-up of the pump thread)."""

    def __init__(self, pump: OutputPump) -> None:
        self.pump = pump
        self.entries: list[tuple[int, StdStream, str, int, str]] = []
        self.sealed = False
        """Taken by ``run_ops``: later adds start a new batch."""

    def __call__(self) -> None:
        self.pump.add_many(self.entries)


class PumpLink:
    """Owns the run's ``OutputPump`` and the queue of calls to it.

    Args:
        config: The run's configuration (filters, role, debounce).
        prefixes: Each rank's log line prefix, for the filtered files.
        publish: Delivers one event to every sink at once (on the pump's thread).
        activity: Told of every batch as it is read (when each rank's output last moved,
            redraws of an unfinished line included: the suspect's silence).
    """

    def __init__(
        self,
        config: SupervisorConfig,
        prefixes: dict[int, str],
        publish: Callable[[Event], None],
        activity: OutputActivity | None = None,
    ) -> None:
        self._config = config
        self._prefixes = prefixes
        self._publish = publish
        self._activity = activity
        self._pump: OutputPump | None = None
        self._ops: collections.deque[Callable[[], None]] = collections.deque()
        self._ops_lock = threading.Lock()
        """Orders ``run_ops`` taking an add batch against ``add`` joining it."""

    def start(self) -> None:
        """Start the pump thread (the run starts; called once)."""
        self._pump = OutputPump(
            self._sink, name="rankvisor-pump", debounce=self._config.output_debounce_s,
            unread_debounce=UNREAD_DEBOUNCE_S,
        ).start()

    def _sink(self, batch: list[Batch]) -> None:
        for event in batch:
            if isinstance(event, RankOutput):  # always: the pump was not asked for TextBatch
                if self._activity is not None:
                    self._activity.note(event)
                self._publish(event)

    def stop(self) -> None:
        """Deliver what was written so far and end the pump thread."""
        if self._pump is not None:
            self._pump.stop()

    def run_ops(self) -> None:
        """Run queued pump calls, in order. Call with the state lock *released*."""
        while True:
            with self._ops_lock:
                if not self._ops:
                    return
                op = self._ops.popleft()
                if isinstance(op, _AddBatch):
                    op.sealed = True
            try:
                op()
            except Exception:  # noqa: BLE001 - output is a view; the files keep everything
                log.exception("output pump call failed")

    # Each method below only queues; the caller holds the state lock.

    def add_filters(self, dest: LogsDest) -> None:
        """Copy matching lines of this attempt to its ``filtered_*.log`` files."""
        pump = self._pump
        if pump is None:
            return
        wanted: tuple[tuple[StdStream, tuple[str, ...], str], ...] = (
            ("stdout", self._config.stdout_filters, dest.filtered_stdout),
            ("stderr", self._config.stderr_filters, dest.filtered_stderr),
        )
        for stream, needles, path in wanted:
            if needles:
                self._ops.append(
                    partial(
                        pump.add_filter, stream, list(needles), path, dict(self._prefixes),
                        name=self._config.role,
                    )
                )

    def add(self, slot: RankSlot) -> None:
        """Tail the files of the slot's current process."""
        pump = self._pump
        if pump is None:
            return
        # The arrival index beside the two logs: the zoomed view merges them on it.
        index = arrival_path(slot.stdout_path, slot.stderr_path)
        with self._ops_lock:
            batch = self._ops[-1] if self._ops else None
            if not isinstance(batch, _AddBatch) or batch.sealed:
                batch = _AddBatch(pump)
                self._ops.append(batch)
            for stream, path in zip(_STREAMS, (slot.stdout_path, slot.stderr_path), strict=True):
                batch.entries.append((slot.rank, stream, path, slot.attempt, index))

    def remove(self, slot: RankSlot) -> None:
        """Stop tailing the slot's files once their last lines are delivered."""
        pump = self._pump
        if pump is None:
            return
        for stream in _STREAMS:
            # drain=True: the rank's last lines are delivered before its exit event.
            self._ops.append(partial(pump.remove, slot.rank, stream, drain=True))
