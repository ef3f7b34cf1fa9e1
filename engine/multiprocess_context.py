"""``MultiprocessContext``: ranks that run a Python function, torch's API without torch.

Each rank is a stdlib ``multiprocessing`` process (spawn, fork or forkserver) whose target is
the light ``engine.process.mp_bootstrap.run_rank`` (what happens in the child, and in which
order, is told there); children never import torch unless the user's function does. Return
values come back through one file per rank, replaced atomically by the child and read here
after its exit: no queue and no pipe to deadlock on, and the child never waits for the
parent. What else differs from torch's context on purpose (every failure reported, not the
first; ranks our teardown stopped told apart from failures; a ``wait()`` woken by the exit;
grandchildren killed too) is listed, with its tests, in engine/README.md.

Threads: processes are started on the long-lived spawner thread, because the kernel ties a
rank's PR_SET_PDEATHSIG to the thread that forked it; the exit watcher wakes ``wait``.
``start``/``wait``/``close`` belong to one owner thread at a time. Under ``spawn`` and
``forkserver`` multiprocessing re-imports the parent's ``__main__`` in the child before our
target runs (as for torch's children): the one output that can escape the rank's log files.
As torch's children wait on their "finished reading" event, a child that returned stays until
every rank has (a ``released`` file, made by ``_poll`` or the teardown): exiting at once raced
torch.distributed's threads into a SIGABRT (``RankSpec.release_file``).
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import pickle
import shutil
import signal
import tempfile
import time
from typing import Any, Callable, Final, Optional

from . import clock
from .errors import ProcessFailure
from .logs_specs import LogsSpecs
from .pcontext import PContext, RunProcsResult, ended_result, forget_in_forked_child
from .process import numa
from .process import spawner as _spawner
from .process.mp_bootstrap import RankSpec, run_rank
from .process.rank_process import RankProcess, send_signal_all, wait_any

__all__ = ["MultiprocessContext"]

logger = logging.getLogger(__name__)

_RELEASE: Final = "released"
"""The file in the return directory that lets ranks which returned exit."""

_RELEASE_POLL_S: Final = 0.1
"""Longest sleep of ``wait()`` before the ranks are released: a returned rank waits on it."""

NO_RETURN_MESSAGE: Final = (
    "local_rank {rank} (pid {pid}) exited with code 0 without returning from {fn} "
    "(os._exit(0) or another hard exit), so it has no return value"
)


class _MpPopen:
    """What ``RankProcess`` needs of a Popen, over a ``multiprocessing`` process.

    ``exitcode`` is non-blocking (waitpid WNOHANG under spawn/fork, a ready pipe under
    forkserver) and is negative for a signal death, like ``Popen.poll()``.
    """

    def __init__(self, proc: multiprocessing.process.BaseProcess) -> None:
        self.proc = proc
        self.pid: int = proc.pid  # type: ignore[assignment]

    def poll(self) -> Optional[int]:
        return self.proc.exitcode


class MultiprocessContext(PContext):
    """``PContext`` holding worker processes invoked as a function.

    Args: as ``PContext``, plus ``start_method`` ("spawn", "fork" or "forkserver") and
    ``numa_options`` (ours or torch's ``NumaOptions``). The function must be picklable by
    reference unless ``start_method`` is "fork"; ``envs`` is applied in the child before the
    function and its module are unpickled.
    """

    entrypoint: Callable[..., Any]
    """Always a function here (``PContext`` also allows a binary path)."""

    def __init__(
        self,
        name: str,
        entrypoint: Callable[..., Any],
        args: dict[int, tuple[Any, ...]],
        envs: dict[int, dict[str, str]],
        start_method: str,
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
        self.start_method = start_method
        self._numa_options = numa_options
        self._procs: dict[int, RankProcess] = {}
        self._mp_procs: dict[int, multiprocessing.process.BaseProcess] = {}
        self._return_values: dict[int, Any] = {}
        self._no_return: dict[int, str] = {}
        """Ranks that exited 0 without a usable return value, and why, in words."""
        self._teardown: set[int] = set()
        """Ranks we sent a death signal to while they were alive (not exited, reaped or not:
        ``RankProcess.send_signal``)."""
        self._return_dir: Optional[str] = None
        self._released = False
        self._closed = False

    # -- start ------------------------------------------------------------------------------

    def _start(self) -> None:
        if self._return_dir is not None:
            raise ValueError(
                "The process context already initialized. "
                "Most likely the start method got called twice."
            )
        ctx = multiprocessing.get_context(self.start_method)
        specs = self._rank_specs()

        def start_all() -> None:
            # On the spawner thread: the rank's death signal follows this thread, which
            # lives as long as the interpreter.
            for rank, spec in specs.items():
                # get_context(str) is typed BaseContext, which lacks Process; every context
                # it returns at runtime (fork, spawn, forkserver) has it.
                mp_proc = ctx.Process(  # type: ignore[attr-defined]
                    target=run_rank, args=(spec,), name=f"{self.name}{rank}", daemon=False
                )
                mp_proc.start()
                popen: Any = _MpPopen(mp_proc)  # duck-typed: pid and poll() are all it uses
                proc = RankProcess(popen, (self._fn_name(),), spec.stdout, spec.stderr)
                # Recorded at once: if rank k+1 fails to start, close() reaches 0..k.
                # The spawner hands the job's ranks to the exit watcher when it ends, or
                # SIGKILLs them if our caller was interrupted meanwhile.
                self._mp_procs[rank], self._procs[rank] = mp_proc, proc
                _spawner.current_job_note(proc)

        _spawner.call(start_all)

    def _rank_specs(self) -> dict[int, RankSpec]:
        """Pickle every rank's function and arguments before any process starts.

        An argument that cannot be pickled then raises here and starts nothing.
        """
        fork = self.start_method == "fork"
        # Impossible bindings raise here, before anything starts (as for binary ranks).
        cpus = numa.plan(self._numa_options, self.nprocs)
        payloads = {
            rank: None if fork else pickle.dumps((self.entrypoint, self.args[rank]))
            for rank in range(self.nprocs)
        }
        self._return_dir = tempfile.mkdtemp(prefix=f"rankvisor_{self.name}_ret_")
        # Under forkserver the fork server, not this process, is the rank's parent.
        parent_pid = None if self.start_method == "forkserver" else os.getpid()
        return {
            rank: RankSpec(
                local_rank=rank,
                return_file=self._return_file(rank),
                stdout=self.stdouts[rank],
                stderr=self.stderrs[rank],
                env=dict(self.envs[rank]),
                payload=payloads[rank],
                fn=self.entrypoint if fork else None,
                args=tuple(self.args[rank]) if fork else (),
                parent_pid=parent_pid,
                cpus=cpus[rank],
                forget_parent=forget_in_forked_child if fork else None,
                release_file=self._release_file(),
            )
            for rank in range(self.nprocs)
        }

    def _return_file(self, rank: int) -> str:
        assert self._return_dir is not None
        return os.path.join(self._return_dir, f"{rank}.ret")

    def _release_file(self) -> str:
        assert self._return_dir is not None
        return os.path.join(self._return_dir, _RELEASE)

    def _release_ranks(self, *, all_returned: bool) -> None:
        """Let the ranks that returned exit (``RankSpec.release_file``): once every rank
        has returned (or exited), as torch sets its "finished reading" event, or at once
        for a teardown."""
        if self._released or self._return_dir is None:
            return
        if all_returned and not all(
            p.poll() is not None or os.path.exists(self._return_file(r))
            for r, p in self._procs.items()
        ):
            return
        try:
            with open(self._release_file(), "wb"):
                pass
        except OSError:
            return  # the directory is gone: nobody is waiting on it
        self._released = True

    def _fn_name(self) -> str:
        return str(getattr(self.entrypoint, "__qualname__", repr(self.entrypoint)))

    # -- poll -------------------------------------------------------------------------------

    def _poll(self) -> Optional[RunProcsResult]:
        if not self._procs:
            raise AssertionError("_poll() before start()")
        self._release_ranks(all_returned=True)
        outcomes = {r: self._outcome(r) for r in self._procs}
        failed = [r for r, o in outcomes.items() if o == "failed"]
        if failed:
            logger.error("%s: local ranks %s failed; closing the rest", self.name, failed)
        elif None in outcomes.values() and "stopped" not in outcomes.values():
            return None
        # Either way the run is over: tear down the rest (ranks that die of it are stopped,
        # not failed); close() also reads return values of ranks that just finished.
        self.close()
        return ended_result(
            self._ended(),
            self.stdouts,
            self.stderrs,
            return_values=dict(sorted(self._return_values.items())),
        )

    def _outcome(self, rank: int) -> Optional[str]:
        """None while running, else "ok", "failed" (on its own) or "stopped" (by us)."""
        code = self._procs[rank].poll()
        if code is None:
            return None
        self._collect_return(rank, code)
        if rank in self._return_values:
            # The function returned: a success, even if our signal then caught the process
            # in its shutdown (the value was on disk before the signal).
            return "ok"
        if rank in self._teardown:
            return "stopped"
        return "failed"

    def _collect_returns(self) -> None:
        """Read the return value of every rank that ended since the last call."""
        for rank, proc in self._procs.items():
            code = proc.poll()
            if code is not None:
                self._collect_return(rank, code)

    def _collect_return(self, rank: int, code: int) -> None:
        """Read the return value of ``rank``, which exited with ``code``, once.

        Read for a rank that exited 0, and for one our signal ended (its function may have
        returned before the signal). A rank that exited 0 with nothing on disk failed.
        """
        if rank in self._return_values or rank in self._no_return:
            return
        if code != 0 and rank not in self._teardown:
            return  # failed on its own: whatever it left on disk does not matter
        try:
            with open(self._return_file(rank), "rb") as f:
                self._return_values[rank] = pickle.load(f)
        except FileNotFoundError:
            if code != 0:
                return  # stopped by us before its function returned
            # Exit 0 without a return value is a failure, said in words; torch counts
            # it as neither, and its wait() never returns.
            self._no_return[rank] = NO_RETURN_MESSAGE.format(
                rank=rank, pid=self._procs[rank].pid, fn=self._fn_name()
            )
        except Exception as e:  # any unpickling error is this rank's failure
            self._no_return[rank] = (
                f"local_rank {rank}: cannot load the return value of {self._fn_name()}: "
                f"{type(e).__name__}: {e}"
            )
        else:
            os.unlink(self._return_file(rank))

    def _ended(self) -> dict[int, ProcessFailure]:
        """A record of every rank that ended without success, failed or stopped."""
        ended = {}
        for rank, proc in self._procs.items():
            outcome = self._outcome(rank)
            if outcome not in ("failed", "stopped"):
                continue
            assert proc.exitcode is not None
            failure = ProcessFailure(
                local_rank=rank,
                pid=proc.pid,
                exitcode=proc.exitcode,
                error_file=self.error_files[rank],
                exit_time_ns=proc.exit_time_ns,
                caused_by_us=outcome == "stopped",
            )
            if rank in self._no_return and failure.error_file_data.get("message") == "<NONE>":
                failure.message = self._no_return[rank]
            ended[rank] = failure
        return ended

    # -- wait, pids -------------------------------------------------------------------------

    def _wait_for_exit(self, timeout: float) -> None:
        """Block until a rank exits or ``timeout`` s pass (``PContext.wait``'s sleep)."""
        live = [p for p in self._procs.values() if p.poll() is None]
        if live:
            # A rank that returned does not exit until released, which a poll does: look
            # again soon, as torch's join(period) would not wake for it either.
            wait_any(live, timeout if self._released else min(timeout, _RELEASE_POLL_S))
        else:
            time.sleep(0)  # everyone is gone: the next poll returns at once

    def pids(self) -> dict[int, int]:
        """Local rank -> pid of every started rank."""
        if not self._procs:
            raise AssertionError("pids() before start()")
        return {rank: proc.pid for rank, proc in self._procs.items()}

    # -- close ------------------------------------------------------------------------------

    def _close(self, death_sig: signal.Signals, timeout: float = 30) -> None:
        if self._closed:
            return
        self._closed = True
        self._release_ranks(all_returned=False)
        alive = [p for p in self._procs.values() if p.poll() is None]
        for proc in alive:
            logger.warning("Closing process %s via signal %s", proc.pid, death_sig.name)
        # The rank through its pidfd, its group (while the rank is unreaped, so the pgid
        # is still its own), and descendants that left the group, from one /proc scan.
        signalled = send_signal_all(alive, death_sig, group=True)
        self._teardown.update(r for r, p in self._procs.items() if p in signalled)
        # One shared deadline for all ranks (torch waits per rank after SIGKILL).
        _wait_all(alive, timeout)
        survivors = [p for p in alive if p.poll() is None]
        for proc in survivors:
            logger.warning(
                "Unable to shutdown process %s via %s, forcefully exiting via %s",
                proc.pid,
                death_sig.name,
                signal.SIGKILL.name,
            )
        send_signal_all(survivors, signal.SIGKILL, group=True)
        # Bounded: a process stuck in the kernel (D state) survives even SIGKILL; give up
        # after ``timeout`` instead of hanging whoever closes us.
        _wait_all(survivors, timeout)
        for proc in survivors:
            if proc.poll() is None:
                logger.error(
                    "Process %s did not exit after SIGKILL within %ss; abandoning it "
                    "(uninterruptible sleep?)",
                    proc.pid,
                    timeout,
                )
        self._release()

    def _release(self) -> None:
        # Read return values of ranks that finished during the teardown before the files go.
        self._collect_returns()
        for rank, proc in self._procs.items():
            if proc.poll() is None:
                continue  # abandoned in the kernel: keep its pidfd, it is still ours
            proc.close()
            self._mp_procs[rank].close()  # the sentinel fd
        if self._return_dir is not None:
            shutil.rmtree(self._return_dir, ignore_errors=True)


def _wait_all(procs: list[RankProcess], timeout: float) -> None:
    """Wait until every one of ``procs`` has exited or ``timeout`` s have passed."""
    deadline = clock.monotonic() + max(0.0, timeout)
    pending = [p for p in procs if p.poll() is None]
    while pending:
        remaining = deadline - clock.monotonic()
        if remaining <= 0:
            return
        wait_any(pending, remaining)
        pending = [p for p in pending if p.poll() is None]
