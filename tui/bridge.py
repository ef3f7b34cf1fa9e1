"""EngineBridge: the sink that carries engine events from engine threads into the UI.

Threads: ``__call__`` runs on engine threads (the log pump, the monitor, the stats sampler,
the escalation timer) and only appends to bounded buffers under a lock or posts a message;
``drain`` runs on the UI thread at the drain tick (about 15 Hz) and takes everything buffered
in one go. Log lines are never posted one message per line: a rank that writes 10k lines/s
costs one deque append per engine batch and one widget update per tick.

Lifecycle events (state changes, escalations, restarts, run finished, notices) are posted at
once as ``EngineEvent`` messages carrying a sequence number; the handler drains the log
batches with smaller numbers first, so a restart marker lands after the lines that preceded it.
A line a person typed (``RankInput``) travels with the rank's output batches instead, in their
queue: a drain tick may come before a message is handled, and the typed line must land
between the prompt it answered and the answer.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass, field, replace
from typing import Final, Protocol

from ..engine.events import Event, RankInput, RankOutput, RankStats
from .messages import EngineEvent

__all__ = ["Drained", "EngineBridge"]

MAX_PENDING_LINES: Final = 20_000
"""Lines held per rank between two drains; older batches are dropped beyond this (the files
keep every byte; the pane shows a 'lines skipped' marker)."""
_MAX_BATCHES: Final = 4_096
"""Batches held per rank between two drains (bounds memory for tiny batches too)."""


class _Target(Protocol):
    def post_message(self, message: EngineEvent, /) -> bool: ...


@dataclass
class Drained:
    """Everything the engine sent since the last drain."""

    outputs: list[RankOutput | RankInput] = field(default_factory=list)
    """stdout/stderr batches and typed lines, in arrival order."""
    skipped: dict[int, int] = field(default_factory=dict)
    """rank -> lines dropped from the buffer because the UI fell behind."""
    stats: list[RankStats] = field(default_factory=list)
    filtered: set[str] = field(default_factory=set)
    """Filtered streams that received lines ("filtered_stdout", "filtered_stderr")."""

    def __bool__(self) -> bool:
        return bool(self.outputs or self.skipped or self.stats or self.filtered)


class EngineBridge:
    """An ``EventSink`` that buffers output per rank and posts lifecycle events."""

    def __init__(self, max_pending_lines: int = MAX_PENDING_LINES) -> None:
        self._lock = threading.Lock()
        self._seq = 0
        self._max_pending = max_pending_lines
        self._pending: dict[int, deque[tuple[int, RankOutput | RankInput]]] = {}
        self._pending_lines: dict[int, int] = {}
        self._skipped: dict[int, int] = {}
        self._stats: list[tuple[int, RankStats]] = []
        self._filtered: set[str] = set()
        self._target: _Target | None = None
        self._early: list[EngineEvent] = []
        """Lifecycle events that arrived before a target was attached."""
        self.events_seen = 0
        self.lines_seen = 0

    def attach(self, target: _Target) -> None:
        """Deliver lifecycle messages to ``target`` (the app); flushes early ones."""
        with self._lock:
            self._target = target
            early, self._early = self._early, []
        for message in early:
            target.post_message(message)

    def detach(self) -> None:
        """Stop posting; later lifecycle events wait for ``take_early`` or a new target."""
        with self._lock:
            self._target = None

    def take_early(self) -> list[EngineEvent]:
        """Lifecycle messages that found no target (before attach or after detach)."""
        with self._lock:
            early, self._early = self._early, []
        return early

    def __call__(self, event: Event, /) -> None:
        """Engine threads call this; it never blocks beyond a short lock."""
        with self._lock:
            self._seq += 1
            seq = self._seq
            self.events_seen += 1
            if isinstance(event, (RankOutput, RankInput)):
                self._add_output(seq, event)
                return
            if isinstance(event, RankStats):
                self._stats.append((seq, event))
                return
            target = self._target
            message = EngineEvent(event, seq)
            if target is None:
                self._early.append(message)
                return
        target.post_message(message)

    def _add_output(self, seq: int, event: RankOutput | RankInput) -> None:
        queue = self._pending.setdefault(event.rank, deque())
        if isinstance(event, RankInput):
            queue.append((seq, event))  # never dropped: one per line a person typed
            return
        if event.stream not in ("stdout", "stderr"):
            self._filtered.add(event.stream)
            return
        self.lines_seen += len(event.lines)
        last = queue[-1][1] if queue else None
        if not event.lines and isinstance(last, RankOutput) and last.stream == event.stream:
            # A progress bar redrawn with no new line: only its latest frame matters.
            queue[-1] = (queue[-1][0], replace(last, partial=event.partial))
            return
        queue.append((seq, event))
        count = self._pending_lines.get(event.rank, 0) + len(event.lines)
        # Backpressure: the UI fell behind; drop the oldest batches but keep the newest
        # (the pane shows the tail, and the file on disk has everything).
        while (count > self._max_pending or len(queue) > _MAX_BATCHES) and len(queue) > 1:
            # The oldest batch goes; a typed line never does (one per line a person typed).
            index = next(i for i, item in enumerate(queue) if isinstance(item[1], RankOutput))
            if index == len(queue) - 1:
                break  # only the newest batch is left
            dropped = queue[index][1]
            del queue[index]
            assert isinstance(dropped, RankOutput)
            count -= len(dropped.lines)
            self._skipped[event.rank] = self._skipped.get(event.rank, 0) + len(dropped.lines)
        self._pending_lines[event.rank] = count

    def drain(self, upto: int | None = None) -> Drained:
        """Take what was buffered (only what came before sequence ``upto`` if given)."""
        out = Drained()
        with self._lock:
            limit = self._seq + 1 if upto is None else upto
            batches: list[tuple[int, RankOutput | RankInput]] = []
            for rank, queue in self._pending.items():
                taken = 0
                while queue and queue[0][0] < limit:
                    item = queue.popleft()
                    if isinstance(item[1], RankOutput):
                        taken += len(item[1].lines)
                    batches.append(item)
                if taken:
                    self._pending_lines[rank] -= taken
            if upto is None:
                out.skipped, self._skipped = self._skipped, {}
                out.filtered, self._filtered = self._filtered, set()
            keep = [item for item in self._stats if item[0] >= limit]
            out.stats = [stat for seq, stat in self._stats if seq < limit]
            self._stats = keep
        batches.sort(key=lambda item: item[0])
        out.outputs = [event for _, event in batches]
        return out
