"""The Supervisor's one subscription point: sinks, the queue of lifecycle events, notices.

Lifecycle events are queued (``emit``) under the state lock and delivered in order by
``flush`` after it is released, so a sink may call back into the Supervisor (a snapshot, a
command) without deadlocking; sinks run on engine threads and must not block. Events of
their own threads (output batches, stats) are delivered at once with ``publish_now``.
"""

from __future__ import annotations

import collections
import logging
import threading
from collections.abc import Callable
from typing import Literal

from ..events import Event, EventSink, RunFinished, SupervisorNotice
from .state import RunState

__all__ = ["Publisher", "Severity"]

log = logging.getLogger(__name__)

Severity = Literal["information", "warning", "error"]


class Publisher:
    """Delivers events to every subscribed sink, in order, outside the state lock.

    Args:
        state: The run; ``flush`` sets ``state.finished_event`` once ``state.finished``
            was delivered.
    """

    def __init__(self, state: RunState) -> None:
        self._state = state
        self._sinks: tuple[EventSink, ...] = ()
        self._queue: collections.deque[Event] = collections.deque()
        self._dispatch_lock = threading.RLock()

    def subscribe(self, sink: EventSink) -> Callable[[], None]:
        """Add ``sink`` for every later event; returns a function that removes it."""
        with self._dispatch_lock:
            self._sinks = (*self._sinks, sink)

        def unsubscribe() -> None:
            with self._dispatch_lock:
                self._sinks = tuple(s for s in self._sinks if s is not sink)

        return unsubscribe

    def emit(self, event: Event) -> None:
        """Queue a lifecycle event (the caller holds the state lock); ``flush`` delivers it."""
        self._queue.append(event)

    def notice(self, message: str, severity: Severity = "information") -> None:
        """Queue a ``SupervisorNotice``: a line for a person (refusals, SIGKILLs, teardown)."""
        self.emit(SupervisorNotice(message, severity))

    def flush(self) -> None:
        """Deliver queued events in order. Call with the state lock *released*."""
        with self._dispatch_lock:
            while self._queue:
                event = self._queue.popleft()
                self.publish_now(event)
                if isinstance(event, RunFinished) and event is self._state.finished:
                    # Only now: whoever wait()s sees RunFinished already delivered to sinks.
                    self._state.finished_event.set()

    def publish_now(self, event: Event) -> None:
        """Deliver ``event`` to every sink on this thread (output and stats threads)."""
        for sink in self._sinks:
            try:
                sink(event)
            except Exception:  # noqa: BLE001 - one bad sink must not stop the others
                log.exception("event sink %r failed on %r", sink, type(event).__name__)
