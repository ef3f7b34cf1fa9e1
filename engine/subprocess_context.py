"""``SubprocessContext``: binary ranks with torch's semantics, fixed where torch leaks.

* Everything that can be checked is checked before the first rank starts: every rank's
  program exists and is executable (a clear error naming the path and the rank), and every
  rank's NUMA CPU set can be computed.
* Ranks are started one by one and recorded as they start, so if rank k fails to start the
  ranks before it are closed, not leaked. All ranks are forked by the one spawner thread
  in one hand-over (see ``engine.process.rank_process``).
* ``wait()`` blocks on the ranks' pidfds: an exit is seen within milliseconds, not a period.
* Every rank that failed on its own is in ``failures`` (torch's record). A rank our own
  teardown (or ``close()``) signalled while it was still running is not a failure: it is in
  ``stopped``, with ``caused_by_us=True``, whatever code it then exits with. torch lists
  such ranks among the failures (SIGTERM, -15), and which ranks it catches depends on how
  soon it polls after the first failure; we notice that failure within a millisecond, so a
  rank that was about to exit 0 is often still running then. A rank whose exit came before
  our signal reached it (reaped or not: ``RankProcess.send_signal``) keeps its own outcome:
  exit 0 is a success, anything else its own failure. Each record carries the exit time in
  ns.
* Signals go through pidfds and to the whole group and its descendants; a rank that exited
  meanwhile is skipped, never an error; no file handle stays open (engine/README.md).
"""

from __future__ import annotations

import logging
import os
import signal
import time
from typing import Any, Optional

from . import clock
from .errors import ChildFailedError, ProcessFailure
from .logs_specs import LogsSpecs
from .pcontext import PContext, RunProcsResult, ended_result
from .process import numa
from .process.rank_process import (
    RankProcess,
    on_spawner_thread,
    resolve_program,
    send_signal_all,
    wait_any,
)
from .subprocess_handler import SubprocessHandler

__all__ = ["SubprocessContext"]

logger = logging.getLogger(__name__)


class SubprocessContext(PContext):
    """``PContext`` holding worker processes invoked as a binary.

    Args: as ``PContext``, plus ``numa_options`` (ours or torch's ``NumaOptions``).
    """

    def __init__(
        self,
        name: str,
        entrypoint: str,
        args: dict[int, tuple[Any, ...]],
        envs: dict[int, dict[str, str]],
        logs_specs: LogsSpecs,
        log_line_prefixes: Optional[dict[int, str]] = None,
        numa_options: Any = None,
        duplicate_stdout_filters: Optional[list[str]] = None,
        duplicate_stderr_filters: Optional[list[str]] = None,
    ) -> None:
        super().__init__(
            name,
            entrypoint,
            args,
            envs,
            logs_specs,
            log_line_prefixes,
            duplicate_stdout_filters,
            duplicate_stderr_filters,
        )
        self._running_local_ranks: set[int] = set(range(self.nprocs))
        self._failures: dict[int, ProcessFailure] = {}
        """Every rank that ended with a non-zero code: failed on its own, or stopped by us."""
        self.subprocess_handlers: dict[int, SubprocessHandler] = {}
        self._numa_options = numa_options
        self._torn_down: set[int] = set()
        """Ranks that our close() signalled while they were alive (``send_signal`` returned
        True: not exited, reaped or not, when the signal went out)."""

    # -- start ------------------------------------------------------------------------------

    def _start(self) -> None:
        if self.subprocess_handlers:
            raise ValueError(
                "The subprocess handlers already initialized. Most likely the start method got"
                " called twice."
            )
        entrypoint = str(self.entrypoint)
        checked: set[Optional[str]] = set()  # one PATH search per distinct PATH, not per rank
        for rank in range(self.nprocs):
            path = self.envs[rank].get("PATH", os.environ.get("PATH"))
            if path in checked:
                continue
            checked.add(path)
            try:
                resolve_program(entrypoint, path, None)
            except OSError as e:
                # Same exception type (callers catching FileNotFoundError keep working),
                # with the rank and the path in the message.
                raise type(e)(
                    e.errno, f"local rank {rank}: cannot run entrypoint: {e.strerror}", entrypoint
                ) from None
        cpus = numa.plan(self._numa_options, self.nprocs)

        def start_all() -> None:
            for rank in range(self.nprocs):
                # Recorded one by one, so close() reaches every rank already started.
                self.subprocess_handlers[rank] = SubprocessHandler(
                    entrypoint=entrypoint,
                    args=self.args[rank],
                    env=self.envs[rank],
                    stdout=self.stdouts[rank],
                    stderr=self.stderrs[rank],
                    local_rank_id=rank,
                    numa_options=None,
                    cpu_affinity=cpus[rank],
                )

        try:
            on_spawner_thread(start_all)
        except BaseException:
            # Ranks 0..k-1 are running; do not leave them behind.
            self._close(signal.SIGKILL, timeout=5)
            raise

    # -- poll -------------------------------------------------------------------------------

    def _rank_process(self, rank: int) -> RankProcess:
        return self.subprocess_handlers[rank].rank_process

    def _capture_process_failures(self, done_local_ranks: set[int]) -> None:
        for rank in self._running_local_ranks:
            proc = self._rank_process(rank)
            exitcode = proc.poll()
            if exitcode is None:
                continue
            done_local_ranks.add(rank)
            if exitcode != 0 and rank not in self._failures:
                self._failures[rank] = ProcessFailure(
                    local_rank=rank,
                    pid=proc.pid,
                    exitcode=exitcode,
                    error_file=self.error_files[rank],
                    exit_time_ns=proc.exit_time_ns,
                    caused_by_us=rank in self._torn_down,
                )

    def _poll(self) -> Optional[RunProcsResult]:
        if not self.subprocess_handlers:
            return None
        done: set[int] = set()
        self._capture_process_failures(done)
        self._running_local_ranks.difference_update(done)
        if self._running_local_ranks and not self._failures:
            return None
        # All done, or one failed: tear down the rest, then record how they ended too (the
        # ones our signal ended go to ``stopped``, apart from the failures).
        self.close()
        self._capture_process_failures(done)
        self._running_local_ranks.difference_update(done)
        result = ended_result(
            self._failures,
            self.stdouts,
            self.stderrs,
            return_values=dict.fromkeys(range(self.nprocs)),
        )
        if result.is_failed():
            _, first = ChildFailedError(str(self.entrypoint), result.failures).get_first_failure()
            logger.error(
                "failed (exitcode: %s) local_rank: %s (pid: %s) of binary: %s",
                first.exitcode,
                first.local_rank,
                first.pid,
                self.entrypoint,
            )
        return result

    def _wait_for_exit(self, timeout: float) -> None:
        live = [
            self._rank_process(r)
            for r in self._running_local_ranks
            if r in self.subprocess_handlers
        ]
        if live:
            wait_any(live, timeout)
        else:
            time.sleep(timeout)

    def pids(self) -> dict[int, int]:
        """The pid of each started rank."""
        return {rank: h.proc.pid for rank, h in self.subprocess_handlers.items()}

    # -- close ------------------------------------------------------------------------------

    def _close(self, death_sig: signal.Signals, timeout: float = 30) -> None:
        procs = {r: h.rank_process for r, h in self.subprocess_handlers.items()}
        try:
            self._stop(procs, death_sig, timeout)
        finally:
            for p in procs.values():
                if p.exitcode is not None:
                    p.close()  # release the pidfd: nothing stays open for exited ranks

    def _stop(
        self, procs: dict[int, RankProcess], death_sig: signal.Signals, timeout: float
    ) -> None:
        live = {r: p for r, p in procs.items() if p.poll() is None}
        if not live:
            return
        for p in live.values():
            logger.warning("Sending process %s closing signal %s", p.pid, death_sig.name)
        self._signal(live, death_sig)
        # One deadline shared by all ranks (not per rank), on the monotonic clock.
        _wait_all(live.values(), clock.monotonic() + timeout)
        survivors = {r: p for r, p in live.items() if p.poll() is None}
        if not survivors:
            return
        for p in survivors.values():
            logger.warning(
                "Unable to shutdown process %s via %s, forcefully exiting via %s",
                p.pid,
                death_sig,
                signal.SIGKILL,
            )
        self._signal(survivors, signal.SIGKILL)
        # Bounded: a process stuck in uninterruptible sleep (D state, e.g. a wedged GPU or
        # NIC driver) is not reaped even after SIGKILL; give up instead of hanging.
        _wait_all(survivors.values(), clock.monotonic() + timeout)
        for p in survivors.values():
            if p.poll() is None:
                logger.error(
                    "Process %s did not exit after %s within %ss; abandoning and continuing"
                    " teardown. Worker may be in uninterruptible kernel sleep (e.g. wedged on"
                    " GPU/NIC); host may need to be recycled.",
                    p.pid,
                    signal.SIGKILL.name,
                    timeout,
                )

    def _signal(self, procs: dict[int, RankProcess], sig: signal.Signals) -> None:
        signalled = send_signal_all(procs.values(), sig, group=True)
        self._torn_down.update(r for r, p in procs.items() if p in signalled)


def _wait_all(procs: Any, deadline: float) -> None:
    # Exits are noticed by the watcher thread (wait_any); no waitpid a rank here.
    pending = [p for p in procs if p.exitcode is None]
    while pending:
        remaining = deadline - clock.monotonic()
        if remaining <= 0:
            return
        wait_any(pending, remaining)
        pending = [p for p in pending if p.exitcode is None]
