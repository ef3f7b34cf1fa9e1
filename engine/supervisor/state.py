"""What every part of the Supervisor shares: the run's state under one lock, and a wake-up.

``RunState`` holds the slots, the attempt and the flags that decide what happens next; every
part (commands, monitor, launcher, stopper) reads and changes it only while holding
``RunState.lock``. ``Wakeup`` (``engine.process.wakeup``) is the pipe the monitor thread
polls besides the ranks' pidfds: anything that changes what the monitor must do (a command,
a spawn, a handled signal, ``shutdown``) wakes it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

from ..events import RunFinished
from ..forensics.activity import OutputActivity
from ..forensics.pauses import PauseLog
from ..forensics.suspect import SignalRecord
from ..logs_specs import LogsDest
from ..process.wakeup import Wakeup
from .rank_slot import RankSlot

__all__ = ["RunState", "Wakeup"]


class RunState:
    """The mutable state of one run. Every field is guarded by ``lock``.

    Args:
        slots: One slot per rank, keyed by rank.
        max_restarts: Restarts of the whole group the policy may make.
    """

    def __init__(self, slots: dict[int, RankSlot], max_restarts: int) -> None:
        self.lock = threading.RLock()
        self.changed = threading.Condition(self.lock)
        """Notified whenever the monitor has brought things up to date (``shutdown`` waits
        on it for the ranks to end)."""
        self.slots = slots
        self.started = False
        self.started_at = 0.0
        """``clock.wall()`` when ``start`` ran (what a late viewer counts elapsed time from)."""
        self.closed = False
        self.shutting_down = False
        """Set by ``shutdown`` or a handled signal: nothing may start again."""
        self.attempt = 0
        self.attempt_pending = False
        """A restart of every rank was asked: the next attempt starts once all have exited."""
        self.restarts_left = max_restarts
        self.dest: LogsDest | None = None
        """The current attempt's file paths, once it was started."""
        self.finished: RunFinished | None = None
        self.finished_event = threading.Event()
        """Set once ``finished`` was delivered to every sink (``Supervisor.wait``)."""
        self.received_signal: int | None = None
        self.rank_base = 0
        """In a multi-node run: the global rank of local rank 0 in the current round (0 on
        one node). Slots, commands and events keep local ranks; what a person reads (notices,
        refusals, stack dumps) names ``rank_base + rank``, the rank the job knows."""
        self.driven = False
        """Driven by an agent (multi-node): no restart policy and no RunFinished of our own;
        each round ends in ``round_result`` and the agent decides what comes next."""
        self.round_result: RunFinished | None = None
        """In a driven run: how the current round ended (every rank final), not published."""
        self.restart_requested = False
        """In a driven run: a person asked for a new round (RestartAll), for the agent."""
        self.signals_pending: list[int] = []
        """Handled signals not yet acted on (appended by the signal handler, without the
        lock: a list append is atomic, and a handler must never wait for a lock)."""
        self.activity = OutputActivity()
        """When each rank's output last moved in this attempt (its own lock: the pump's
        thread notes batches without taking this one)."""
        self.signal_log: list[SignalRecord] = []
        """Every signal sent to ranks in this attempt, by whom and why (the suspect's
        evidence: what a person did before the first failure)."""
        self.teardown_held = False
        """A teardown after a failure waits for a debug hold (a rank at its post-mortem
        prompt) to end; the monitor carries it out once none is left."""
        self.pauses = PauseLog()
        """The ranks a person paused (at a prompt, or by SIGSTOP), folded from the run's
        own published events (its own lock: detectors publish from their threads)."""

    def shown(self, rank: int) -> int:
        """``rank`` (local) as a person knows it: its global rank in a multi-node run."""
        return self.rank_base + rank

    def ranks_text(self, ranks: Iterable[int]) -> str:
        """Local ranks as a person reads them: "1, 2" (global numbers on many nodes)."""
        return ", ".join(str(self.rank_base + r) for r in ranks)

    @property
    def real_failure(self) -> bool:
        """A rank's current incarnation failed on its own (not by our signal).

        Derived, never stored: a rank that failed and was then restarted by hand holds no
        failure any more, so stopping the run afterwards must not trigger the restart policy.
        """
        return any(
            s.failure is not None and not s.failure.caused_by_us for s in self.slots.values()
        )

    def live(self) -> list[RankSlot]:
        """The slots whose process is running (or stopping)."""
        return [s for s in self.slots.values() if s.alive and s.proc is not None]

    def slot_by_pid(self, pid: int) -> RankSlot | None:
        """The live slot whose process is ``pid``, if any."""
        return next((s for s in self.slots.values() if s.pid == pid and s.alive), None)

    def not_finished(self) -> None:
        """Something starts again: the run is no longer finished (``wait`` blocks again)."""
        self.finished = None
        self.finished_event.clear()
