"""What one supervised run is: the command, the ranks, the logs, the policies.

``SupervisorConfig`` plays the part of torch's ``LaunchConfig`` + ``WorkerSpec`` for a
single node. ``validate()`` checks everything that can be checked before a process starts
and raises ``ConfigError`` with one line a person can act on; the CLI prints that line and
exits with status 2, so a typo never leaves half a run behind.
"""

from __future__ import annotations

import math
import os
import re
import resource
import shutil
import signal
import tempfile
import uuid
from dataclasses import dataclass, field
from typing import Union

from ..handle import DEFAULT_TERM_TIMEOUT_S, MAX_TIMEOUT_S
from ..names.signals import check_stop_signal
from ..process.fd_limit import check_fits
from ..process.py_bootstrap import is_python_rank, wrap_python_args
from ..std import Std
from .agent_env import check_master_addr, port_in_use, virtual_local_rank_env
from .cluster_options import ClusterOptions
from .debug_options import DebugOptions

__all__ = [
    "MAX_RANKS_PER_NODE",
    "MAX_RUN_ID_LEN",
    "MAX_TERM_TIMEOUT_S",
    "STDIN_MODES",
    "ConfigError",
    "SupervisorConfig",
    "check_rank_count",
    "parse_local_ranks_filter",
]

StdSpec = Union[Std, dict[int, Std]]

MAX_RANKS_PER_NODE = 1024
"""More ranks than this on one node is almost always a typo (an extra digit): refused unless
``allow_many_ranks`` (``--allow-many-ranks``) says it is meant."""

MAX_RUN_ID_LEN = 128
"""The run directory is ``<run_id>_<8 chars>``: this keeps it well inside the 255 bytes a
file name may have, with room for the log directory's own depth."""

MAX_TERM_TIMEOUT_S = MAX_TIMEOUT_S
"""A week (``engine.handle.MAX_TIMEOUT_S``, the same cap as a command's timeout)."""

_RUN_ID = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]*")
"""What run ids are in practice (uuids, scheduler job ids, names): one safe path component,
never "." or "..", never hidden."""

STDIN_MODES = ("pipe", "inherit", "null")
"""What a rank's stdin can be (``SupervisorConfig.stdin``)."""

_PATH_TAIL = 64
"""Room for what a run adds below its directory: ``/attempt_<n>/<rank>/restart_<k>/...``."""


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
        allow_many_ranks: Allow more than ``MAX_RANKS_PER_NODE`` ranks (a deliberate
            choice, ``--allow-many-ranks``; the machine's process limit still applies).
        stack_on_kill: Before an escalation SIGKILLs ranks that outlived their stop signal
            (a person's terminate, a teardown after a failure, a shutdown), dump their
            Python stacks with py-spy into ``<run_dir>/stacks/`` (``--no-stack-on-kill``
            turns it off). The SIGKILL is never later for it.
        output_debounce_s: After a log file changes, how long the pump waits before reading
            so that bursts from many ranks are read in one pass. Measured with 8 ranks each
            writing 100 lines every 10 ms, console included: 2 ms costs ~9 % of a core, 20 ms
            ~5 %, 50 ms ~3 %. 50 ms is still below one frame of a UI drawing at 15 fps, and
            an exiting rank's last lines are read at once regardless (the pump is drained
            before the exit event).
        suspect_silence_factor: A rank is a suspect for its silence when it wrote nothing
            for at least this many times its peers' median gap between batches (and its
            own) before the first failure (``--suspect-silence-factor``).
        suspect_silence_min_s: ... and for at least this many seconds
            (``--suspect-silence-min``).
        progress_regex: A person's pattern for the step a line reports
            (``--progress-regex``); viewers read each rank's progress with it before the
            usual shapes (step N, iter N, epoch N, tqdm's N/M). None: only those.
        debug: ``--post-mortem`` and ``--debugpy``: the Python ranks run under rankvisor's
            bootstrap (``DebugOptions``); None runs every rank as given.
        collectives: Every Python rank runs under the bootstrap, which serves torch's
            worker server in the rank once it imports ``torch.distributed``, with torch's
            Flight Recorder on (``TORCH_FR_BUFFER_SIZE``, unless set already): the suspect
            and ``rankvisor collectives`` read which rank never entered a collective
            (``--no-collectives`` turns it off). A rank that is not a Python script or
            module runs as given.
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
    term_timeout: float = DEFAULT_TERM_TIMEOUT_S
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
    allow_many_ranks: bool = False
    suspect_silence_factor: float = 3.0
    suspect_silence_min_s: float = 2.0
    stack_on_kill: bool = True
    cluster: ClusterOptions | None = None
    """Multi-node (``--nnodes`` not 1): how this node finds the others (engine.cluster)."""
    progress_regex: str | None = None
    debug: DebugOptions | None = None
    stdin: str = "pipe"
    """The ranks' stdin (``--stdin``): "pipe" (one per incarnation, held by the supervisor:
    ``SendInput`` answers a prompt), "inherit" (ours: a terminal under ``--headless``, as
    torchrun) or "null" (/dev/null: a rank that reads gets EOF)."""
    invocation: tuple[str, ...] = ()
    """The command line a person typed (``rankvisor run ...``), for ``ls`` and bundles;
    () when the run was not started from one (an API user's Supervisor)."""
    collectives: bool = True
    virtual_local_rank: bool = False
    """torchrun's ``--virtual-local-rank``: ``LOCAL_RANK`` 0 in every rank, and
    ``CUDA_VISIBLE_DEVICES`` narrowed to the rank's own device."""
    live_quiet_s: float = 4.0
    """A live suspect is looked for once every rank has been quiet this long (and past its
    cadence), or a collective has been waited in this long (0: never while it runs)."""

    def __post_init__(self) -> None:
        if self.run_id is None:
            self.run_id = str(uuid.uuid4())
        self.args = tuple(self.args)
        self.local_ranks_filter = frozenset(self.local_ranks_filter)

    def argv(self, rank: int) -> tuple[str, ...]:
        """The full command line of ``rank``."""
        return (self.entrypoint, *self.rank_args.get(rank, self.args))

    def launch_argv(self, rank: int) -> tuple[str, ...]:
        """What is started for ``rank``: ``argv``, under the bootstrap if ``debug`` or
        ``collectives`` asks."""
        argv = self.argv(rank)
        if self.debug is not None and self.debug.bootstrapped(rank):
            return self.debug.argv(rank, argv)
        if self.collectives and is_python_rank(argv):
            return (argv[0], *wrap_python_args(argv[1:]))
        return argv

    def serves_collectives(self, rank: int) -> bool:
        """Whether ``rank`` runs under the bootstrap with its worker server on."""
        return self.collectives and is_python_rank(self.argv(rank))

    def console(self, rank: int) -> tuple[bool, bool]:
        """Whether ``rank``'s (stdout, stderr) appear on the console, as under torchrun.

        A stream is shown when it is not redirected, or redirected and tee'd; a rank left
        out by ``local_ranks_filter`` shows nothing.
        """
        if self.local_ranks_filter and rank not in self.local_ranks_filter:
            return False, False
        # Looked up for this rank alone: expanding both maps for every rank asked made a
        # console of N ranks cost N^2 (half a second for 2000 ranks before the first spawn).
        redirs = _std_of(self.redirects, rank)
        tees = _std_of(self.tee, rank)
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
        from ..process.numa import AffinityMode, NumaOptions, plan

        return plan(NumaOptions(AffinityMode(self.numa_binding)), self.nprocs)

    def _check_visible_devices(self) -> None:
        # torch finds this only once the ranks start (a ValueError out of the agent).
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        try:
            virtual_local_rank_env(self.nprocs - 1, visible)
        except ValueError:
            count = len(visible.split(",")) if visible is not None else 0
            raise ConfigError(
                f"--virtual-local-rank: {self.nprocs} ranks on this node but "
                f"CUDA_VISIBLE_DEVICES={visible} lists {count} devices: give at most "
                f"{count} ranks, or list a device for each") from None

    def validate(self) -> None:
        """Refuse, with one clear line, a run that cannot start.

        Raises:
            ConfigError: naming the bad value.
        """
        if not isinstance(self.nprocs, int) or self.nprocs < 1:
            raise ConfigError(f"--nproc-per-node must be a positive number, got {self.nprocs!r}")
        check_rank_count(self.nprocs, allow_many=self.allow_many_ranks)
        if self.virtual_local_rank:
            self._check_visible_devices()
        if self.stdin not in STDIN_MODES:
            raise ConfigError(
                f"--stdin {self.stdin}: give one of {', '.join(STDIN_MODES)}"
            )
        for flag, value, least in (
            ("--suspect-silence-factor", self.suspect_silence_factor, 1.0),
            ("--suspect-silence-min", self.suspect_silence_min_s, 0.0),
        ):
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= least):
                raise ConfigError(f"{flag} {value}: give a number of at least {least:g}")
        if self.progress_regex:
            from ..forensics.progress import check_regex

            try:
                check_regex(self.progress_regex)
            except ValueError as e:
                raise ConfigError(f"--progress-regex {e}") from None
        if not (
            isinstance(self.term_timeout, (int, float))
            and math.isfinite(self.term_timeout)
            and 0 <= self.term_timeout <= MAX_TERM_TIMEOUT_S
        ):
            raise ConfigError(
                f"--term-timeout {self.term_timeout}: give the seconds from SIGTERM to SIGKILL,"
                f" a number from 0 to {MAX_TERM_TIMEOUT_S:g}"
            )
        self._validate_run_id()
        for sig in self.signals_to_handle:
            try:
                check_stop_signal(sig)
            except ValueError as e:
                raise ConfigError(f"--signals-to-handle: {e}") from None
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
        if self.debug is not None:
            try:
                self.debug.validate(self.argv, self.nprocs)
            except ValueError as e:
                raise ConfigError(str(e)) from None
        self._validate_log_dir()
        if self.numa_binding is not None:
            try:
                self.cpu_sets()
            except (RuntimeError, ValueError) as e:
                raise ConfigError(f"--numa-binding {self.numa_binding}: {e}") from None
        if self.cluster is not None:
            return  # MASTER_ADDR/PORT come from the rendezvous: nothing of ours to check
        try:
            check_master_addr(self.master_addr)
        except ValueError as e:
            raise ConfigError(f"--master-addr: {e}") from None
        if self.master_port is not None:
            if not 0 < self.master_port < 65536:
                raise ConfigError(f"--master-port {self.master_port}: not a TCP port")
            if port_in_use(self.master_addr, self.master_port):
                raise ConfigError(
                    f"--master-port {self.master_port}: already in use on {self.master_addr}"
                )

    def _validate_run_id(self) -> None:
        run_id = str(self.run_id)
        shown = _shown(run_id)
        if len(run_id) > MAX_RUN_ID_LEN:
            raise ConfigError(
                f"--run-id {shown}: {len(run_id)} characters; give at most {MAX_RUN_ID_LEN}"
            )
        if not _RUN_ID.fullmatch(run_id):
            raise ConfigError(
                f"--run-id {shown}: use letters, digits, '-', '_' and '.' (not first);"
                " it names the run's log directory"
            )

    def _validate_log_dir(self) -> None:
        """The run directory can be made: every check ``DefaultLogsSpecs`` would fail later.

        Permissions alone do not say it (root passes every access() check, also on /proc),
        so a directory is made and removed where the run's will be.
        """
        if self.log_dir is None:
            flag = "the temporary directory"
            try:
                existing = tempfile.gettempdir()
            except OSError as e:
                raise ConfigError(f"no usable temporary directory for the logs ({e}); "
                                  "give --log-dir") from None
            path = existing
        else:
            flag = f"--log-dir {_shown(self.log_dir)}"
            path = os.path.abspath(self.log_dir)
            existing = _nearest_existing(path, flag)
        name_max = _pathconf(existing, "PC_NAME_MAX", 255)
        missing = os.path.relpath(path, existing)
        for part in ([] if missing == os.curdir else missing.split(os.sep)):
            if len(os.fsencode(part)) > name_max:
                raise ConfigError(
                    f"{flag}: the name {_shown(part, 24)} is longer than {name_max} bytes,"
                    " the most this file system allows"
                )
        run_dir_name = len(os.fsencode(str(self.run_id))) + 9
        if run_dir_name > name_max:
            raise ConfigError(
                f"--run-id: too long for a directory name in {_shown(existing)}"
                f" (at most {name_max - 9} bytes there)"
            )
        path_max = _pathconf(existing, "PC_PATH_MAX", 4096)
        if len(os.fsencode(path)) + run_dir_name + _PATH_TAIL >= path_max:
            raise ConfigError(
                f"{flag}: the path is too long to hold a run (keep it under"
                f" {path_max - run_dir_name - _PATH_TAIL} bytes)"
            )
        try:
            probe = tempfile.mkdtemp(prefix=".rankvisor-probe-", dir=existing)
        except OSError as e:
            raise ConfigError(
                f"{flag}: cannot create a directory in {_shown(existing)} ({e.strerror});"
                " give a writable directory"
            ) from None
        os.rmdir(probe)


def _std_of(spec: StdSpec, rank: int) -> Std:
    """``to_map(spec, n)[rank]`` without building the map."""
    return spec if isinstance(spec, Std) else spec.get(rank, Std.NONE)


def check_rank_count(nprocs: int, *, allow_many: bool, given: str | None = None) -> None:
    """Refuse a rank count that is surely a typo, or more than the machine can run.

    Args:
        nprocs: The count (a stand-in bigger than any limit will do for a huge one).
        allow_many: ``--allow-many-ranks`` was given.
        given: The text typed, for the message (shortened when long).

    Raises:
        ConfigError: naming ``--allow-many-ranks`` when that is what would let it run.
    """
    shown = _shown(str(nprocs) if given is None else given, 30)
    if nprocs > MAX_RANKS_PER_NODE and not allow_many:
        raise ConfigError(
            f"--nproc-per-node {shown}: more than {MAX_RANKS_PER_NODE} ranks on one node;"
            " add --allow-many-ranks if that is meant"
        )
    limit = _process_limit()
    if nprocs > limit:
        raise ConfigError(
            f"--nproc-per-node {shown}: this machine runs at most {limit} processes"
            " (kernel.pid_max, ulimit -u)"
        )
    try:
        check_fits(nprocs)
    except ValueError as e:
        raise ConfigError(str(e)) from None


def _process_limit() -> int:
    """How many processes this machine lets us have: pid_max, and ``ulimit -u`` if set."""
    try:
        with open("/proc/sys/kernel/pid_max") as f:
            limit = int(f.read().strip())
    except (OSError, ValueError):
        limit = 4_194_304  # Linux's largest pid_max
    soft, _hard = resource.getrlimit(resource.RLIMIT_NPROC)
    if soft != resource.RLIM_INFINITY and soft > 0:
        limit = min(limit, soft)
    return limit


def _nearest_existing(path: str, flag: str) -> str:
    """The directory ``path`` is (or would be created in), refusing what cannot hold it.

    A dangling symbolic link anywhere on the way would make ``os.makedirs`` fail later
    with "File exists", so it is named here instead.
    """
    current = path
    while not os.path.exists(current):
        if os.path.lexists(current):
            try:
                target = os.readlink(current)
            except OSError:
                target = "?"
            raise ConfigError(
                f"{flag}: {_shown(current)} is a symbolic link to {_shown(target)},"
                " which does not exist"
            )
        parent = os.path.dirname(current)
        if parent == current:
            break
        current = parent
    if not os.path.isdir(current):
        where = "is a file" if current == path else f"{_shown(current)} is a file"
        raise ConfigError(f"{flag}: {where}, not a directory")
    if not os.access(current, os.W_OK | os.X_OK):
        if current == path:
            raise ConfigError(f"{flag}: not writable")
        raise ConfigError(f"{flag}: cannot create it in {_shown(current)}")
    return current


def _pathconf(path: str, name: str, default: int) -> int:
    try:
        value = os.pathconf(path, name)
    except (OSError, ValueError):
        return default
    return value if value > 0 else default


def _shown(text: str, limit: int = 60) -> str:
    """``text`` for a one-line message: its start and end when it is long."""
    if len(text) <= limit:
        return text
    keep = (limit - 3) // 2
    return f"{text[:keep]}...{text[-keep:]}"


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
        if not _RANK.fullmatch(p):
            raise ConfigError(
                f"--local-ranks-filter {text!r}: bad part {part!r}"
                " (expected comma-separated rank numbers such as '0,2')"
            )
        ranks.add(int(p.lstrip("0") or "0"))
    return frozenset(ranks)


_RANK = re.compile(r"[0-9]{1,18}")
"""A rank number as a person types it: ASCII digits (``str.isdigit`` also takes "²", which
``int`` refuses), and never so many that reading it costs anything."""
