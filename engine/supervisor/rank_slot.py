"""One rank as the Supervisor sees it: its current process, its state, its files.

A slot outlives the processes that fill it: a restarted rank keeps its slot and its
``restart_count`` while ``proc`` changes. Every state change goes through ``move``, which
checks ``engine.states.TRANSITIONS`` and returns the ``RankStateChanged`` event to publish,
so there is exactly one place where a state can change and it cannot skip a step.

Not thread-safe on its own: the run's state lock (``RunState.lock``) guards every slot.
"""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from .. import clock
from ..events import RankStateChanged
from ..handle import RankInfo
from ..kernel import policy
from ..names.signals import exit_signal_name
from ..process.sig_disposition import catches
from ..states import RankState, can_move

if TYPE_CHECKING:
    from ..errors import ProcessFailure
    from ..events import InputWait
    from ..forensics.exit_cause import ExitCause
    from ..process.rank_process import RankProcess
    from ..process.stdin_pipe import RankStdin

__all__ = ["AfterExit", "InvalidTransition", "RankSlot", "StopReason", "incarnation_dir"]

AfterExit = Literal["restart", "attempt", None]
"""What to do once the current process exits: start it again alone, wait for the new
attempt, or nothing (record the exit)."""

StopReason = Literal["terminate", "kill", "restart", "attempt", "teardown", "shutdown", "signal"]
"""Why the current process was asked to stop ("signal": a person's signal that ended it)."""


class InvalidTransition(RuntimeError):
    """A move not in ``TRANSITIONS``: a bug in the Supervisor, never a user error."""


@dataclass(slots=True)
class RankSlot:
    """The mutable record of one rank.

    Attributes:
        rank: Local rank (== global rank: one node).
        argv: The command line, entrypoint first; the same for every incarnation.
        env: The per-rank environment additions (over ``os.environ``) of the current
            incarnation, ``TORCHELASTIC_ERROR_FILE`` included.
        state: Where the rank is (see ``engine.states``).
        proc: The current process, None before the first spawn.
        attempt: The attempt (``attempt_<n>``) this incarnation belongs to.
        incarnation: Restarts of this rank alone within the attempt.
        restart_count: Every restart of this rank, alone or with its attempt.
        stop_reason: Why we asked the current process to stop ("terminate", "kill",
            "restart", "attempt", "teardown", "shutdown"; "signal" when a person's signal
            ended it); None when we did not. Asking is not enough to make its exit ours:
            see ``exit_caused_by_us``.
        after_exit: What the monitor does when the current process exits.
        signals_ns: Each signal we actually delivered to the current process (stop
            requests and SignalRanks; never the watchdog's, whose kill is the rank's own
            failure), with the ``clock.wall_ns()`` of its first delivery, as
            ``RankProcess.signals_sent`` stamped it.
        stop_signal_ns: When the first stop signal (SIGTERM, the forwarded signal, SIGKILL)
            was delivered; None while none was.
        caused_by_us: Whether the exit was our doing (set when it is recorded).
        exit_cause: Why the current process ended, in words (set with the exit).
        started_monotonic: ``clock.monotonic()`` just before the current spawn (the kernel
            log's records of an OOM kill are compared with it).
        timer_scope: The torch file-timer scope whose watchdog killed this process.
    """

    rank: int
    argv: tuple[str, ...]
    env: dict[str, str]
    state: RankState = RankState.STARTING
    proc: RankProcess | None = None
    attempt: int = 0
    incarnation: int = 0
    restart_count: int = 0
    stdout_path: str = ""
    stderr_path: str = ""
    error_file: str = ""
    exitcode: int | None = None
    exit_time_ns: int | None = None
    failure: ProcessFailure | None = None
    stop_reason: StopReason | None = None
    after_exit: AfterExit = None
    user_signals: set[int] = field(default_factory=set)
    """Signals a person sent with SignalRanks: dying of one of them is our doing too."""
    signals_ns: dict[int, int] = field(default_factory=dict)
    stop_signal_ns: int | None = None
    stop_caught: bool | None = None
    """Whether the process had a handler for its first stop signal when it was sent (None:
    not known, or the first was SIGKILL)."""
    caused_by_us: bool = False
    exit_cause: ExitCause | None = None
    started_monotonic: float | None = None
    timer_scope: str | None = None
    history: list[tuple[RankState, RankState, float]] = field(default_factory=list)
    stdin: RankStdin | None = None
    """The current process's stdin pipe (``--stdin pipe``), None otherwise."""
    input_wait: InputWait | None = None
    """Set while the current process is blocked reading ``stdin`` (the input watch)."""

    @property
    def pid(self) -> int | None:
        return None if self.proc is None else self.proc.pid

    def note_signal(self, sig: int, *, stop: bool) -> None:
        """Record that ``sig`` was just delivered to ``proc`` (the caller holds the lock
        under which it was sent, so the matching ``signals_sent`` entry is the last one)."""
        sent = self.proc.signals_sent if self.proc is not None else []
        sent_ns = next((t for s, t in reversed(sent) if s == int(sig)), None)
        if sent_ns is None:
            sent_ns = clock.wall_ns()
        self.signals_ns.setdefault(int(sig), sent_ns)
        if stop and self.stop_signal_ns is None:
            self.stop_signal_ns = sent_ns
            if self.proc is not None and sig != signal.SIGKILL:
                self.stop_caught = catches(self.proc.pid, int(sig))

    def exit_caused_by_us(self, code: int, exit_time_ns: int | None) -> bool:
        """Whether an exit with ``code``, seen at ``exit_time_ns``, was plausibly our doing
        (``engine.kernel.policy.exit_is_ours``, from what this slot recorded). The
        watchdog's kills are never ours: they are not in ``signals_ns``."""
        return policy.exit_is_ours(
            code, exit_time_ns, self.signals_ns, self.stop_signal_ns, self.stop_caught
        )

    @property
    def alive(self) -> bool:
        return self.state.is_alive

    def move(self, new: RankState) -> RankStateChanged:
        """Change state, checked against ``TRANSITIONS``; return the event to publish."""
        old = self.state
        if not can_move(old, new):
            raise InvalidTransition(f"rank {self.rank}: {old.value} -> {new.value}")
        self.state = new
        now = clock.wall()
        self.history.append((old, new, now))
        final = new.is_final
        return RankStateChanged(
            rank=self.rank,
            old=old,
            new=new,
            pid=self.pid,
            exitcode=self.exitcode if final else None,
            signal_name=exit_signal_name(self.exitcode) if final else None,
            restart_count=self.restart_count,
            attempt=self.attempt,
            failure=self.failure if final else None,
            caused_by_us=self.caused_by_us if final else False,
            t=now,
            exit_cause=self.exit_cause if final else None,
        )

    def begin_incarnation(
        self, attempt: int, incarnation: int, paths: tuple[str, str, str]
    ) -> None:
        """Reset the per-process fields before a (re)spawn into ``paths`` (out, err, error)."""
        self.attempt = attempt
        self.incarnation = incarnation
        self.stdout_path, self.stderr_path, self.error_file = paths
        self.env["TORCHELASTIC_ERROR_FILE"] = self.error_file
        self.proc = None
        self.stdin = None
        self.input_wait = None
        self.exitcode = None
        self.exit_time_ns = None
        self.failure = None
        self.stop_reason = None
        self.after_exit = None
        self.user_signals = set()
        self.signals_ns = {}
        self.stop_signal_ns = None
        self.stop_caught = None
        self.caused_by_us = False
        self.exit_cause = None
        self.started_monotonic = clock.monotonic()
        self.timer_scope = None

    def info(self) -> RankInfo:
        """The plain-data view a UI gets from ``snapshot()``."""
        final = self.state.is_final
        memory = self.proc.memory() if self.proc is not None else None
        oom_kills = memory.oom_kills if memory is not None else None
        return RankInfo(
            rank=self.rank,
            state=self.state,
            pid=self.pid,
            restart_count=self.restart_count,
            attempt=self.attempt,
            stdout_path=self.stdout_path,
            stderr_path=self.stderr_path,
            error_file=self.error_file,
            exitcode=self.exitcode if final else None,
            signal_name=exit_signal_name(self.exitcode) if final else None,
            oom_kills=oom_kills,
            oom_killed=bool(
                final and oom_kills and self.exitcode == -signal.SIGKILL
                and signal.SIGKILL not in self.signals_ns
            ),
            exit_cause=self.exit_cause if final else None,
            input_wait=self.input_wait,
        )


def incarnation_dir(attempt_rank_dir: str, incarnation: int | None) -> str:
    """Where a rank writes: its attempt's rank dir, or ``restart_<k>/`` inside it.

    An attempt's first incarnation of a rank uses torch's layout
    (``attempt_<n>/<rank>/stdout.log``); a rank restarted alone writes to
    ``attempt_<n>/<rank>/restart_<k>/``, k being its number of restarts alone within that
    attempt (``RankSlot.incarnation``): the first in any attempt is ``restart_1``. It is not
    the ``RANKVISOR_RESTART_COUNT`` the rank sees, which also counts the restarts of earlier
    attempts. No file once written is moved or overwritten, so a path always names the
    same incarnation.
    """
    if not incarnation:
        return attempt_rank_dir
    return os.path.join(attempt_rank_dir, f"restart_{incarnation}")
