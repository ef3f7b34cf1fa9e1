"""Immutable events the engine publishes, and the sink type that receives them.

Events carry plain data only (ints, strs, tuples, enums, torch-compatible
``ProcessFailure`` / ``RunProcsResult`` records and ``ExitCause``, defined here beside them),
never file objects, ``Popen`` or ``psutil.Process``, so that a UI can hold them, compare them
and receive them over the control socket from a supervisor process (``engine.control.wire``).

Threads: sinks are called on engine threads (the monitor, the log pump, the stats sampler,
the escalation timer). A sink must be thread-safe and must not block.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final, Literal, Protocol, Union

from .states import RankState

if TYPE_CHECKING:
    from .errors import ProcessFailure
    from .result import RunProcsResult

@dataclass(frozen=True, slots=True)
class ExitCause:
    """Why a rank ended: a short stable ``code`` for scripts, ``text`` for a person.

    Attributes:
        code: one of "oom_killed", "child_oom_killed", "cuda_oom", "nccl_timeout",
            "nccl_error", "gloo_timeout", "gloo_error", "sigsegv", "sigbus", "sigabrt",
            "sigill", "sigfpe", "outside_signal", "shell_signal", "timer_expired",
            "stopped", "not_started", "exception", "exit".
        text: one line.
        detail: more lines for the error view (a faulthandler stack, the kernel log's line,
            the message's line), "" when there is nothing more.
    """

    code: str
    text: str
    detail: str = ""

    @property
    def tells_more(self) -> bool:
        """Whether this says more than a report's exit code, error message and "stopped by
        rankvisor" do: an OOM kill, SIGBUS, a collective's timeout... yes; a plain exit code,
        an exception, rankvisor's own stop: no (summaries print only causes that do)."""
        return self.code not in ("exit", "exception", "stopped")

    def to_json(self) -> dict[str, str]:
        """The object status.json carries (``detail`` stays out: the error view shows it)."""
        return {"code": self.code, "text": self.text}


Stream = Literal["stdout", "stderr", "filtered_stdout", "filtered_stderr"]
"""``filtered_*`` are the duplicate-filter streams (filtered_stdout.log / filtered_stderr.log)."""


@dataclass(frozen=True, slots=True)
class RankOutput:
    """A batch of complete lines from one rank's stream, in order (never one event per line).

    For ``filtered_*`` streams, ``rank`` is the rank the lines came from and the lines carry
    the log line prefix, exactly as written to the filtered file.
    """

    rank: int
    stream: Stream
    lines: tuple[str, ...]
    """Complete lines, without their newline, sanitised (SGR colours kept, other escapes
    neutralised), each at most the display cap long. From the output pump, a ``LineBlock``
    (``engine.output.text_batch``) that reads as this tuple and equals it: its lines are
    made only when read whole."""
    partial: str = ""
    """The current unterminated last line (a progress bar mid-redraw), "" if none."""
    attempt: int = 0
    first_line: int = 0
    """0-based index in the rank's file (this attempt/incarnation) of ``lines[0]``."""
    start_byte: int = -1
    """Byte offset in that file where ``lines[0]`` begins (-1: not known: a line made up
    rather than read, a filtered stream, a batch trimmed at its head)."""
    end_byte: int = -1
    """Byte offset in that file just past ``lines[-1]``'s newline: what a pane showed of the
    file, exactly, whatever the sanitiser or the display cap made of the lines (-1: not
    known)."""
    written_ns: int = field(default=0, compare=False)
    """When the rank last wrote what this batch holds (wall ns; the file's mtime as the pump
    read it), 0 if not known. Only the supervisor reads it; it is not sent to viewers."""


@dataclass(frozen=True, slots=True)
class RankStateChanged:
    """A rank moved from ``old`` to ``new`` (see ``engine.states.TRANSITIONS``)."""

    rank: int
    old: RankState
    new: RankState
    pid: int | None
    exitcode: int | None = None
    signal_name: str | None = None
    """e.g. "SIGKILL" when the rank died of a signal."""
    restart_count: int = 0
    """How many times this rank has been restarted, alone or with its attempt."""
    attempt: int = 0
    failure: ProcessFailure | None = None
    caused_by_us: bool = False
    """True when the exit was our own doing (terminate, kill, teardown after another failure)."""
    t: float = 0.0
    """Wall-clock time of the transition (``clock.wall()``), for display."""
    exit_cause: ExitCause | None = None
    """Why the rank ended, in words (final states other than success; see
    ``engine.forensics.exit_cause``); None while it runs, on success, or when unknown."""


@dataclass(frozen=True, slots=True)
class RankStats:
    """One psutil sample of a rank and its descendants."""

    rank: int
    pid: int
    status: str
    """psutil status ("running", "sleeping", "stopped", "zombie", "disk-sleep", "gone")."""
    cpu_percent: float
    """Rank plus descendants; 100.0 is one full core."""
    rss_bytes: int
    """Rank plus descendants."""
    num_threads: int
    num_descendants: int
    cpu_affinity: tuple[int, ...]
    cpu_num: int | None
    numa_node: int | None
    uptime_s: float
    t: float
    cgroup_memory_bytes: int | None = None
    """Memory the rank's cgroup is charged (its whole tree, page cache included, every
    process however it detached); None where the rank has no memory cgroup."""
    oom_kills: int | None = None
    """Processes of this incarnation of the rank the OOM killer has killed so far (the
    rank's cgroup counts them); None where the rank has no memory cgroup."""
    gpu_memory_bytes: int | None = None
    """GPU memory its processes (the rank and its descendants) hold, summed over GPUs; None
    where NVML is not installed or none of them uses a GPU."""
    gpu_util_percent: float | None = None
    """Their SM utilisation summed over GPUs (100.0 is one whole GPU busy); None where
    unknown."""
    gpus: tuple[int, ...] = ()
    """Indices of the GPUs they use."""


@dataclass(frozen=True, slots=True)
class EscalationScheduled:
    """``signal_name`` was sent to ``ranks``; SIGKILL follows at ``deadline`` if they live."""

    ranks: tuple[int, ...]
    signal_name: str
    timeout_s: float
    deadline: float
    """``clock.monotonic()`` value at which SIGKILL will be sent."""


@dataclass(frozen=True, slots=True)
class EscalationFinished:
    """The escalation for ``ranks`` is over: they exited in time, or were SIGKILLed."""

    ranks: tuple[int, ...]
    killed: tuple[int, ...]
    """Ranks that outlived the deadline and got SIGKILL."""


@dataclass(frozen=True, slots=True)
class RankRestarted:
    """A rank runs again: alone (``whole_attempt`` False) or as part of a new attempt."""

    rank: int
    pid: int
    restart_count: int
    attempt: int
    whole_attempt: bool
    stdout_path: str
    stderr_path: str
    error_file: str


@dataclass(frozen=True, slots=True)
class AttemptStarted:
    """A new attempt (``attempt_<n>`` directory, TORCHELASTIC_RESTART_COUNT=n) started."""

    attempt: int
    log_dir: str
    pids: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class TimerExpired:
    """torch's file-timer watchdog killed a rank that overran an expiry-timer scope."""

    rank: int
    pid: int
    scope: str


@dataclass(frozen=True, slots=True)
class RanksSignalled:
    """A signal went to ``ranks``: who sent it (a person's command, or rankvisor's own
    teardown, shutdown or escalation), why, and when. What a person did before the first
    failure is evidence (see ``Suspect``); what rankvisor did never counts against a rank."""

    ranks: tuple[int, ...]
    signal_name: str
    by: Literal["person", "rankvisor"]
    reason: str
    """"signal", "terminate", "kill", "restart", "attempt" (a person's commands);
    "shutdown" (the whole run stopped: quit, ``rankvisor stop``, a signal to rankvisor);
    "teardown" (after a rank failed) or "escalation" (SIGKILL at the deadline)."""
    t: float
    """Wall-clock time it was sent (``clock.wall()``)."""


@dataclass(frozen=True, slots=True)
class Suspect:
    """The rank most likely to have started a failure, with its evidence in words.

    rankvisor's own reading, beside torch's root cause (the earliest failure, kept as it is):
    a rank whose output stopped well before the first failure while its peers went on, a
    rank a person signalled before it, or the earliest failure that is not a knock-on of
    another rank's (a collective timeout, a peer gone). Two ranks that failed on their own
    within a second are both named, the earlier first.
    """

    rank: int
    reason: str
    """One line for a person: "rank 3: silent 6.1 s before the first failure; last line: ..."."""
    ranks: tuple[int, ...] = ()
    """Every rank named, ``rank`` first."""
    evidence: tuple[str, ...] = ()
    """One line per rank named (``reason`` joins them)."""
    kind: str = ""
    """What named ``rank``: "silence", "signal", "paused" (a person at its prompt),
    "failure", "collective" (torch's Flight Recorder: it never entered a
    collective its peers waited in), "torch" (torch's own text names it: a collective
    mismatch, a monitored barrier, NCCL's watchdog), "stack" (live: its main thread is outside
    any collective while its peers wait in one), "outlived" or "knock-on"."""
    first_failure_ns: int = 0
    """When the first failure happened (``clock.wall_ns()``)."""
    last_line: str = ""
    """The suspect's last line before the first failure ("" if it wrote none)."""
    last_line_stream: str = ""
    last_line_no: int = -1
    """0-based number of ``last_line`` in its stream's file (-1: unfinished or none)."""
    last_output_ns: int = 0
    """When the suspect's output last moved before the first failure (0: never)."""


@dataclass(frozen=True, slots=True)
class RunFinished:
    """Every rank of the attempt reached a final state and no restart is pending."""

    result: RunProcsResult
    attempt: int
    root_cause_rank: int | None
    """The rank whose failure came first (earliest real exit time), None on success."""
    suspect: Suspect | None = None
    """The rank most likely to have started the failure, None on success or a stopped run."""


@dataclass(frozen=True, slots=True)
class InputWait:
    """A rank blocked reading the stdin its supervisor holds: a person is asked something."""

    since: float
    """Wall-clock time (``clock.wall()``) the rank started waiting."""
    prompt: str = ""
    """The unfinished last line of its output ("(Pdb) ", "continue? "); "" if none."""
    where: str = ""
    """For pdb: where it stopped ("job.py:7 in <module>"), from its last ``> file(line)``
    line; "" otherwise."""

    def to_json(self) -> dict[str, object]:
        """status.json's ``input_wait`` of a rank."""
        return {"since": self.since, "prompt": self.prompt, "where": self.where}


@dataclass(frozen=True, slots=True)
class RankInputWait:
    """A rank began (``wait`` set) or stopped (``wait`` None) waiting for input on its stdin."""

    rank: int
    wait: InputWait | None
    attempt: int = 0


@dataclass(frozen=True, slots=True)
class RankDebuggerWait:
    """A rank began (``since`` set) or stopped (``since`` None) waiting for a debugger to
    attach (``--debugpy-wait``): a person is attaching one, so its silence, and its peers'
    wait for it, are never a hang."""

    rank: int
    since: float | None
    """Wall-clock time (``clock.wall()``) the rank started waiting; None: it waits no more."""
    attempt: int = 0


@dataclass(frozen=True, slots=True)
class RankInput:
    """A person's line went to a rank's stdin (``eof``: its stdin was closed instead).

    Every viewer shows it in the rank's pane, marked as typed, in order with the rank's own
    output; the supervisor also keeps it in the incarnation's ``stdin.log``.
    """

    rank: int
    text: str
    t: float
    attempt: int = 0
    eof: bool = False


@dataclass(frozen=True, slots=True)
class SupervisorNotice:
    """Something a person should read: a refused command, a warning, a watchdog message."""

    message: str
    severity: Literal["information", "warning", "error"] = "information"


LIVE_SUSPECT_PREFIX: Final = "live suspect: "
"""A notice that starts so names the live suspect of a run that hangs (the rest is its
reason): viewers show it in their header and error view until the run ends or a new attempt
starts (``engine.supervisor.live_suspect``)."""

LIVE_SUSPECT_DROPPED_PREFIX: Final = "live suspect dropped: "
"""A notice that starts so says the live suspect named before no longer stands (its
evidence is gone: the ranks went on, a person holds the rank, a new attempt began):
viewers stop showing it. The rest: "rank N: why"."""


Event = Union[
    RankOutput,
    RankStateChanged,
    RankStats,
    EscalationScheduled,
    EscalationFinished,
    RankRestarted,
    AttemptStarted,
    TimerExpired,
    RunFinished,
    SupervisorNotice,
    RanksSignalled,
    RankInputWait,
    RankDebuggerWait,
    RankInput,
]


class EventSink(Protocol):
    """Receives every event of one Supervisor."""

    def __call__(self, event: Event, /) -> None:
        """Called on an engine thread. Must not block and must be thread-safe."""


