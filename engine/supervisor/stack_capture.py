"""Stack dumps of a supervised run: asked for (``DumpStacks``), and taken before a SIGKILL.

A rank that ignores SIGTERM is SIGKILLed at its escalation's deadline, and whatever it was
stuck in dies with it: that is the one stack a person needed (torch's users ask for exactly
this). So, unless ``SupervisorConfig.stack_on_kill`` is off, the ``Stopper`` asks for a dump of
the ranks still alive ``stacks.KILL_DUMP_BUDGET_S`` before each escalation's deadline (or
halfway to it when the whole timeout is shorter than twice that), teardown after a failure
included. The dump runs on a thread of its own, nonblocking (the ranks are not paused), its
py-spy calls bounded by the time left before the deadline minus a margin; the monitor thread
never waits for it, so the SIGKILL goes at the announced deadline whether the dump finished or
not. The dump is saved under ``<run_dir>/stacks/`` and announced in a notice.

A dump a person asks for runs on the caller's thread (a viewer's connection, the TUI's
worker), without the state lock: only the ranks' pids are read under it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from engine.forensics.stacks import (
    DEFAULT_TIMEOUT_S,
    KILL_DUMP_BUDGET_S,
    StackDump,
    dump_stacks,
    save_dump,
)
from engine.supervisor.publisher import Publisher
from engine.supervisor.state import RunState

__all__ = ["MIN_DUMP_S", "StackCapture", "capture_time"]

log = logging.getLogger(__name__)

MIN_DUMP_S = 0.05
"""Below this much time before a deadline no dump is tried: py-spy could not finish."""

_MARGIN_S = 0.05
"""How long before the deadline a capture's py-spy calls must be over."""


def capture_time(now: float, deadline: float, budget_s: float = KILL_DUMP_BUDGET_S) -> float:
    """When to start the dump of ranks to be SIGKILLed at ``deadline``.

    ``budget_s`` before it, but never in the first half of the timeout: a rank that obeys
    SIGTERM needs a moment to exit, and dumping it would be wasted.
    """
    return max(deadline - budget_s, now + (deadline - now) / 2)


def _joined(ranks: list[int]) -> str:
    return ", ".join(map(str, ranks))


class StackCapture:
    """Runs the run's stack dumps and saves them under its run directory.

    Args:
        state: The run (its lock is taken briefly to announce a capture).
        events: Where the notice of a capture goes.
        run_dir: The run's directory once it exists (None before).
    """

    def __init__(
        self, state: RunState, events: Publisher, run_dir: Callable[[], str | None]
    ) -> None:
        self._state = state
        self._events = events
        self._run_dir = run_dir
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()

    def dump(
        self,
        targets: dict[int, int],
        *,
        native: bool = False,
        nonblocking: bool = False,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        reason: str = "asked",
    ) -> StackDump:
        """Dump ``targets`` (rank -> pid) now, on this thread, and save the dump if any
        rank could be read (the returned dump's ``path``; "" when nothing was saved)."""
        dump = dump_stacks(targets, native=native, nonblocking=nonblocking,
                           timeout_s=timeout_s, reason=reason)
        run_dir = self._run_dir()
        if dump.captured and run_dir:
            try:
                dump = save_dump(dump, run_dir)
            except OSError as e:
                log.warning("stack dump not saved under %s: %s", run_dir, e)
        return dump

    def before_kill(self, targets: dict[int, int], deadline: float, why: str) -> None:
        """Start a dump of ``targets``, to be over before ``deadline`` (``time.monotonic``).

        Called with the state lock held (by the Stopper): only starts a thread.
        """
        left = deadline - time.monotonic() - _MARGIN_S
        if left < MIN_DUMP_S or not targets:
            return
        # Keyed as a person knows the ranks: the dump names them (global on many nodes).
        shown = {self._state.shown(rank): pid for rank, pid in targets.items()}
        thread = threading.Thread(
            target=self._capture, args=(shown, left, why),
            name="rankvisor-stack-capture", daemon=True,
        )
        with self._lock:
            self._threads = [t for t in self._threads if t.is_alive()] + [thread]
        thread.start()

    def _capture(self, targets: dict[int, int], left: float, why: str) -> None:
        try:
            dump = self.dump(targets, nonblocking=True, timeout_s=left,
                             reason=f"before SIGKILL ({why})")
        except Exception:  # noqa: BLE001 - a failed dump must never touch the run
            log.exception("stack capture before SIGKILL failed")
            return
        if dump.path:
            got = list(dump.captured)
            message = (f"rank(s) {_joined(got)}: stack saved before SIGKILL: {dump.path}")
        elif dump.problem:
            message = (f"rank(s) {_joined(sorted(targets))}: no stack before SIGKILL: "
                       f"{dump.problem}")
        else:
            return  # they exited meanwhile: nothing to keep, nothing to say
        with self._state.lock:
            self._events.notice(message, "information")
        self._events.flush()

    def join(self, timeout_s: float) -> None:
        """Wait (bounded) for captures in flight: each ends before its deadline anyway."""
        end = time.monotonic() + timeout_s
        with self._lock:
            threads = list(self._threads)
        for t in threads:
            t.join(max(0.0, end - time.monotonic()))
