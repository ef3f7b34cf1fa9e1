"""What one supervised run is: the command, the ranks, the logs, the policies.

``SupervisorConfig`` plays the part of torch's ``LaunchConfig`` + ``WorkerSpec`` for a
single node. ``validate()`` checks everything that can be checked before a process starts
and raises ``ConfigError`` with one line a person can act on; the CLI prints that line and
exits with status 2, so a typo never leaves half a run behind.
"""

from __future__ import annotations

import os
import shutil
import signal
import uuid
from dataclasses import dataclass, field
from typing import Union

from engine.std import Std, to_map
from engine.supervisor.agent_env import port_in_use

__all__ = ["ConfigError", "SupervisorConfig", "parse_local_ranks_filter"]

StdSpec = Union[Std, dict[int, Std]]


class ConfigError(ValueError):
    """A run that must not start; ``str()`` is one line, for a person."""


@dataclass
class SupervisorConfig:
    """Everything a Supervisor needs to start, restart and report one run.

    Attributes:
        entrypoint: The program every rank runs (``sys.executable`` for Python scripts).
        args: Its arguments, the same for every rank (torchrun's case).
        nprocs: Ranks on this node (== world size: one node).
        rank_args: Per-rank arguments replacing ``args`` for the ranks listed.
        rank_env: Per-rank environment additions (after the agent's variables).
        env: Environment additions for every rank.
        role: Role name; the default log line prefix is ``[{role}{local_rank}]:``.
        run_id: ``TORCHELASTIC_RUN_ID`` and the log directory prefix; a uuid when None.
        log_dir: Base log directory; a fresh temp dir when None.
        redirects: torchrun's ``-r``; which streams stay *off the console* (every stream is
            written to its file regardless: the files are the record).
        tee: torchrun's ``-t``; streams that are redirected and still shown.
        local_ranks_filter: Ranks whose output may reach the console; empty for all.
        stdout_filters: Duplicate filters: lines of any rank's stdout containing one of
            these go to ``filtered_stdout.log`` (and appear as ``filtered_stdout`` events).
        stderr_filters: The same for stderr.
        log_line_prefix_template: ``${role_name}``/``${rank}``/``${local_rank}`` template.
        term_timeout: Seconds between the death signal and SIGKILL.
        max_restarts: Whole-group restarts on failure, as torch's agent (0: none).
        teardown_on_failure: Terminate the other ranks when one fails (torch's rule: a
            collective would hang otherwise). False keeps them running for inspection.
        master_addr: ``MASTER_ADDR``.
        master_port: ``MASTER_PORT``; a free port when None.
        unbuffered: ``PYTHONUNBUFFERED=1`` unless set.
        faulthandler: ``PYTHONFAULTHANDLER=1`` unless set.
        cwd: Working directory of the ranks (ours when None).
        numa_binding: torchrun's ``--numa-binding`` mode ("node", "socket", "exclusive",
            "core-complex"): each rank's CPU affinity from ``engine.process.numa.plan``, applied at
            spawn (no numactl needed). None binds nothing.
        signals_to_handle: Signals that stop the run when they reach rankvisor (forwarded
            to the ranks, SIGKILL after ``term_timeout``); torchrun's
            ``--signals-to-handle``.
        sample_interval: Seconds between stats samples (0 turns sampling off).
        kill_wait_s: How long to wait for a reap after SIGKILL before reporting a stuck rank.
        output_debounce_s: After a log file changes, how long the pump waits before reading
            so that bursts from many ranks are read in one pass. Measured with 8 ranks each
            writing 100 lines every 10 ms, console included: 2 ms costs ~9 % of a core, 20 ms
            ~5 %, 50 ms ~3 %. 50 ms is still below one frame of a UI drawing at 15 fps, and
            an exiting rank's last lines are read at once regardless (the pump is drained
            before the exit event).
    """

    entrypoint: str
    args: tuple[str, ...] = ()
    nprocs: int = 1
    rank_args: dict[int, tuple[str, ...]] = field(default_factory=dict)
    rank_env: dict[int, dict[str, str]] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    role: str = "default"
    run_id: str | None = None
    log_dir: str | None = None
    redirects: StdSpec = Std.NONE
    tee: StdSpec = Std.NONE
    local_ranks_filter: frozenset[int] = frozenset()
    stdout_filters: tuple[str, ...] = ()
    stderr_filters: tuple[str, ...] = ()
    log_line_prefix_template: str | None = None
    term_timeout: float = 30.0
    max_restarts: int = 0
    teardown_on_failure: bool = True
    master_addr: str = "127.0.0.1"
    master_port: int | None = None
    unbuffered: bool = True
    faulthandler: bool = True
    cwd: str | None = None
    numa_binding: str | None = None
    signals_to_handle: tuple[int, ...] = (
        signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT,
    )
    sample_interval: float = 1.0
    kill_wait_s: float = 5.0
    output_debounce_s: float = 0.05

    def __post_init__(self) -> None:
        if self.run_id is None:
            self.run_id = str(uuid.uuid4())
        self.args = tuple(self.args)
        self.local_ranks_filter = frozenset(self.local_ranks_filter)

    def argv(self, rank: int) -> tuple[str, ...]:
        """The full command line of ``rank``."""
        return (self.entrypoint, *self.rank_args.get(rank, self.args))

    def console(self, rank: int) -> tuple[bool, bool]:
        """Whether ``rank``'s (stdout, stderr) appear on the console, as under torchrun.

        A stream is shown when it is not redirected, or redirected and tee'd; a rank left
        out by ``local_ranks_filter`` shows nothing.
        """
        if self.local_ranks_filter and rank not in self.local_ranks_filter:
            return False, False
        redirs = to_map(self.redirects, self.nprocs)[rank]
        tees = to_map(self.tee, self.nprocs)[rank]
        shown = (~redirs & Std.ALL) | tees
        return bool(shown & Std.OUT), bool(shown & Std.ERR)

    def cpu_sets(self) -> dict[int, frozenset[int] | None]:
        """Each rank's CPU affinity under ``numa_binding`` (None: unbound).

        Raises:
            ValueError: an unknown mode.
            RuntimeError: the machine's topology allows no such binding.
        """
        if self.numa_binding is None:
            return dict.fromkeys(range(self.nprocs))
        from engine.process.numa import AffinityMode, NumaOptions, plan

        return plan(NumaOptions(AffinityMode(self.numa_binding)), self.nprocs)

    def validate(self) -> None:
        """Refuse, with one clear line, a run that cannot start.

        Raises:
            ConfigError: naming the bad value.
        """
        if not isinstance(self.nprocs, int) or self.nprocs < 1:
            raise ConfigError(f"--nproc-per-node must be a positive number, got {self.nprocs!r}")
        if self.term_timeout < 0:
            raise ConfigError(f"--term-timeout must be >= 0, got {self.term_timeout}")
        if self.max_restarts < 0:
            raise ConfigError(f"--max-restarts must be >= 0, got {self.max_restarts}")
        bad = sorted(r for r in self.local_ranks_filter if not 0 <= r < self.nprocs)
        if bad:
            raise ConfigError(
                f"--local-ranks-filter names rank {bad[0]}, but ranks are 0..{self.nprocs - 1}"
            )
        if os.sep in self.entrypoint:
            if not os.path.isfile(self.entrypoint):
                raise ConfigError(f"{self.entrypoint}: no such file")
            if not os.access(self.entrypoint, os.X_OK):
                raise ConfigError(f"{self.entrypoint}: not executable")
        elif shutil.which(self.entrypoint) is None:
            raise ConfigError(f"{self.entrypoint}: command not found")
        if self.cwd is not None and not os.path.isdir(self.cwd):
            raise ConfigError(f"working directory {self.cwd}: not a directory")
        self._validate_log_dir()
        if self.numa_binding is not None:
            try:
                self.cpu_sets()
            except (RuntimeError, ValueError) as e:
                raise ConfigError(f"--numa-binding {self.numa_binding}: {e}") from None
        if self.master_port is not None:
            if not 0 < self.master_port < 65536:
                raise ConfigError(f"--master-port {self.master_port}: not a TCP port")
            if port_in_use(self.master_addr, self.master_port):
                raise ConfigError(
                    f"--master-port {self.master_port}: already in use on {self.master_addr}"
                )

    def _validate_log_dir(self) -> None:
        if self.log_dir is None:
            return
        path = os.path.abspath(self.log_dir)
        if os.path.exists(path):
            if not os.path.isdir(path):
                raise ConfigError(f"--log-dir {self.log_dir}: is a file, not a directory")
            if not os.access(path, os.W_OK | os.X_OK):
                raise ConfigError(f"--log-dir {self.log_dir}: not writable")
            return
        # Missing: it will be created, so its nearest existing ancestor must be writable.
        parent = os.path.dirname(path)
        while not os.path.exists(parent):
            parent = os.path.dirname(parent)
        if not os.path.isdir(parent):
            raise ConfigError(f"--log-dir {self.log_dir}: {parent} is a file, not a directory")
        if not os.access(parent, os.W_OK | os.X_OK):
            raise ConfigError(f"--log-dir {self.log_dir}: cannot create it in {parent}")


def parse_local_ranks_filter(text: str) -> frozenset[int]:
    """torchrun's ``--local-ranks-filter`` ("0,2"); "" means no filter.

    Raises:
        ConfigError: naming the part that is not a rank number.
    """
    text = text.strip()
    if not text:
        return frozenset()
    ranks = set()
    for part in text.split(","):
        p = part.strip()
        if not p.isdigit():
            raise ConfigError(
                f"--local-ranks-filter {text!r}: bad part {part!r}"
                " (expected comma-separated rank numbers such as '0,2')"
            )
        ranks.add(int(p))
    return frozenset(ranks)
