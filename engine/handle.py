"""The one interface a UI holds: commands in, events out, a snapshot for late subscribers.

``Supervisor`` (a run in this process), ``engine.control.client.RemoteHandle`` (a run in a
supervisor process of its own, over its Unix socket), ``engine.attach``'s handle (a torchrun job
rankvisor did not start) and ``engine.testing.ScriptedSupervisor`` (a scripted run for UI
tests) all implement ``SupervisorHandle``. UI code must not care which one it holds.

Commands are plain data so they can be logged, compared in tests and sent over a wire.
``execute`` never blocks for the length of an escalation: it sends the signal, schedules the
SIGKILL and returns; progress arrives as events.
"""

from __future__ import annotations

import math
import signal
from dataclasses import dataclass, field
from typing import Any, Callable, Final, Protocol, Union

from .events import EventSink, ExitCause, InputWait
from .names.signals import check_signal
from .states import RankState


@dataclass(frozen=True, slots=True)
class SignalRanks:
    """Send ``sig`` to each rank in ``ranks`` (and its process group / descendants)."""

    ranks: tuple[int, ...]
    sig: int


DEFAULT_TERM_TIMEOUT_S: Final = 30.0
"""How long a stop waits between SIGTERM and SIGKILL when nobody said (torchrun's 30 s)."""


def term_timeout(given: float | None, configured: float) -> float:
    """A command's ``timeout_s``; None (not given) means the run's configured one."""
    return configured if given is None else float(given)


@dataclass(frozen=True, slots=True)
class TerminateRanks:
    """Send ``sig`` to ``ranks`` (None: all), SIGKILL whoever is alive after ``timeout_s``.

    ``timeout_s`` None means the supervisor's configured term timeout (``term_timeout``).
    """

    ranks: tuple[int, ...] | None = None
    sig: int = signal.SIGTERM
    timeout_s: float | None = None


@dataclass(frozen=True, slots=True)
class KillRanks:
    """SIGKILL ``ranks`` (None: all) at once."""

    ranks: tuple[int, ...] | None = None


@dataclass(frozen=True, slots=True)
class RestartRank:
    """Stop ``rank`` if alive (with escalation) and start it again with the same args and env.

    Its earlier stdout, stderr and error.json are kept, not overwritten.
    """

    rank: int


@dataclass(frozen=True, slots=True)
class RestartAll:
    """Stop every rank and start a new attempt (attempt_<n+1>, restart count + 1)."""


@dataclass(frozen=True, slots=True)
class DumpStacks:
    """Dump the Python stack of ``ranks`` (None: every running rank) with py-spy, merge them
    and save the dump under the run directory; the result's ``data`` carries it.

    ``nonblocking`` reads each rank without pausing it (a read-only viewer may ask for that
    one, and nothing else); ``native`` adds C/C++ frames and needs a blocking dump. Unlike the
    other commands this one waits for its answer: each rank's dump is bounded by
    ``engine.forensics.stacks.DEFAULT_TIMEOUT_S``, and all run in parallel.
    """

    ranks: tuple[int, ...] | None = None
    native: bool = False
    nonblocking: bool = False


@dataclass(frozen=True, slots=True)
class ReadCollectives:
    """Ask every running rank's Flight Recorder now, through torch's worker server in the
    rank (bounded, answered on the server's own thread: no rank is paused), and save the
    answer under the run directory; the result's ``data`` carries it.

    ``data`` is the JSON of ``rankvisor collectives --json`` (engine/control/COLLECTIVES.md):
    ``ranks`` (per rank and process group the last collective enqueued, started and
    completed, or the rank's ``error``), ``verdicts``, ``source`` ("live") and ``path`` (the
    saved capture, "" if none). A handle that cannot ask refuses it in words that say why
    ("no collectives: ..."). Like ``DumpStacks`` it waits for its answer, and a read-only
    viewer may ask for it.
    """


@dataclass(frozen=True, slots=True)
class SendInput:
    """Write ``text`` and a newline to the stdin of ``ranks`` (None: every running rank).

    Only where the supervisor holds the ranks' stdin (``--stdin pipe``); refused otherwise,
    and for a rank that is not running.
    """

    ranks: tuple[int, ...] | None
    text: str


@dataclass(frozen=True, slots=True)
class CloseInput:
    """Close the stdin of ``ranks`` (None: every running rank): the rank reads EOF."""

    ranks: tuple[int, ...] | None = None


Command = Union[
    SignalRanks, TerminateRanks, KillRanks, RestartRank, RestartAll, DumpStacks, SendInput,
    CloseInput, ReadCollectives,
]

COMMAND_CLASSES = (
    SignalRanks, TerminateRanks, KillRanks, RestartRank, RestartAll, DumpStacks, SendInput,
    CloseInput, ReadCollectives,
)
"""Every command type, for ``isinstance`` checks and the wire's registry."""

def reads_only(command: object) -> bool:
    """True for the commands a read-only viewer may ask for: they read the ranks without
    pausing them (a nonblocking stack dump, the collectives)."""
    return isinstance(command, ReadCollectives) or (
        isinstance(command, DumpStacks) and command.nonblocking)


NATIVE_NEEDS_BLOCKING = (
    "not dumped: native frames need a blocking dump (py-spy pauses each rank while it reads "
    "it); a nonblocking dump has Python frames only"
)


MAX_TIMEOUT_S = 7 * 24 * 3600.0
"""The longest wait from a stop signal to SIGKILL, a week: longer is surely a typo
(``--term-timeout`` and a command's ``timeout_s`` alike)."""


def command_problem(command: object) -> str | None:
    """Why ``command`` cannot be carried out whatever the run's state, or None if it can.

    Every handle checks this before it looks at its ranks, so a bad value (signal 0, -1, 999,
    "TERM"; a negative, infinite or non-numeric timeout; something that is no command) is
    refused with the same words by each, and never reaches a thread that would choke on it.
    """
    if not isinstance(command, COMMAND_CLASSES):
        return f"unknown command {command!r}"
    if isinstance(command, DumpStacks):
        if command.native and command.nonblocking:
            return NATIVE_NEEDS_BLOCKING
        if command.ranks is not None and not all(
            isinstance(r, int) and not isinstance(r, bool) for r in command.ranks
        ):
            return f"not dumped: ranks must be integers, not {command.ranks!r}"
    if isinstance(command, (SignalRanks, TerminateRanks)):
        try:
            check_signal(command.sig)
        except ValueError as e:
            return f"not sent: {e}"
    if isinstance(command, (SendInput, CloseInput)) and command.ranks is not None and not all(
        isinstance(r, int) and not isinstance(r, bool) for r in command.ranks
    ):
        return f"not sent: ranks must be integers, not {command.ranks!r}"
    if isinstance(command, SendInput) and (
        not isinstance(command.text, str) or "\n" in command.text or "\r" in command.text
    ):
        return f"not sent: the input must be one line of text, not {command.text!r}"
    if isinstance(command, TerminateRanks) and command.timeout_s is not None:
        t = command.timeout_s
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t) or t < 0:
            return f"not sent: the timeout must be a number of seconds >= 0, not {t!r}"
        if t > MAX_TIMEOUT_S:
            return (f"not sent: the timeout must be at most {MAX_TIMEOUT_S:g} s (a week), "
                    f"not {t!r}")
    return None


@dataclass(frozen=True, slots=True)
class CommandResult:
    """Whether a command was accepted; ``message`` says why not, in words for a person.

    ``data``: what a command hands back besides (plain JSON data, so that it travels as it
    is): ``DumpStacks`` puts its dump there (``engine.forensics.stacks.StackDump.to_dict``,
    ``path`` the saved file), ``ReadCollectives`` the ranks' collectives. None for every
    other command but the input commands (who was reached).
    """

    ok: bool
    message: str = ""
    data: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class RankInfo:
    """What is known of one rank right now (for a UI that subscribes after the start)."""

    rank: int
    state: RankState
    pid: int | None
    restart_count: int
    attempt: int
    stdout_path: str
    """"" when the stream is not redirected to a file."""
    stderr_path: str
    error_file: str
    exitcode: int | None = None
    signal_name: str | None = None
    oom_kills: int | None = None
    """Processes of this incarnation the OOM killer killed (the rank's memory cgroup
    counts them, children included); None where there is no memory cgroup."""
    oom_killed: bool = False
    """The rank itself died of a SIGKILL that rankvisor did not send, and its cgroup
    recorded an OOM kill: it was OOM-killed."""
    exit_cause: ExitCause | None = None
    """Why the last process of the rank ended, in words (``engine.forensics.exit_cause``);
    None while it runs, after a success, or when unknown."""
    input_wait: InputWait | None = None
    """Set while the rank is blocked reading the stdin its supervisor holds."""


@dataclass(frozen=True, slots=True)
class RunInfo:
    """The run as a whole."""

    name: str
    """Role name, also the default log line prefix ("[{name}{rank}]:")."""
    nprocs: int
    run_id: str
    log_dir: str
    """The run's directory (``<log_dir>/<run_id>_xxxxxxxx``)."""
    attempt: int
    term_timeout_s: float
    command: tuple[str, ...] = ()
    """The entrypoint and its arguments, for display."""
    filtered_stdout_path: str = ""
    filtered_stderr_path: str = ""
    stdout_filters: tuple[str, ...] = ()
    stderr_filters: tuple[str, ...] = ()
    log_line_prefixes: dict[int, str] = field(default_factory=dict)
    ranks: tuple[RankInfo, ...] = ()
    finished: bool = False
    tracking: str = "process-tree"
    """How a rank's processes are found and ended: "cgroup" (a cgroup per rank, nothing
    escapes it) or "process-tree" (process groups, /proc descendants and the guard's
    token)."""
    tracking_detail: str = ""
    """The same in words: which cgroup hierarchy, or why none could be used."""
    started_at: float = 0.0
    """Wall-clock time (``clock.wall()``) the ranks were first started; 0.0 before. A viewer
    that attaches late counts the run's elapsed time from here, not from its own start."""
    node: str = ""
    """In a multi-node run: this node's place ("node 1 of 2 (host)"); "" on one node."""
    progress_regex: str = ""
    """A person's pattern for the step a rank's line reports (``--progress-regex``); viewers
    read progress with it first. Empty: only the usual shapes (step N, tqdm's N/M, ...)."""
    stdin: str = "null"
    """The ranks' stdin: "pipe" (held by the supervisor: ``SendInput`` reaches them),
    "inherit" (the terminal of ``--headless``) or "null" (/dev/null)."""
    rank_base: int = 0
    """In a multi-node run: the global rank of this node's local rank 0 in the current round
    (a local rank's global rank is ``rank_base + rank``); 0 on one node. Commands and events
    keep local ranks; viewers add this to show the ranks as the job knows them."""
    debug_hold: tuple[int, ...] = ()
    """Ranks at a ``--post-mortem`` pdb prompt (local ranks): while one is, the teardown
    after a failure waits. It ends with the prompt (``c``, ``q``), or with a terminate or
    kill of that rank."""
    rank_places: dict[int, str] = field(default_factory=dict)
    """A viewer of every node's ranks (``engine.cluster.viewer``): each rank's node and host
    ("node 1 (node02)"), for its pane's title; empty otherwise."""


class SupervisorHandle(Protocol):
    """What the TUI (and the headless CLI) need of a supervisor."""

    @property
    def detachable(self) -> bool:
        """True when the run goes on without this viewer (a supervisor process, a torchrun
        job): quitting may leave it running. False for a run inside this process."""

    def subscribe(self, sink: EventSink) -> Callable[[], None]:
        """Add a sink for every later event; returns a function that removes it."""

    def watch(self, sink: EventSink) -> tuple[RunInfo, Callable[[], None]]:
        """Subscribe ``sink``; return the run as of the first event it gets, and the unsubscribe.

        For a run in this process that is its snapshot now, then live events. For a run going
        on elsewhere it is the run as it started: ``sink`` then gets every lifecycle event
        since (state changes, restarts, attempts, escalations, notices, the finish), then each
        rank's recent lines read from its files, then live events, no line twice and none
        missing. A viewer that folds those events into the returned ``RunInfo`` ends where
        one that watched from the start would be: that is what lets a person attach late.
        """

    def detach(self) -> None:
        """Stop watching and let go of the run; never stops a rank (no-op in-process)."""

    def start(self) -> None:
        """Start the ranks (idempotent)."""

    def execute(self, command: Command) -> CommandResult:
        """Carry out a command without blocking for its escalation; safe from any thread."""

    def snapshot(self) -> RunInfo:
        """The run and every rank as they are now."""

    def shutdown(self, timeout_s: float | None = None) -> None:
        """Terminate every live rank with escalation, wait for them, release resources.

        Blocks up to about ``2 * timeout`` (call it from a worker thread in a UI).
        """
