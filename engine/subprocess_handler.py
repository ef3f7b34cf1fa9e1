"""torch's ``SubprocessHandler`` / ``get_subprocess_handler``, on top of ``RankProcess``.

Same constructor and attributes (``proc`` is the ``Popen``, ``local_rank_id``), same
``close(death_sig)`` (signals the whole process group). Differences: the fork happens on
the long-lived spawner thread with a death signal (``engine.process``); the log files are
closed in the parent right after the spawn (so ``_stdout``/``_stderr`` are None: nothing
leaks for ranks that exited, as torch's do); ``close`` on a rank that already exited is a no-op
instead of a ``ProcessLookupError``; NUMA binding is CPU affinity, not ``numactl``.
"""

from __future__ import annotations

import os
import signal
import subprocess
from typing import IO, Any, Collection, Optional

from .process import numa
from .process.rank_process import RankProcess

__all__ = ["SubprocessHandler", "get_subprocess_handler"]


class SubprocessHandler:
    """One binary rank, started in its own session.

    Args:
        entrypoint: the program.
        args: its arguments (each ``str()``-ed).
        env: variables laid over ``os.environ``.
        stdout: file for stdout, or ""/None for the console.
        stderr: file for stderr, or ""/None for the console.
        local_rank_id: the local rank (also the GPU index for NUMA binding).
        numa_options: bind the rank to its NUMA node's CPUs.
        cpu_affinity: a CPU set computed already (``engine.process.numa.plan``); wins over
            ``numa_options``.
        log_mode: "w" (torch) truncates the log files, "a" appends.
    """

    def __init__(
        self,
        entrypoint: str,
        args: tuple[Any, ...],
        env: dict[str, str],
        stdout: Optional[str],
        stderr: Optional[str],
        local_rank_id: int,
        numa_options: Any,
        *,
        cpu_affinity: Optional[Collection[int]] = None,
        log_mode: str = "w",
    ) -> None:
        self.local_rank_id = local_rank_id
        if cpu_affinity is None and numa_options is not None:
            nprocs = int(env.get("LOCAL_WORLD_SIZE") or os.environ.get("LOCAL_WORLD_SIZE")
                         or local_rank_id + 1)
            cpu_affinity = numa.plan(numa_options, max(nprocs, local_rank_id + 1))[local_rank_id]
        self.rank_process = RankProcess.spawn(
            (entrypoint, *[str(e) for e in args]),
            env,
            stdout or None,
            stderr or None,
            log_mode=log_mode,
            cpu_affinity=cpu_affinity,
        )
        self.proc: subprocess.Popen[bytes] = self.rank_process.popen
        self._stdout: Optional[IO[Any]] = None
        self._stderr: Optional[IO[Any]] = None

    def close(self, death_sig: Optional[signal.Signals] = None) -> None:
        """Send ``death_sig`` (default SIGTERM) to the rank's group and descendants."""
        self.rank_process.send_signal(death_sig or signal.SIGTERM, group=True)


def get_subprocess_handler(
    entrypoint: str,
    args: tuple[Any, ...],
    env: dict[str, str],
    stdout: str,
    stderr: str,
    local_rank_id: int,
    numa_options: Any = None,
) -> SubprocessHandler:
    """torch's factory: a started ``SubprocessHandler``."""
    return SubprocessHandler(
        entrypoint=entrypoint,
        args=args,
        env=env,
        stdout=stdout,
        stderr=stderr,
        local_rank_id=local_rank_id,
        numa_options=numa_options,
    )
