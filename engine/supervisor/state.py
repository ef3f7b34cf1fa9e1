"""What every part of the Supervisor shares: the run's state under one lock, and a wake-up.

``RunState`` is the run kernel (``engine.kernel.run``: the slots' lives, the attempt, the
flags and escalations that decide what happens next) with the edge's own fields; every part
(commands, monitor, launcher, stopper) reads and changes it only while holding
``RunState.lock``. ``Wakeup`` (``engine.process.wakeup``) is the pipe the monitor thread
polls besides the ranks' pidfds: anything that changes what the monitor must do (a command,
a spawn, a handled signal, ``shutdown``) wakes it.
"""

from __future__ import annotations

import threading

from ..events import RunFinished
from ..forensics.activity import OutputActivity
from ..forensics.pauses import PauseLog
from ..forensics.suspect import SignalRecord
from ..kernel.run import RunKernel
from ..logs_specs import LogsDest
from ..process.wakeup import Wakeup
from .rank_slot import RankSlot

__all__ = ["RunState", "Wakeup"]


class RunState(RunKernel[RankSlot]):
    """The mutable state of one run: the kernel's (``engine.kernel.run.RunKernel``: the
    lives, the flags, the escalations), plus what only the edge holds. Every field is
    guarded by ``lock``.

    Args:
        slots: One slot per rank, keyed by rank.
        max_restarts: Restarts of the whole group the policy may make.
    """

    def __init__(
        self,
        slots: dict[int, RankSlot],
        max_restarts: int,
        *,
        term_timeout_s: float = 30.0,
        kill_wait_s: float = 5.0,
        teardown_on_failure: bool = True,
    ) -> None:
        super().__init__(slots, max_restarts=max_restarts, term_timeout_s=term_timeout_s,
                         kill_wait_s=kill_wait_s, teardown_on_failure=teardown_on_failure)
        self.lock = threading.RLock()
        self.changed = threading.Condition(self.lock)
        """Notified whenever the monitor has brought things up to date (``shutdown`` waits
        on it for the ranks to end)."""
        self.slots = slots
        self.started_at = 0.0
        """``clock.wall()`` when ``start`` ran (what a late viewer counts elapsed time from)."""
        self.closed = False
        self.dest: LogsDest | None = None
        """The current attempt's file paths, once it was started."""
        self.finished: RunFinished | None = None
        self.finished_event = threading.Event()
        """Set once ``finished`` was delivered to every sink (``Supervisor.wait``)."""
        self.received_signal: int | None = None
        self.round_result: RunFinished | None = None
        """In a driven run: how the current round ended (every rank final), not published."""
        self.activity = OutputActivity()
        """When each rank's output last moved in this attempt (its own lock: the pump's
        thread notes batches without taking this one)."""
        self.signal_log: list[SignalRecord] = []
        """Every signal sent to ranks in this attempt, by whom and why (the suspect's
        evidence: what a person did before the first failure)."""
        self.pauses = PauseLog()
        """The ranks a person paused (at a prompt, or by SIGSTOP), folded from the run's
        own published events (its own lock: detectors publish from their threads)."""

    def live(self) -> list[RankSlot]:
        """The slots whose process is running (or stopping): a slot a failed start left
        without a process never exits, so it is not waited for."""
        return [s for s in self.slots.values() if s.alive and s.proc is not None]

    def slot_by_pid(self, pid: int) -> RankSlot | None:
        """The live slot whose process is ``pid``, if any."""
        return next((s for s in self.slots.values() if s.pid == pid and s.alive), None)

    def not_finished(self) -> None:
        """Something starts again: the run is no longer finished (``wait`` blocks again)."""
        self.finished = None
        self.finished_event.clear()
