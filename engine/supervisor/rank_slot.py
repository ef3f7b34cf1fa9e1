"""One rank as the Supervisor sees it: its current process, its state, its files.

A slot outlives the processes that fill it: a restarted rank keeps its slot and its
``restart_count`` while ``proc`` changes. Its life (state, stop reason, signals, exit) is
the kernel's record (``engine.kernel.run.RankLife``), which it extends: every state change
goes through ``RankLife.to``, checked against ``engine.states.TRANSITIONS``, and ``changed``
makes the ``RankStateChanged`` event to publish.

Not thread-safe on its own: the run's state lock (``RunState.lock``) guards every slot.
"""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .. import clock
from ..events import RankStateChanged
from ..handle import RankInfo
from ..kernel.run import AfterExit, InvalidTransition, RankLife, StopReason
from ..names.signals import exit_signal_name
from ..process.sig_disposition import catches
from ..states import RankState

if TYPE_CHECKING:
    from ..errors import ProcessFailure
    from ..events import InputWait
    from ..forensics.exit_cause import ExitCause
    from ..process.rank_process import RankProcess
    from ..process.stdin_pipe import RankStdin

__all__ = ["AfterExit", "InvalidTransition", "RankSlot", "StopReason", "incarnation_dir"]


@dataclass(slots=True)
class RankSlot(RankLife):
    """One rank's life as the kernel keeps it (``engine.kernel.run.RankLife``: state,
    stop reason, signals, exit), plus what only the edge holds: its process and files.

    Attributes:
        argv: The command line, entrypoint first; the same for every incarnation.
        env: The per-rank environment additions (over ``os.environ``) of the current
            incarnation, ``TORCHELASTIC_ERROR_FILE`` included.
        proc: The current process, None before the first spawn.
        exit_cause: Why the current process ended, in words (set with the exit).
        started_monotonic: ``clock.monotonic()`` just before the current spawn (the kernel
            log's records of an OOM kill are compared with it).
        timer_scope: The torch file-timer scope whose watchdog killed this process.
    """

    argv: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    proc: RankProcess | None = None
    stdout_path: str = ""
    stderr_path: str = ""
    error_file: str = ""
    failure: ProcessFailure | None = None
    user_signals: set[int] = field(default_factory=set)
    """Signals a person sent with SignalRanks: dying of one of them is our doing too."""
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
        caught = None
        if stop and self.stop_signal_ns is None and self.proc is not None and (
                sig != signal.SIGKILL):
            caught = catches(self.proc.pid, int(sig))
        self.noted(sig, sent_ns, stop=stop, caught=caught)

    def exit_caused_by_us(self, code: int, exit_time_ns: int | None) -> bool:
        """Whether an exit was plausibly our doing (``RankLife.exit_is_ours``). The
        watchdog's kills are never ours: they are not in ``signals_ns``."""
        return self.exit_is_ours(code, exit_time_ns)

    def move(self, new: RankState) -> RankStateChanged:
        """Change state, checked against ``TRANSITIONS``; return the event to publish."""
        return self.changed(self.to(new), new)

    def changed(self, old: RankState, new: RankState) -> RankStateChanged:
        """The event of a move already made (by ``move`` or by the kernel)."""
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
        self.reset(attempt, incarnation)
        self.stdout_path, self.stderr_path, self.error_file = paths
        self.env["TORCHELASTIC_ERROR_FILE"] = self.error_file
        self.proc = None
        self.stdin = None
        self.input_wait = None
        self.failure = None
        self.user_signals = set()
        self.exit_cause = None
        self.started_monotonic = clock.monotonic()
        self.timer_scope = None

    def info(self) -> RankInfo:
        """The plain-data view a UI gets from ``snapshot()``."""
        final = self.state.is_final
        # A live rank's reading may be the stats sample's; an ended one's is its last.
        age = 0.0 if final else SNAPSHOT_MEMORY_AGE_S
        memory = self.proc.memory(age) if self.proc is not None else None
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


SNAPSHOT_MEMORY_AGE_S = 6.0
"""A snapshot takes a rank's memory reading (its OOM kills) from the stats sample when it is
this recent: the sample comes every 5 s at the slowest (nobody watching)."""


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
