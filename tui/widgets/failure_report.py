"""A failed rank as a readable report: error.json traceback in Rich's traceback style, or the
exit code / signal and the last stderr lines when the rank left no error.json; and the ranks
rankvisor stopped, as a short list apart (they did not fail).

Everything a rank wrote (messages, tracebacks, stderr lines) is put into ``Text`` objects,
never parsed as markup. ``failure_details`` and ``parse_callstack`` are plain functions, also
used by the summary printed after quitting.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from datetime import datetime, tzinfo
from typing import Any, Final, Sequence

from rich.console import Group, RenderableType
from rich.panel import Panel
from rich.syntax import Syntax
from rich.text import Text

from ...engine.errors.error_file import usable_timestamp
from ...engine.events import Suspect
from ...engine.forensics.exit_cause import ExitCause, diagnose
from ...engine.forensics.stacks import SavedDump
from ...engine.logfile.tail import last_lines
from ...engine.output.sanitize import sanitize
from ..model import RankView
from .ansi import display_text, single_width_joins

__all__ = [
    "FailureDetails",
    "Frame",
    "exit_cause",
    "failure_details",
    "parse_callstack",
    "render_failure",
    "render_stack_dumps",
    "render_stopped",
    "render_suspect",
    "stderr_tail",
]

TAIL_LINES: Final = 12
"""Last stderr lines shown for a failure without error.json (as many as headless prints)."""

_FRAME: Final = re.compile(r'^\s*File "(?P<file>.*)", line (?P<line>\d+), in (?P<name>.*)$')
_CHAIN: Final = (
    "During handling of the above exception, another exception occurred:",
    "The above exception was the direct cause of the following exception:",
)


@dataclass(frozen=True, slots=True)
class Frame:
    filename: str
    lineno: int
    name: str
    code: str = ""


@dataclass(frozen=True, slots=True)
class Stack:
    """One exception of a (possibly chained) traceback."""

    frames: tuple[Frame, ...]
    exception: str
    chained_by: str = ""
    """The sentence that introduced this exception in a chain, "" for the first."""


@dataclass(frozen=True, slots=True)
class FailureDetails:
    message: str
    callstack: str
    timestamp: float | None
    error_file: str
    has_error_file: bool


def failure_details(view: RankView) -> FailureDetails:
    """What the failure (torch's ``ProcessFailure`` or alike) says, tolerant of odd shapes.

    Everything here came from a rank's error.json, which a rank can fill with anything: the
    text is sanitised (colours kept, every other escape that could act on the terminal
    removed, line breaks kept for tracebacks) and a timestamp is used only when it is a
    usable time, so neither the error view nor the quit summary can be driven or crashed.
    """
    failure: Any = view.failure
    data = getattr(failure, "error_file_data", None) or {}
    message = ""
    callstack = ""
    timestamp: float | None = None
    if isinstance(data, dict):
        inner = data.get("message")
        if isinstance(inner, dict):
            message = str(inner.get("message", "") or "")
            extra = inner.get("extraInfo")
            if isinstance(extra, dict):
                callstack = str(extra.get("py_callstack", "") or "")
                seconds = usable_timestamp(extra.get("timestamp"))
                timestamp = None if seconds is None else float(seconds)
        elif isinstance(inner, str):
            message = inner
    if not message:
        message = str(getattr(failure, "message", "") or "")
    if message.strip() in ("<NONE>", "<N/A>"):  # torch's placeholders for "no error file"
        message = ""
    if timestamp is None:
        timestamp = view.failed_at
    error_file = str(getattr(failure, "error_file", "") or view.error_file or "")
    if error_file == "<N/A>":
        error_file = ""
    has_file = bool(callstack) or (bool(error_file) and bool(data) and bool(message))
    return FailureDetails(
        sanitize(message), sanitize(callstack), timestamp, sanitize(error_file), has_file
    )


def exit_cause(view: RankView) -> ExitCause | None:
    """Why the rank ended: the supervisor's verdict when it sent one, else the same
    classification from what this viewer knows (a torchrun job watched from outside, a run
    recorded by an older version): the exit code, whether rankvisor stopped it, its message
    and the end of its stderr file; without the cgroup's count or the kernel log."""
    if isinstance(view.exit_cause, ExitCause):
        return view.exit_cause
    if view.state.is_alive or view.exitcode in (None, 0):
        return None
    failure: Any = view.failure
    message: Any = getattr(failure, "message", "") or ""
    if isinstance(message, dict):
        message = message.get("message", "")
    return diagnose(
        view.exitcode,
        caused_by_us=view.caused_by_us,
        message=str(message),
        stderr_path=view.stderr_path,
    )


_STACK_CODES: Final = ("sigsegv", "sigbus", "sigabrt")


def _cause_line(cause: ExitCause) -> Text:
    line = Text()
    line.append("cause: ", "bold")
    line.append(sanitize(cause.text), "yellow")
    return line


def stderr_tail(view: RankView, count: int = TAIL_LINES) -> list[str]:
    """The last stderr lines of the rank's current incarnation: from its buffer (the lines
    since its last restart), else from the end of its own stderr.log. An earlier attempt's or
    restart's lines are never this failure's."""
    lines = view.buffer.tail(count, "stderr", this_incarnation=True)
    if lines:
        return lines
    return last_lines(view.stderr_path, count)


def parse_callstack(callstack: str) -> list[Stack]:
    """Python's formatted traceback text back into frames, chained exceptions split."""
    stacks: list[Stack] = []
    frames: list[Frame] = []
    exception: list[str] = []
    chained_by = ""
    lines = callstack.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        stripped = line.strip()
        if stripped in _CHAIN:
            if frames or exception:
                stacks.append(Stack(tuple(frames), "\n".join(exception).strip(), chained_by))
            frames, exception, chained_by = [], [], stripped
        elif stripped.startswith("Traceback (most recent call last)"):
            pass
        elif match := _FRAME.match(line):
            code = ""
            if (
                i + 1 < len(lines)
                and lines[i + 1].startswith("    ")
                and not _FRAME.match(lines[i + 1])
            ):
                code = lines[i + 1].strip()
                i += 1
                # Skip the ^^^^ markers Python 3.11+ puts under the failing expression.
                while (
                    i + 1 < len(lines)
                    and set(lines[i + 1].strip()) <= set("^~ ")
                    and lines[i + 1].strip()
                ):
                    i += 1
            frames.append(Frame(match["file"], int(match["line"]), match["name"], code))
        elif stripped:
            exception.append(line)
        i += 1
    if frames or exception:
        stacks.append(Stack(tuple(frames), "\n".join(exception).strip(), chained_by))
    return stacks


def when_text(timestamp: float | None, tz: tzinfo | None = None) -> str:
    if not timestamp:
        return ""
    try:
        return datetime.fromtimestamp(timestamp, tz).strftime("%Y-%m-%d %H:%M:%S")
    except (OverflowError, OSError, ValueError):
        return ""  # no time a calendar can show: say nothing rather than fail


def _render_stack(stack: Stack, width: int) -> RenderableType:
    parts: list[RenderableType] = []
    for frame in stack.frames:
        where = Text()
        folder, _, base = frame.filename.rpartition("/")
        if folder:
            where.append(folder + "/", "dim")
        where.append(base, "bold magenta")
        where.append(":")
        where.append(str(frame.lineno), "bold")
        where.append(" in ")
        where.append(frame.name, "bold green")
        parts.append(where)
        if frame.code:
            parts.append(
                Syntax(
                    frame.code,
                    "python",
                    theme="ansi_dark",
                    line_numbers=False,
                    word_wrap=True,
                    background_color="default",
                    code_width=width - 8,
                    padding=(0, 0, 0, 2),
                )
            )
    panel = Panel(
        Group(*parts) if parts else Text("(no frames)", "dim"),
        title=Text("Traceback (most recent call last)", "bold"),
        border_style="red",
        expand=True,
        padding=(0, 1),
    )
    exception = Text(stack.exception or "(no exception line)", "bold red")
    if stack.chained_by:
        return Group(Text(stack.chained_by, "italic dim"), panel, exception)
    return Group(panel, exception)


def render_suspect(suspect: Suspect, root_cause: int | None) -> RenderableType:
    """The suspect as the error view's first block: marked, with one line of evidence per
    rank named, and how it stands to torch's root cause."""
    title = Text()
    title.append(" SUSPECT ", "bold reverse yellow")
    title.append(" ")
    named = suspect.ranks or (suspect.rank,)
    title.append(f"rank {', '.join(map(str, named))}", "bold")
    title.append("  the rank most likely to have started the failure", "dim")
    parts: list[RenderableType] = [title]
    for line in suspect.evidence or (suspect.reason,):
        parts.append(Text("  " + single_width_joins(sanitize(line)), "yellow"))
    if root_cause is not None and root_cause != suspect.rank:
        parts.append(Text(
            f"  torch's root cause is rank {root_cause}: the earliest failure", "dim"
        ))
    return Group(*parts)


def render_stopped(views: Sequence[RankView]) -> RenderableType:
    """The ranks rankvisor stopped, one line each with how they ended: not failures, so no
    traceback and no stderr (their last lines say nothing about why the run ended)."""
    text = Text()
    text.append("Stopped by rankvisor", "bold")
    text.append(" (not failures)", "dim")
    for view in views:
        text.append("\n")
        text.append(f"rank {view.rank}", "bold")
        text.append(f"  {view.exit_label or view.state.value}", "yellow")
        if view.pid is not None:
            text.append(f"  pid {view.pid}")
        if view.restart_count:
            text.append(f"  restart {view.restart_count}")
        cause = exit_cause(view)
        if cause is not None and cause.code != "stopped":
            # Stopped, but something else ended it first (the OOM killer during teardown).
            text.append(f"  {sanitize(cause.text)}", "red")
    return text


def render_stack_dumps(dumps: Sequence[SavedDump], run_dir: str = "") -> RenderableType:
    """The run's saved stack dumps (``S``, ``rankvisor stack``, before a SIGKILL): a line per
    file, newest first, with its odd group (the first merged line) under it."""
    text = Text()
    text.append(f"Stack dumps ({len(dumps)})", "bold")
    text.append(" (S dumps again)", "dim")
    for dump in reversed(dumps):
        text.append("\n")
        path = dump.path
        if run_dir and path.startswith(run_dir.rstrip("/") + "/"):
            path = path[len(run_dir.rstrip("/")) + 1:]
        text.append(sanitize(path), "bold")
        why = dump.first_line.rpartition("(py-spy dump, ")[2].rstrip(")")
        if why:
            text.append(f"  {sanitize(why)}", "dim")
        if dump.merged:
            text.append("\n    ")
            text.append(sanitize(dump.merged[0]), "yellow" if dump.merged[0].startswith("odd")
                        else "")
    return text


def render_failure(
    view: RankView,
    *,
    root_cause: bool,
    stderr_tail: Sequence[str],
    width: int = 100,
    log_dir: str = "",
    tz: tzinfo | None = None,
) -> RenderableType:
    """The report block of one failed rank."""
    details = failure_details(view)
    # Joiners make Rich and the terminal disagree on widths, and the borders break.
    details = replace(
        details,
        message=single_width_joins(details.message),
        callstack=single_width_joins(details.callstack),
    )
    title = Text()
    if root_cause:
        title.append(" ROOT CAUSE ", "bold reverse red")
        title.append(" ")
    title.append(f"rank {view.rank}", "bold")
    title.append(f"  {view.exit_label or view.state.value}", "bold red")
    if view.pid is not None:
        title.append(f"  pid {view.pid}")
    if view.restart_count:
        title.append(f"  restart {view.restart_count}")
    when = when_text(details.timestamp, tz)
    if when:
        title.append(f"  at {when}", "dim")
    parts: list[RenderableType] = [title]
    cause = exit_cause(view)
    crash_stack = cause.detail if cause is not None and cause.code in _STACK_CODES else ""
    stacks = parse_callstack(details.callstack) if details.callstack else []
    # A plain exit code, or an exception whose traceback or message follows, says nothing
    # more as a cause line.
    if cause is not None and not (
        cause.code == "exit" or (cause.code == "exception" and (stacks or details.message))
    ):
        parts.append(_cause_line(cause))
    # The message usually repeats the traceback's last line; show it only when it adds.
    if details.message and not (stacks and stacks[-1].exception.strip() == details.message.strip()):
        parts.append(Text(details.message, "red"))
    if stacks:
        for stack in stacks:
            parts.append(_render_stack(stack, width))
    else:
        if view.signal_name:
            why = f"was killed by {view.signal_name}"
        elif view.exitcode is not None:
            why = f"exited with code {view.exitcode}"
        else:
            why = "failed"
        if crash_stack:
            # faulthandler's dump: the Python stack at the crash, apart from the other lines.
            shown = {line.strip() for line in crash_stack.splitlines()}
            stack_text = Text("\n").join(
                display_text(sanitize(line)).copy() for line in crash_stack.splitlines()
            )
            parts.append(Panel(
                stack_text, title=Text("Python stack at the crash (faulthandler)", "bold"),
                border_style="red", expand=True, padding=(0, 1),
            ))
            stderr_tail = [line for line in stderr_tail if line.strip() not in shown]
            if not stderr_tail:
                parts.append(Text(f"No error.json: the rank {why}; stderr holds nothing else.",
                                  "italic"))
        if stderr_tail or not crash_stack:
            parts.append(Text(f"No error.json: the rank {why}. Last stderr lines:", "italic"))
        if stderr_tail:
            tail = Text("\n").join(display_text(line).copy() for line in stderr_tail)
            parts.append(Panel(tail, border_style="dim", expand=True, padding=(0, 1)))
        elif not crash_stack:
            parts.append(Text("  (stderr is empty)", "dim"))
    if details.error_file and details.has_error_file:
        parts.append(Text(f"error file: {details.error_file}", "dim"))
    return Group(*parts)
