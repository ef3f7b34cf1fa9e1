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

``CaptureSchedule`` says which escalations still owe a capture and when; the Supervisor's
``Stopper`` and the torchrun handle (which escalates on its own) both keep one.
"""

from __future__ import annotations

import heapq
import logging
import threading
from collections.abc import Callable, Iterable

from .. import clock
from ..forensics.collectives import RankCollectives
from ..forensics.stack_evidence import outside_collective, regrouped
from ..forensics.stacks import (
    DEFAULT_TIMEOUT_S,
    KILL_DUMP_BUDGET_S,
    StackDump,
    dump_stacks,
    save_dump,
)
from ..kernel.escalation import Escalation

__all__ = ["MIN_DUMP_S", "CaptureSchedule", "StackCapture", "capture_time"]

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


class CaptureSchedule:
    """The captures owed before SIGKILLs: one per escalation, due at ``capture_at``.

    A capture is dropped once every rank of its escalation exited or its SIGKILL went out,
    and a pid is dumped once (a rank stopped twice). Not thread-safe: its owner's lock
    guards it.

    Args:
        capture_at: When, for an escalation sent at ``now`` with SIGKILL at ``deadline``,
            to start its capture.
    """

    def __init__(self, capture_at: Callable[[float, float], float] = capture_time) -> None:
        self._capture_at = capture_at
        self._heap: list[tuple[float, int, Escalation, str]] = []
        """(when, escalation id, escalation, why): captures not yet started."""
        self._captured: set[int] = set()

    def add(self, esc: Escalation, now: float, why: str) -> None:
        """Owe a capture of ``esc``'s ranks (just signalled at ``now``) before its SIGKILL."""
        heapq.heappush(self._heap, (self._capture_at(now, esc.deadline), esc.id, esc, why))

    def next_time(self) -> float | None:
        """When the next capture is due (``clock.monotonic()``), None if none is owed."""
        while self._heap and not _owed(self._heap[0][2]):
            heapq.heappop(self._heap)
        return self._heap[0][0] if self._heap else None

    def due(
        self, now: float, pid_of: Callable[[int], int | None]
    ) -> list[tuple[dict[int, int], float, str]]:
        """The captures to start now: (rank -> pid, SIGKILL deadline, why) each.

        ``pid_of(rank)`` is the rank's live pid, None once it exited.
        """
        out = []
        while self._heap and self._heap[0][0] <= now:
            _, _, esc, why = heapq.heappop(self._heap)
            if not _owed(esc):
                continue
            targets = {}
            for r in sorted(esc.alive):
                pid = pid_of(r)
                if pid is not None and pid not in self._captured:
                    targets[r] = pid
            if targets:
                self._captured.update(targets.values())
                out.append((targets, esc.deadline, why))
        return out


def _owed(esc: Escalation) -> bool:
    return not esc.done and esc.kill_deadline is None


class StackCapture:
    """Runs a run's stack dumps and saves them under its run directory.

    Args:
        run_dir: The run's directory once it exists (None or "" before: nothing is saved).
        say: Tells a person about a capture before a SIGKILL (called on the capture's
            thread with one line).
        readings: The ranks' Flight Recorder readings, if the run has them: a dump's groups
            are then split by the collective number each rank waits in.
    """

    def __init__(
        self, run_dir: Callable[[], str | None], say: Callable[[str], None],
        readings: Callable[[], Iterable[RankCollectives]] | None = None,
    ) -> None:
        self._say = say
        self._readings = readings
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
        workers: int = 32,
    ) -> StackDump:
        """Dump ``targets`` (rank -> pid) now, from this thread (``workers`` ranks at
        once), and save the dump if any rank could be read (the returned dump's ``path``;
        "" when nothing was saved)."""
        dump = dump_stacks(targets, native=native, nonblocking=nonblocking,
                           timeout_s=timeout_s, reason=reason, workers=workers)
        if self._readings is not None and dump.captured:
            dump = regrouped(dump, self._readings())
        run_dir = self._run_dir()
        if dump.captured and run_dir:
            try:
                dump = save_dump(dump, run_dir)
            except OSError as e:
                log.warning("stack dump not saved under %s: %s", run_dir, e)
        return dump

    def before_kill(self, targets: dict[int, int], deadline: float, why: str) -> None:
        """Start a dump of ``targets``, to be over before ``deadline`` (``clock.monotonic``).

        ``targets`` are keyed as a person knows the ranks: the dump names them so. Called
        with its owner's lock held: only starts a thread.
        """
        left = deadline - clock.monotonic() - _MARGIN_S
        if left < MIN_DUMP_S or not targets:
            return
        thread = threading.Thread(
            target=self._capture, args=(dict(targets), left, why),
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
            odd = outside_collective(dump)
            if odd is not None:
                message += f"; {odd.words()}"
        elif dump.problem:
            message = (f"rank(s) {_joined(sorted(targets))}: no stack before SIGKILL: "
                       f"{dump.problem}")
        else:
            return  # they exited meanwhile: nothing to keep, nothing to say
        self._say(message)

    def join(self, timeout_s: float) -> None:
        """Wait (bounded) for captures in flight: each ends before its deadline anyway."""
        end = clock.monotonic() + timeout_s
        with self._lock:
            threads = list(self._threads)
        for t in threads:
            t.join(max(0.0, end - clock.monotonic()))
