"""What the UI knows about the run: pure Python, no Textual, fed by engine events.

``RunView.apply(event)`` folds one engine event into the view and says which ranks changed;
widgets read the view and never keep their own copy of a rank's state. ``LineBuffer`` is the
bounded ring of a rank's recent output that the panes render (the files on disk stay the
record; the zoomed view reads them).

Everything here runs on the UI thread (the bridge hands events over); nothing is locked.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from itertools import islice, repeat
from typing import Any, Final, Literal, Sequence

from ..engine.control.status import NOT_ANSWERING_S
from ..engine.events import (
    LIVE_SUSPECT_DROPPED_PREFIX,
    LIVE_SUSPECT_PREFIX,
    AttemptStarted,
    EscalationFinished,
    EscalationScheduled,
    Event,
    InputWait,
    RankDebuggerWait,
    RankInput,
    RankInputWait,
    RankOutput,
    RankRestarted,
    RanksSignalled,
    RankStateChanged,
    RankStats,
    RunFinished,
    SupervisorNotice,
    Suspect,
    TimerExpired,
)
from ..engine.forensics.knockon import knock_on_reason
from ..engine.forensics.live_rule import STARTUP_QUIET_S, RankNow, has_cadence
from ..engine.forensics.pauses import PauseLog, paused_words
from ..engine.forensics.progress import (
    KINDS,
    Progress,
    ProgressReader,
    peers_gap,
    step_threshold,
    stragglers,
)
from ..engine.handle import RankInfo, RunInfo
from ..engine.names.signals import exit_signal_name
from ..engine.output.sanitize import sanitize, strip_sgr
from ..engine.states import RankState

__all__ = [
    "TYPED_MARK",
    "Incarnation",
    "LineBuffer",
    "LineKind",
    "RankView",
    "RunView",
    "format_bytes",
    "typed_parts",
]

LineKind = Literal["stdout", "stderr", "marker", "typed"]
"""A buffered line is program output on one stream, a marker the UI inserted, or a line a
person typed to the rank's stdin (after the prompt it answered: see ``typed_parts``)."""

TYPED_MARK: Final = "⌨ "
"""What marks a typed line (and a rank at a prompt) wherever it is shown."""
_TYPED_SEP: Final = "\x1f"
"""Between the prompt and the typed text of a "typed" line: output never holds a bare
control character (the sanitiser shows them as symbols), so the split is unambiguous."""
HISTORY: Final = 200
"""Lines typed to a rank kept for the input line's history."""


def typed_parts(line: str) -> tuple[str, str]:
    """(prompt, text) of a buffered "typed" line."""
    prompt, _, text = line.partition(_TYPED_SEP)
    return prompt, text

QUIET_S: Final = 10
"""A running rank silent this long is shown as quiet (a stall, or just a long step), when
there is no relative reading of its silence (no peer has written twice yet)."""

STRAGGLER_SILENCE_K: Final = 3.0
"""A running rank silent this many times its peers' median gap between lines is a straggler."""
STRAGGLER_SILENCE_MIN_S: Final = 2.0
"""... and silent this long at least: lines are timed by the drain tick (about 15 Hz), so a
rank whose peers write at every tick would otherwise be flagged for a 0.3 s pause."""
GAP_HISTORY: Final = 32
"""Gaps between output batches kept per rank: its recent cadence."""

_GROUP_WORDS: Final = (
    "init_process_group", "process group", "processgroup", "torch.distributed",
    "distributeddataparallel", "gloo", "nccl", "c10d",
)
"""Words a rank of a torch.distributed job writes (torch's own messages, a job's logging),
in lower case: looked for as plain text (a regular expression costs 50 times more)."""
GROUP_LOOK_LINES: Final = 5_000
"""A rank's first lines are looked at for them (a group is set up at the start): a job
that never names one costs nothing after its first few thousand lines."""

KNOCK_ON_LINES: Final = 5
"""The last lines of a failed rank's stderr read for a knock-on error (``_knock_on``)."""
CPU_HISTORY: Final = 48
"""CPU samples kept per rank for the sparkline (one a second by default)."""


def format_bytes(n: int | None) -> str:
    """``1234567 -> "1.2M"``: short, for a one-line header."""
    if n is None:
        return "-"
    value = float(n)
    for unit in ("B", "K", "M", "G", "T"):
        if value < 1024 or unit == "T":
            if unit == "B":
                return f"{int(value)}B"
            return f"{value:.1f}{unit}" if value < 10 else f"{value:.0f}{unit}"
        value /= 1024
    return f"{value:.0f}T"  # pragma: no cover - loop always returns


class LineBuffer:
    """The last ``max_lines`` lines of one rank (both streams, arrival order) plus a partial.

    Lines are stored raw (ANSI included) and rendered lazily by the widget that shows them.
    ``evicted`` counts lines that fell off the front, so ``evicted + index`` is a stable id for
    a line for as long as it is buffered (widgets key their render caches on it).
    """

    __slots__ = (
        "_lines", "evicted", "partial", "partial_stream", "width", "total", "version", "begun",
        "answered",
    )

    def __init__(self, max_lines: int = 5_000) -> None:
        self._lines: deque[tuple[LineKind, str]] = deque(maxlen=max_lines)
        self.evicted = 0
        """How many lines have fallen off the front."""
        self.partial = ""
        """The current unterminated line (a progress bar mid-redraw), drawn after the lines."""
        self.partial_stream: LineKind = "stdout"
        self.width = 0
        """Longest line seen (characters, an upper bound of cells for most text)."""
        self.total = 0
        """Lines ever appended (markers included)."""
        self.version = 0
        """Bumped on every change, so a widget can tell whether it must repaint."""
        self.begun = 0
        """Line id (``evicted + index``) of the current incarnation's first line: the lines
        before it were written by an earlier attempt or restart of the rank."""
        self.answered: tuple[LineKind, str] | None = None
        """(stream, prompt) a typed line answered: shown with it, so it is taken off the
        front of the stream's next line (a pipe does not echo, so the rank's file has the
        answer on the prompt's line: "(Pdb) 41")."""

    def __len__(self) -> int:
        return len(self._lines)

    @property
    def max_lines(self) -> int:
        return self._lines.maxlen or 0

    def __getitem__(self, index: int) -> tuple[LineKind, str]:
        return self._lines[index]

    def extend(self, kind: LineKind, lines: Sequence[str]) -> None:
        """Append complete lines of one stream (one call per batch: no per-line Python)."""
        if self.answered is not None and lines and self.answered[0] == kind:
            prompt = self.answered[1]
            self.answered = None
            if lines[0].startswith(prompt):
                rest = lines[0][len(prompt):]
                lines = [rest, *lines[1:]] if rest else lines[1:]
        added = len(lines)
        if not added:
            return
        before = len(self._lines)
        capacity = self.max_lines
        # Only the lines that will stay in the ring are worth storing or measuring.
        kept = lines if added <= capacity else lines[added - capacity :]
        self._lines.extend(zip(repeat(kind), kept))
        self.width = max(self.width, max(map(len, kept)))
        self.total += added
        self.evicted += max(0, before + added - capacity)
        self.version += 1

    def set_partial(self, kind: LineKind, partial: str) -> None:
        if partial != self.partial or kind != self.partial_stream:
            self.partial = partial
            self.partial_stream = kind
            self.width = max(self.width, len(partial))
            self.version += 1

    def add_typed(self, text: str, *, at_prompt: bool = True) -> None:
        """A person's line went to the rank's stdin: shown marked as typed, in order with the
        rank's output; ``at_prompt``: after the prompt it answers (the unfinished line), else
        on a line of its own (the unfinished line may be a progress bar, not a question)."""
        prompt, stream = (self.partial, self.partial_stream) if at_prompt else ("", "stdout")
        if prompt:
            self.partial = ""
        self.answered = (stream, prompt) if prompt else None
        self.extend("typed", (prompt + _TYPED_SEP + text,))

    def mark(self, text: str) -> None:
        """Insert a UI marker line (restart separator, skipped-lines note)."""
        self.partial = ""
        self.extend("marker", (text,))

    def mark_incarnation(self, text: str) -> None:
        """Insert the separator of a new incarnation (a restart, a new attempt): the lines
        after it are the new process's own."""
        self.mark(text)
        self.begun = self.total

    def tail(
        self, count: int, kind: LineKind | None = None, *, this_incarnation: bool = False
    ) -> list[str]:
        """The last ``count`` lines (of one stream when ``kind`` is given), oldest first;
        with ``this_incarnation`` only those the current process wrote (a failure's last
        lines must never be an earlier life's)."""
        out: list[str] = []
        oldest = max(0, self.begun - self.evicted) if this_incarnation else 0
        for line_kind, text in islice(reversed(self._lines), len(self._lines) - oldest):
            if kind is None or line_kind == kind:
                if line_kind == "typed":
                    prompt, typed = typed_parts(text)
                    text = f"{prompt}{TYPED_MARK}{typed}"
                out.append(text)
                if len(out) >= count:
                    break
        out.reverse()
        return out


@dataclass(frozen=True, slots=True)
class Incarnation:
    """One run of a rank's process: where its logs went (kept on disk after a restart)."""

    attempt: int
    restart_count: int
    stdout_path: str
    stderr_path: str
    error_file: str


@dataclass(slots=True, eq=False)
class RankView:
    """One rank as the UI shows it."""

    rank: int
    global_rank: int | None = None
    """In a multi-node run: the rank as the job knows it (``RANK``); None on one node, where
    ``rank`` is both."""
    place: str = ""
    """A viewer of every node's ranks: the rank's node and host ("node 1 (node02)")."""
    state: RankState = RankState.STARTING
    pid: int | None = None
    exitcode: int | None = None
    signal_name: str | None = None
    restart_count: int = 0
    attempt: int = 0
    caused_by_us: bool = False
    failure: Any = None
    """The engine's ``ProcessFailure`` (torch-compatible) when the rank failed."""
    failed_at: float | None = None
    """Wall-clock time of the failure (error.json timestamp when there is one)."""
    exit_order: int = 0
    """How many rank exits the view had seen when this one came (ties of ``failed_at``)."""
    knock_on: str = ""
    """What kind of knock-on error its failure reads as (a peer's closed connection, a
    collective timed out: ``engine.forensics.knockon``); "" for a rank's own error."""
    exit_cause: Any = None
    """Why the rank ended, as the supervisor classified it (``engine.forensics``'
    ``ExitCause``); None while it runs, after a success, or from a source that has none."""
    stdout_path: str = ""
    stderr_path: str = ""
    error_file: str = ""
    earlier: list[Incarnation] = field(default_factory=list)
    """Earlier incarnations, oldest first (their logs stay on disk)."""
    cpu_percent: float | None = None
    rss_bytes: int | None = None
    num_threads: int | None = None
    numa_node: int | None = None
    gpu_memory_bytes: int | None = None
    """GPU memory of the rank's processes (NVML); None without NVML or off the GPU."""
    gpu_util_percent: float | None = None
    gpus: tuple[int, ...] = ()
    proc_status: str | None = None
    cpu_history: deque[float] = field(default_factory=lambda: deque(maxlen=CPU_HISTORY))
    escalation_signal: str | None = None
    escalation_deadline: float | None = None
    """``clock.monotonic()`` value at which SIGKILL follows, while an escalation runs."""
    timer_scope: str | None = None
    """The watchdog scope this rank overran, if torch's file timer killed it."""
    last_line: str = ""
    lines_seen: int = 0
    last_output_at: float | None = None
    """Monotonic time (the app's clock) of the last output: how long a rank has been quiet."""
    buffer: LineBuffer = field(default_factory=LineBuffer)
    progress: Progress | None = None
    """The last progress its output reported (step N, iter N, epoch N, tqdm's N/M)."""
    progress_by_kind: dict[str, Progress] = field(default_factory=dict)
    """The last progress of each source it reported (``Progress.source``: the kind and the
    kind of line): ranks are compared on one source."""
    gaps: deque[float] = field(default_factory=lambda: deque(maxlen=GAP_HISTORY))
    """Seconds between its recent output batches (this incarnation's, on the app's clock)."""
    steps_seen: int = 0
    """How many times this incarnation's reported progress moved: with ``gaps``, whether
    its cadence is known yet (``engine.forensics.live_rule.has_cadence``)."""
    line_at: float | None = None
    """When this incarnation's output last arrived (None before its first): gaps run from it."""
    shown_progress: Progress | None = None
    """The progress the UI shows: of the kind the ranks are compared on, else the last."""
    behind: float | None = None
    """Steps behind the median of the running ranks (negative: ahead); None: not compared."""
    lag_threshold: float | None = None
    """Steps behind the median that make a straggler now (None: ranks not compared)."""
    silence_ratio: float | None = None
    """Its silence in units of its peers' median gap; None when no relative reading exists."""
    straggler: Literal["", "behind", "silent"] = ""
    """Why it is flagged as a straggler, relative to its peers ("" : it is not)."""
    straggler_reason: str = ""
    waiting_for: str = ""
    """Instead of a silent straggler's mark while a person paused a peer: "waiting for rank 0
    (at a prompt)" (it waits for that peer in a collective, most likely)."""
    paused: str = ""
    """How a person paused it ("at a prompt", "stopped by SIGSTOP"); "" if not: its silence
    is then neither a straggler's nor quiet."""
    unheard_s: float = 0.0
    """Seconds since its supervisor last spoke (``RunView.supervisor_silent_s``, set with
    the progress): its quiet counts only up to then, and not at all past NOT_ANSWERING_S."""
    input_wait: InputWait | None = None
    """Set while the rank waits for a line on the stdin its supervisor holds (a prompt)."""
    typed: deque[str] = field(default_factory=lambda: deque(maxlen=HISTORY))
    """Lines typed to it (by any viewer), oldest first: the input line's history."""
    sent: deque[tuple[int, int, float, str]] = field(
        default_factory=lambda: deque(maxlen=HISTORY)
    )
    events_bytes: dict[str, tuple[str, int]] = field(default_factory=dict)
    """stream -> (path, the byte offset in that file just past the last line its events
    drew: the batch's ``end_byte``). A file read to follow a flood goes on from there
    (``RunView.shown_offset``), so it repeats no line the events drew, whatever the lines
    say (a line printed a thousand times is a thousand lines)."""
    file_ahead: dict[str, str] = field(default_factory=dict)
    """stream -> path of the file the pane shows that stream from, ahead of the events (a
    flood: ``RunView.add_file_tail``); while the rank's files are those, its events draw no
    lines (they are older than what the pane shows)."""

    @property
    def exit_label(self) -> str:
        """``"exit 3"``, ``"SIGKILL"`` or ``""`` while alive."""
        if self.state.is_alive or self.exitcode is None:
            return ""
        name = self.signal_name or exit_signal_name(self.exitcode)
        if name:
            return name
        if self.exitcode < 0:
            return f"signal {-self.exitcode}"
        return f"exit {self.exitcode}"

    @property
    def failed(self) -> bool:
        """Ended badly on its own: a failure (a rank rankvisor stopped is not one)."""
        return self.state in (RankState.FAILED, RankState.SIGNALLED) and not self.caused_by_us

    @property
    def stopped(self) -> bool:
        """Ended by rankvisor's own signal (teardown, terminate, kill, quit): not a failure."""
        return self.state in (RankState.FAILED, RankState.SIGNALLED) and self.caused_by_us

    def quiet_for(self, now: float) -> int | None:
        """Whole seconds since the last output of a running rank, once over ``QUIET_S``: the
        absolute reading, only while no relative one (``silence_ratio``) is possible."""
        if (
            self.state is not RankState.RUNNING
            or self.paused
            or self.last_output_at is None
            or self.silence_ratio is not None
            or self.unheard_s >= NOT_ANSWERING_S
        ):
            return None
        quiet = int(now - self.unheard_s - self.last_output_at)
        return quiet if quiet >= QUIET_S else None

    def saw_output(self, now: float) -> None:
        """Output arrived at ``now``: the gap since the last batch joins its cadence."""
        if self.line_at is not None:
            if now <= self.line_at:
                return  # another batch of the same drain tick: no gap between them
            self.gaps.append(now - self.line_at)
        self.line_at = now
        self.last_output_at = now

    def restart_clock(self, now: float) -> None:
        """A new process (or a viewer that just started watching): quiet counts from ``now``,
        and its cadence starts afresh."""
        self.last_output_at = now
        self.line_at = None
        self.gaps.clear()
        self.steps_seen = 0
        self.progress_by_kind.clear()

    def median_gap(self) -> float | None:
        """The median of its recent gaps between batches; None before two batches."""
        if not self.gaps:
            return None
        ordered = sorted(self.gaps)
        n = len(ordered)
        return (ordered[(n - 1) // 2] + ordered[n // 2]) / 2

    def countdown(self, now: float) -> int | None:
        """Whole seconds left before SIGKILL, or None when no escalation runs."""
        if self.escalation_deadline is None or not self.state.is_alive:
            return None
        return max(0, math.ceil(self.escalation_deadline - now))

    def incarnation(self) -> Incarnation:
        return Incarnation(
            self.attempt, self.restart_count, self.stdout_path, self.stderr_path, self.error_file
        )


_STATE_ORDER: Final = (
    RankState.RUNNING,
    RankState.STARTING,
    RankState.TERMINATING,
    RankState.RESTARTING,
    RankState.SUCCEEDED,
    RankState.FAILED,
    RankState.SIGNALLED,
)


class RunView:
    """The run and all its ranks, folded from engine events."""

    def __init__(self, info: RunInfo, *, buffer_lines: int = 5_000) -> None:
        # The role name and prefixes come from a command line and show on the terminal:
        # they go through the same sanitiser as everything a rank writes.
        self.name = sanitize(info.name)
        self.nprocs = info.nprocs
        self.run_id = info.run_id
        self.node = sanitize(info.node)
        """This node's place in a multi-node run ("" on one node)."""
        self.rank_base = info.rank_base
        """The global rank of local rank 0 (multi-node); 0 on one node."""
        self.log_dir = info.log_dir
        self.attempt = info.attempt
        self.term_timeout_s = info.term_timeout_s
        self.command = info.command
        self.filtered_stdout_path = info.filtered_stdout_path
        self.filtered_stderr_path = info.filtered_stderr_path
        self.stdout_filters = info.stdout_filters
        self.stderr_filters = info.stderr_filters
        self.prefixes = {r: sanitize(p) for r, p in info.log_line_prefixes.items()}
        self.finished = info.finished
        self.started_at = info.started_at
        """Wall-clock time the run started (0: not known)."""
        self.stdin = info.stdin
        """The ranks' stdin: "pipe" (a person may type to them), "inherit" or "null"."""
        self.progress_reader = ProgressReader(info.progress_regex or None)
        """Reads each rank's progress from its lines, the run's ``--progress-regex`` first."""
        self.progress_kind: str | None = None
        """The kind of progress the running ranks are compared on (``update_progress``)."""
        self.median_step: float | None = None
        self.step_threshold: float | None = None
        """Steps behind ``median_step`` that make a straggler."""
        self.root_cause_rank: int | None = None
        self._exits = 0
        """Rank exits seen so far (``RankView.exit_order``)."""
        self.ended_at: float | None = None
        """Wall-clock time of the latest rank exit seen (the run's end, once finished)."""
        self.suspect: Suspect | None = None
        self.live_suspect = ""
        """The live suspect's words while every rank hangs ("" when none was named)."""
        """The rank most likely to have started the failure (the supervisor's reading)."""
        self.result: Any = None
        self.notices: deque[SupervisorNotice] = deque(maxlen=100)
        self.earlier_attempts: list[str] = []
        """One line per attempt before the current one (how it ended), oldest first."""
        self.distributed = ""
        """How the ranks show that they form a torch.distributed group (a rank's line naming
        a process group, gloo or NCCL), "" while none did: every rank gets MASTER_ADDR and
        WORLD_SIZE from rankvisor, so only what the ranks write tells."""
        self._closed_attempt = info.attempt - 1
        self.ranks: list[RankView] = [
            RankView(rank=r, buffer=LineBuffer(buffer_lines)) for r in range(info.nprocs)
        ]
        self.pauses = PauseLog()
        """The ranks a person paused (at a prompt, by SIGSTOP): never stragglers."""
        self.supervisor_silent_s = 0.0
        """Seconds since the supervisor last said anything (a viewer over its socket; the
        app sets it): the ranks' silence is counted only up to then, and past
        ``NOT_ANSWERING_S`` no rank is judged at all (what is shown is that old)."""
        self._held: set[int] = set()
        self._released_at: float | None = None
        """When a person last let a paused rank go (the app's clock): its peers waited for
        it until then, so their silence counts from there."""
        for rank_info in info.ranks:
            self._merge_info(rank_info)
            wait = getattr(rank_info, "input_wait", None)
            if wait is not None:
                self.pauses.observe(RankInputWait(rank_info.rank, wait, rank_info.attempt))
        self._set_rank_base(info)

    def _set_rank_base(self, info: RunInfo) -> None:
        """Each rank's global rank in a multi-node run (a new round may renumber them)."""
        self.rank_base = info.rank_base
        for view in self.ranks:
            # Every node's ranks in one view: they are global already, with their place.
            view.place = sanitize(info.rank_places.get(view.rank, ""))
            view.global_rank = (info.rank_base + view.rank
                                if self.node and not info.rank_places else None)

    def merge_paths(self, info: RunInfo) -> None:
        """Take the paths of a later snapshot (the run directory exists only once started,
        and a new attempt has new files); states keep coming from events."""
        self.log_dir = info.log_dir or self.log_dir
        self.node = sanitize(info.node) or self.node
        self._set_rank_base(info)
        self.filtered_stdout_path = info.filtered_stdout_path
        self.filtered_stderr_path = info.filtered_stderr_path
        for rank_info in info.ranks:
            if 0 <= rank_info.rank < len(self.ranks):
                view = self.ranks[rank_info.rank]
                if rank_info.stdout_path or rank_info.stderr_path:
                    _switch_files(
                        view,
                        rank_info.stdout_path,
                        rank_info.stderr_path,
                        rank_info.error_file,
                        attempt=rank_info.attempt,
                        restart_count=rank_info.restart_count,
                    )
                if view.pid is None:
                    view.pid = rank_info.pid

    def _merge_info(self, info: RankInfo) -> None:
        if not 0 <= info.rank < len(self.ranks):
            return
        view = self.ranks[info.rank]
        view.state = info.state
        view.pid = info.pid
        view.restart_count = info.restart_count
        view.attempt = info.attempt
        view.stdout_path = info.stdout_path
        view.stderr_path = info.stderr_path
        view.error_file = info.error_file
        view.exitcode = info.exitcode
        view.signal_name = info.signal_name
        view.exit_cause = info.exit_cause
        view.input_wait = info.input_wait

    # -- queries ---------------------------------------------------------------------------

    def counts(self) -> dict[RankState, int]:
        """How many ranks are in each state, in display order, zero counts left out."""
        found: dict[RankState, int] = {}
        for view in self.ranks:
            found[view.state] = found.get(view.state, 0) + 1
        return {state: found[state] for state in _STATE_ORDER if state in found}

    @property
    def alive(self) -> list[RankView]:
        return [view for view in self.ranks if view.state.is_alive]

    def waiting(self) -> list[RankView]:
        """Ranks at a prompt (waiting for a line on their stdin), longest waiting first."""
        found = [view for view in self.ranks if view.input_wait is not None]
        return sorted(found, key=lambda v: (v.input_wait.since, v.rank))  # type: ignore[union-attr]

    def failures(self) -> list[RankView]:
        """Ranks that failed on their own, the root cause first, then by time, then by rank.

        Ranks rankvisor stopped are not among them: see ``stopped``.
        """
        failed = [view for view in self.ranks if view.failed]
        root = self.root_cause()

        def key(view: RankView) -> tuple[int, float, int]:
            return (
                0 if view.rank == root else 1,
                view.failed_at if view.failed_at is not None else math.inf,
                view.rank,
            )

        return sorted(failed, key=key)

    def stopped(self) -> list[RankView]:
        """Ranks rankvisor's own signal ended (teardown, terminate, kill, quit), by rank."""
        return [view for view in self.ranks if view.stopped]

    def root_cause(self) -> int | None:
        """The rank that failed first: the engine's verdict if given, else the earliest
        failure the engine did not cause itself.

        Before the verdict (the run is being torn down), a knock-on failure comes after a
        rank's own error: error files stamp whole seconds, and a peer whose collective broke
        on the connection the failing rank closed shares its second and was often reaped
        first. Ties then go, as in torch, to the earlier exit, then to the lower rank."""
        engine_says = self.root_cause_rank
        if engine_says is not None and 0 <= engine_says < len(self.ranks):
            view = self.ranks[engine_says]
            # A rank we stopped ourselves is not a cause (terminate-all, quit, teardown).
            if view.failed:
                return engine_says
        candidates = [view for view in self.ranks if view.failed]
        if not candidates:
            return None
        best = min(
            candidates,
            key=lambda v: (
                bool(v.knock_on) and not self.finished,
                v.failed_at if v.failed_at is not None else math.inf,
                v.exit_order,
                v.rank,
            ),
        )
        return best.rank

    def _close_attempt(self, new_attempt: int) -> None:
        """Keep one line on how the attempt before ``new_attempt`` ended (once)."""
        if new_attempt > self.attempt and self._closed_attempt < self.attempt:
            self._closed_attempt = self.attempt
            self.earlier_attempts.append(self.attempt_outcome())

    def attempt_outcome(self) -> str:
        """How the current attempt stands, in one line: ``attempt 0: 3 signalled, 1 failed;
        root cause rank 2 (exit 1)``."""
        counts = ", ".join(f"{n} {state.value}" for state, n in self.counts().items())
        line = f"attempt {self.attempt}: {counts}"
        root = self.root_cause()
        if root is not None:
            view = self.ranks[root]
            line += f"; root cause rank {root} ({view.exit_label or view.state.value})"
        return line

    def exit_code(self) -> int:
        """The process exit code the CLI returns: 0 when every rank succeeded, 1 otherwise
        (torchrun's convention)."""
        if self.ranks and all(view.state is RankState.SUCCEEDED for view in self.ranks):
            return 0
        return 1

    # -- folding events --------------------------------------------------------------------

    def add_output(self, event: RankOutput) -> bool:
        """Append a batch of a rank's stdout/stderr; False for other streams or ranks."""
        if event.stream not in ("stdout", "stderr") or not 0 <= event.rank < len(self.ranks):
            return False
        view = self.ranks[event.rank]
        kind: LineKind = "stdout" if event.stream == "stdout" else "stderr"
        if event.lines and not self.distributed and view.lines_seen < GROUP_LOOK_LINES:
            self._look_for_a_group(event.rank, event.lines)
        view.lines_seen += len(event.lines)
        if view.file_ahead and _follows_its_files(view):
            return True  # older than what the pane shows from the files
        if event.end_byte >= 0:
            view.events_bytes[kind] = (_path_of(view, kind), event.end_byte)
        if event.lines:
            self._show_lines(view, kind, event.lines)
        if event.partial or view.buffer.partial_stream == kind:
            view.buffer.set_partial(kind, event.partial)
            if event.partial:
                view.last_line = event.partial
                found = self.progress_reader.read(event.partial)
                if found is not None and _note_progress(view, found):
                    view.progress = found
        return True

    def _look_for_a_group(self, rank: int, lines: Sequence[str]) -> None:
        text = "\n".join(lines)
        lower = text.lower()
        at = min((i for i in map(lower.find, _GROUP_WORDS) if i >= 0), default=-1)
        if at >= 0:
            start = text.rfind("\n", 0, at) + 1
            end = text.find("\n", at)
            line = sanitize(text[start : end if end >= 0 else None]).strip()
            self.distributed = f'rank {rank} wrote "{line[:70]}"'

    def _show_lines(self, view: RankView, kind: LineKind, lines: Sequence[str]) -> None:
        view.buffer.extend(kind, lines)
        view.last_line = lines[-1]
        for line in lines[-8:]:  # the batch's last lines, in order
            found = self.progress_reader.read(line)
            if found is not None and _note_progress(view, found):
                view.progress = found

    def lines_not_drawn(self, rank: int, marker: str) -> bool:
        """Lines of ``rank`` were dropped on their way (the UI fell behind): ``marker``
        says so in its pane (what the events drew still ends where the last drawn batch
        did: a file read from there brings the dropped lines back)."""
        if not 0 <= rank < len(self.ranks):
            return False
        self.ranks[rank].buffer.mark(marker)
        return True

    def shown_offset(self, rank: int, stream: str) -> int:
        """Where the lines the events drew of ``rank``'s current ``stream`` file end (a
        byte offset): a file read on from there repeats none of them. -1 when not known, or
        when the pane follows that file already (the events draw none of it)."""
        if stream not in ("stdout", "stderr") or not 0 <= rank < len(self.ranks):
            return -1
        view = self.ranks[rank]
        kind: LineKind = "stdout" if stream == "stdout" else "stderr"
        if view.file_ahead.get(kind) == _path_of(view, kind):
            return -1
        shown = _events_shown(view, kind)
        return -1 if shown is None else shown

    def following_file(self, rank: int) -> bool:
        """Whether the pane of ``rank`` shows its lines from its files, ahead of its events."""
        return 0 <= rank < len(self.ranks) and _follows_its_files(self.ranks[rank])

    def add_file_tail(
        self,
        rank: int,
        stream: str,
        path: str,
        lines: Sequence[str],
        partial: str = "",
        *,
        gap: bool = False,
    ) -> bool:
        """Show new lines of a rank's file, read from the file because they come faster
        than its events (``engine.logfile.follow``, read on from ``shown_offset``: no line
        the events drew comes again); False when nothing changed.

        From the first of them on, the pane shows that rank from its files (both streams,
        each in its file's order) and its events draw no more lines, until its files change
        (a restart). A marker says so."""
        if stream not in ("stdout", "stderr") or not 0 <= rank < len(self.ranks):
            return False
        view = self.ranks[rank]
        kind: LineKind = "stdout" if stream == "stdout" else "stderr"
        if path != _path_of(view, kind):
            return False  # an earlier incarnation's file
        if view.file_ahead.get(kind) != path:
            if not _follows_its_files(view):
                view.buffer.mark(
                    "… lines too fast to draw: the pane shows the newest of this rank's "
                    "files (all are on disk: enter)"
                )
            view.file_ahead[kind] = path
        elif gap and lines:
            view.buffer.mark("… lines written faster than drawn (all are on disk: enter)")
        if lines:
            self._show_lines(view, kind, lines)
        if partial or view.buffer.partial_stream == kind:
            view.buffer.set_partial(kind, partial)
            if partial:
                view.last_line = partial
        return bool(lines) or bool(partial)

    @property
    def not_answering(self) -> bool:
        """The supervisor of this running run has said nothing for ``NOT_ANSWERING_S``."""
        return not self.finished and self.supervisor_silent_s >= NOT_ANSWERING_S

    def update_progress(self, now: float, *, k_silence: float = STRAGGLER_SILENCE_K) -> None:
        """Compare the running ranks (``now`` on the app's clock): each rank's shown
        progress, steps behind the median, silence relative to its peers' usual gap, and
        straggler mark (``engine.forensics.progress.stragglers``).

        The ranks are compared on one source of progress (``Progress.source``: a kind and a
        kind of line): the one most running ranks report, at least two, the better kind
        (``KINDS``) on a tie. A rank's tqdm bar is never set against another's step line, nor
        a step quoted by a warning against a step line printed at another cadence."""
        running = [v for v in self.ranks if v.state is RankState.RUNNING]
        counts: dict[str, int] = {}
        for view in running:
            for seen in view.progress_by_kind:
                counts[seen] = counts.get(seen, 0) + 1
        shared = [k for k in counts if counts[k] >= 2]
        # The source most ranks report (a bar every rank draws beats a step line only some
        # print), the better kind on a tie: never two sources against each other.
        best = min(shared, key=lambda k: (-counts[k], _kind_rank(k)), default=None)
        kind = best or min(counts, key=_kind_rank, default=None)
        self.progress_kind = kind.split(":", 1)[0] if kind else None
        steps: dict[int, int | None] = {}
        for view in running:
            found = view.progress_by_kind.get(kind) if kind else None
            steps[view.rank] = found.step if found is not None and best else None
        known = sorted(s for s in steps.values() if s is not None)
        median = (
            (known[(len(known) - 1) // 2] + known[len(known) // 2]) / 2
            if len(known) >= 2 else None
        )
        self.median_step = median
        self.step_threshold = step_threshold(median) if median is not None else None
        own_gaps = {v.rank: v.median_gap() for v in running}
        ordered = sorted(g for g in own_gaps.values() if g is not None)
        paused = self.pauses.paused()
        if self._held - set(paused):
            self._released_at = now  # the rank went on: its peers had waited for the person
        self._held = set(paused)
        released = self._released_at if self._released_at is not None else float("-inf")
        # A supervisor that stopped answering stopped every rank's lines with it: that is
        # no silence of theirs.
        heard = now - self.supervisor_silent_s
        silent = {
            v.rank: heard - max(v.last_output_at, released)
            if v.last_output_at is not None and v.rank not in paused else None
            for v in running
        }
        for rank in paused:
            steps[rank] = None  # a person holds it: behind, but not a straggler
        waiting = ", ".join(
            f"rank {self.rank_base + r if self.node else r} ({paused_words(p)})"
            for r, p in sorted(paused.items())
        )
        # A quiet start (imports, DDP's set-up, a dataset's load) is no straggling: until
        # every running rank has a cadence only a silence past the start-up threshold is.
        starting = any(
            not has_cadence(RankNow(v.rank, None, gaps=len(v.gaps), steps=v.steps_seen))
            for v in running
        )
        flagged = {} if self.not_answering else stragglers(
            steps, silent, own_gaps, k_silence=k_silence, min_silence_s=STRAGGLER_SILENCE_MIN_S,
            startup_s=STARTUP_QUIET_S if starting else None,
        )
        for view in self.ranks:
            found = view.progress_by_kind.get(kind) if kind else None
            view.shown_progress = found or _own_best(view)
            view.behind = view.silence_ratio = None
            view.lag_threshold = self.step_threshold
            view.straggler, view.straggler_reason, view.waiting_for = "", "", ""
            view.paused = paused_words(paused[view.rank]) if view.rank in paused else ""
            view.unheard_s = self.supervisor_silent_s
            if view.state is not RankState.RUNNING:
                continue
            step = steps.get(view.rank)
            if median is not None and step is not None:
                view.behind = median - step
            usual = peers_gap(ordered, own_gaps.get(view.rank))
            quiet = silent.get(view.rank)
            if usual is not None and usual > 0 and quiet is not None:
                view.silence_ratio = quiet / usual
            reason = flagged.get(view.rank)
            if reason and waiting and reason.startswith("silent"):
                view.waiting_for = f"waiting for {waiting}"  # a person, not a hang
            elif reason:
                view.straggler = "silent" if reason.startswith("silent") else "behind"
                view.straggler_reason = reason

    def apply(self, event: Event) -> set[int]:
        """Fold one event in; returns the ranks whose display changed (-1: the run)."""
        if isinstance(event, RankOutput):
            return {event.rank} if self.add_output(event) else set()
        if isinstance(event, RankStats):
            return self._apply_stats(event)
        if isinstance(event, RankStateChanged):
            return self._apply_state(event)
        if isinstance(event, EscalationScheduled):
            for rank in event.ranks:
                if 0 <= rank < len(self.ranks):
                    self.ranks[rank].escalation_signal = event.signal_name
                    self.ranks[rank].escalation_deadline = event.deadline
            return set(event.ranks) | {-1}
        if isinstance(event, EscalationFinished):
            for rank in event.ranks:
                if 0 <= rank < len(self.ranks):
                    self.ranks[rank].escalation_deadline = None
            return set(event.ranks) | {-1}
        if isinstance(event, RankInputWait):
            self.pauses.observe(event)
            return self._apply_input_wait(event) | {event.rank, -1}
        if isinstance(event, RanksSignalled):
            self.pauses.observe(event)
            return set(event.ranks) | {-1}
        if isinstance(event, RankDebuggerWait):
            self.pauses.observe(event)
            return {event.rank, -1}
        if isinstance(event, RankRestarted):
            self.pauses.observe(event)
            return self._apply_restart(event)
        if isinstance(event, AttemptStarted):
            self.pauses.observe(event)
            self._held, self._released_at = set(), None
            self._close_attempt(event.attempt)
            self.attempt = event.attempt
            self.finished = False
            self.root_cause_rank = None
            self.suspect = None
            self.live_suspect = ""
            self.result = None
            return {-1}
        if isinstance(event, TimerExpired):
            if 0 <= event.rank < len(self.ranks):
                self.ranks[event.rank].timer_scope = event.scope
            return {event.rank, -1}
        if isinstance(event, RunFinished):
            self.finished = True
            self.result = event.result
            self.root_cause_rank = event.root_cause_rank
            self.suspect = event.suspect
            if event.suspect is not None:
                self.live_suspect = ""
            return {-1} | {view.rank for view in self.ranks}
        if isinstance(event, SupervisorNotice):
            self.notices.append(event)
            if event.message.startswith(LIVE_SUSPECT_PREFIX):
                self.live_suspect = event.message[len(LIVE_SUSPECT_PREFIX):]
            elif event.message.startswith(LIVE_SUSPECT_DROPPED_PREFIX):
                self.live_suspect = ""
            return {-1}
        if isinstance(event, RankInput):
            return self._apply_input(event)
        return set()

    def _apply_input_wait(self, event: RankInputWait) -> set[int]:
        if not 0 <= event.rank < len(self.ranks):
            return set()
        view = self.ranks[event.rank]
        if event.attempt < view.attempt or not view.state.is_alive:
            return set()  # an earlier incarnation's wait, or one that ended with its process
        view.input_wait = event.wait
        return {event.rank, -1}

    def _apply_input(self, event: RankInput) -> set[int]:
        if not 0 <= event.rank < len(self.ranks):
            return set()
        view = self.ranks[event.rank]
        # A person's text, shown on a terminal like the rank's own: the same sanitiser.
        text = "^D (stdin closed)" if event.eof else strip_sgr(sanitize(event.text))
        view.buffer.add_typed(text, at_prompt=view.input_wait is not None)
        if not event.eof:
            view.typed.append(text)
        view.sent.append((event.attempt, view.restart_count, event.t, text))
        view.last_line = TYPED_MARK + text
        return {event.rank}

    def _apply_stats(self, event: RankStats) -> set[int]:
        if not 0 <= event.rank < len(self.ranks):
            return set()
        view = self.ranks[event.rank]
        view.cpu_percent = event.cpu_percent
        view.rss_bytes = event.rss_bytes
        view.num_threads = event.num_threads
        view.numa_node = event.numa_node
        view.gpu_memory_bytes = event.gpu_memory_bytes
        view.gpu_util_percent = event.gpu_util_percent
        view.gpus = event.gpus
        view.proc_status = event.status
        view.cpu_history.append(event.cpu_percent)
        return {event.rank}

    def _apply_state(self, event: RankStateChanged) -> set[int]:
        if not 0 <= event.rank < len(self.ranks):
            return set()
        view = self.ranks[event.rank]
        if event.attempt > view.attempt:
            # The Supervisor starts the new attempt's ranks before it says AttemptStarted:
            # the old attempt's outcome is complete now, and gone once this is folded in.
            self._close_attempt(event.attempt)
        view.state = event.new
        if event.pid is not None:
            view.pid = event.pid
        view.restart_count = event.restart_count
        view.attempt = event.attempt
        if event.new.is_final:
            view.exitcode = event.exitcode
            view.signal_name = event.signal_name
            view.caused_by_us = event.caused_by_us
            view.exit_cause = event.exit_cause
            view.escalation_deadline = None
            view.proc_status = None
            view.cpu_percent = None
            view.gpu_memory_bytes = None
            view.gpu_util_percent = None
            view.gpus = ()
            view.input_wait = None
            self._exits += 1
            view.exit_order = self._exits
            if event.t > 0:
                self.ended_at = max(self.ended_at or 0.0, event.t)
            if event.new is not RankState.SUCCEEDED:
                view.failure = event.failure
                view.failed_at = _failure_time(event.failure, event.t)
                view.knock_on = _knock_on(view)
        elif event.new is RankState.STARTING:
            # A new incarnation: the old exit is history now.
            view.exitcode = None
            view.signal_name = None
            view.caused_by_us = False
            view.failure = None
            view.failed_at = None
            view.knock_on = ""
            view.exit_cause = None
            view.timer_scope = None
            view.escalation_deadline = None
            view.input_wait = None
        return {event.rank, -1}

    def _apply_restart(self, event: RankRestarted) -> set[int]:
        if not 0 <= event.rank < len(self.ranks):
            return set()
        view = self.ranks[event.rank]
        _switch_files(
            view,
            event.stdout_path,
            event.stderr_path,
            event.error_file,
            attempt=event.attempt,
            restart_count=event.restart_count,
            previous_attempt=event.attempt - 1 if event.whole_attempt else event.attempt,
        )
        view.pid = event.pid
        view.restart_count = event.restart_count
        view.attempt = event.attempt
        why = (
            f"attempt {event.attempt}" if event.whole_attempt else f"restart {event.restart_count}"
        )
        view.buffer.mark_incarnation(f"── {why} · pid {event.pid} ──")
        view.last_line = ""
        return {event.rank, -1}


def _note_progress(view: RankView, found: Progress) -> bool:
    """Keep ``found`` as the rank's progress of its kind unless it goes back: within one
    process a counter only grows, so a lower number is a line quoting an old step (a warning
    "clipped at step 17"), not progress. A tqdm bar may start again (one per epoch)."""
    key = found.source or found.kind
    before = view.progress_by_kind.pop(key, None)
    if before is not None and found.kind != "tqdm" and found.step < before.step:
        view.progress_by_kind[key] = before
        return False
    view.progress_by_kind[key] = found  # last in the dict: the newest source
    if before is None or found.step != before.step:
        view.steps_seen += 1
    return True


def _kind_rank(source: str) -> int:
    """Where a source's kind stands in ``KINDS`` (the best first)."""
    kind = source.split(":", 1)[0]
    return KINDS.index(kind) if kind in KINDS else len(KINDS)


def _own_best(view: RankView) -> Progress | None:
    """A rank's own best source when the ranks share none: its bar over a number in prose."""
    if not view.progress_by_kind:
        return view.progress
    newest_first = reversed(view.progress_by_kind.items())  # the newest of a kind wins a tie
    return min(newest_first, key=lambda item: _kind_rank(item[0]))[1]


def _path_of(view: RankView, kind: LineKind) -> str:
    return view.stdout_path if kind == "stdout" else view.stderr_path


def _events_shown(view: RankView, kind: LineKind) -> int | None:
    """Where the lines the events drew of the current file of ``kind`` end (None: none
    yet). Lines shown before the run's paths were known (a viewer can draw a rank's first
    lines before the snapshot that names its files) were the first files' lines: they count
    for the first path the view learns."""
    before = view.events_bytes.get(kind)
    if before is None or before[0] not in (_path_of(view, kind), ""):
        return None
    return before[1]


def _follows_its_files(view: RankView) -> bool:
    """Whether the pane shows ``view`` from its current files (not an earlier life's)."""
    return any(path == _path_of(view, kind) for kind, path in view.file_ahead.items())  # type: ignore[arg-type]


def _switch_files(
    view: RankView,
    stdout_path: str,
    stderr_path: str,
    error_file: str,
    *,
    attempt: int,
    restart_count: int,
    previous_attempt: int | None = None,
) -> None:
    """Point the rank at new files, keeping the old ones as an earlier incarnation.

    A restart can be seen first in a snapshot or first in its ``RankRestarted`` event; the
    old files are recorded once either way (the earlier run's attempt and count are those
    just before the new ones: the view may already carry the new count from a state event).
    """
    if (stdout_path, stderr_path) == (view.stdout_path, view.stderr_path):
        view.error_file = error_file or view.error_file
        return
    if view.stdout_path or view.stderr_path:
        previous = Incarnation(
            previous_attempt if previous_attempt is not None else view.attempt,
            max(0, restart_count - 1) if restart_count else view.restart_count,
            view.stdout_path,
            view.stderr_path,
            view.error_file,
        )
        if all(inc.stdout_path != previous.stdout_path for inc in view.earlier):
            view.earlier.append(previous)
    view.stdout_path = stdout_path
    view.stderr_path = stderr_path
    view.error_file = error_file


def _knock_on(view: RankView) -> str:
    """What kind of knock-on the failure of ``view`` reads as: its message, else the last
    lines of stderr it printed before it ended ("" when it reads as its own error)."""
    message = getattr(view.failure, "message", "")
    if isinstance(message, dict):
        message = message.get("message", "")
    texts = [str(message or "")]
    buffer = view.buffer
    last = (buffer[i] for i in range(max(0, len(buffer) - KNOCK_ON_LINES), len(buffer)))
    texts += [text for kind, text in last if kind == "stderr"]
    return knock_on_reason("\n".join(texts)) or ""


def _failure_time(failure: Any, fallback: float) -> float | None:
    """The failure's own timestamp (error.json or exit time), else the event's time."""
    stamp = getattr(failure, "timestamp", None)
    if isinstance(stamp, (int, float)) and stamp > 0:
        return float(stamp)
    return fallback or None
