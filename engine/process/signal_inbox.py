"""Handled signals as bytes on a pipe that the run's loop polls, whichever thread the
kernel hands them to.

Python runs a signal's handler on the main thread only, and only once that thread runs
bytecode again. The kernel may deliver a signal sent to the process to any thread that does
not block it: a thread that is starting a thread takes a pending one (glibc blocks every
signal around ``clone`` and the restore picks it up), its C-level handler notes it, and a
main thread asleep on a lock or an Event is never woken. A supervisor whose main thread
waits on news of the run then never hears of the SIGTERM that should end it: seen on a
loaded machine as a run still going 30 s after its signal, and here in 12 of 200 signals
with one thread starting threads beside a main thread that waits on an Event.

CPython's C-level handler also writes the signal's number to the wakeup fd
(``signal.set_wakeup_fd``) at once, from whatever thread took it. The inbox owns that fd:
the monitor polls ``fd`` and takes the numbers. A caller's ``on_signal`` (a console to give
up, so that a teardown never waits on it) runs in the Python-level handler and again when
the numbers are taken, whichever comes first doing the work. A wakeup fd set before ours
(an event loop's) gets every byte forwarded, so its owner still hears its signals.
"""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Callable, Iterable
from types import FrameType

from .wakeup import Wakeup

__all__ = ["SignalInbox"]

log = logging.getLogger(__name__)


class SignalInbox:
    """The wakeup fd of this process, read for ``signals``; one per process at a time.

    Args:
        signals: The signal numbers ``take`` hands back (others' bytes are only forwarded).
    """

    def __init__(self, signals: Iterable[int]) -> None:
        self.signals = frozenset(int(s) for s in signals)
        self._pipe = Wakeup()
        self._previous_fd = -1
        self._on_signal: Callable[[int], None] | None = None

    @property
    def fd(self) -> int:
        """The end to poll for reading (-1 once closed)."""
        return self._pipe.fd

    def install(self, on_signal: Callable[[int], None] | None = None) -> Callable[[], None]:
        """Handle ``signals`` through this inbox (main thread only); returns the undo.

        ``on_signal`` runs in the Python-level handler, on the main thread, whenever that
        thread gets to it, and in ``take`` on the thread that takes the signal: it must be
        idempotent and take no lock, as any signal handler.
        """
        self._on_signal = on_signal

        def handler(signum: int, _frame: FrameType | None) -> None:
            if on_signal is not None:
                on_signal(signum)

        # The fd before the handlers, and back in the other order: a signal that comes in
        # between finds the handler it had before, never ours without our fd.
        self._previous_fd = signal.set_wakeup_fd(self._pipe.write_fd,
                                               warn_on_full_buffer=False)
        previous = {sig: signal.signal(sig, handler) for sig in self.signals}

        def restore() -> None:
            for sig, old in previous.items():
                signal.signal(sig, old)
            current = signal.set_wakeup_fd(self._previous_fd)
            if current != self._pipe.write_fd:
                signal.set_wakeup_fd(current)  # someone set theirs over ours since: it stays
            self._previous_fd = -1
            self._on_signal = None

        return restore

    def take(self) -> list[int]:
        """The handled signals that came since the last call, in order (never blocks)."""
        if self.fd < 0:
            return []
        data = self._pipe.drain()
        if data and self._previous_fd >= 0:
            try:
                os.write(self._previous_fd, data)
            except OSError:
                pass  # full or gone: as the C handler would have found it
        taken = [sig for sig in data if sig in self.signals]
        on_signal = self._on_signal
        for sig in taken if on_signal is not None else ():
            try:
                on_signal(sig)
            except Exception:  # noqa: BLE001 - the signal itself must still be acted on
                log.exception("on_signal(%d) failed", sig)
        return taken

    def close(self) -> None:
        """Close both ends (after ``restore``; idempotent)."""
        self._pipe.close()
