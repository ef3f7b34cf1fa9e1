"""What ``c`` copies out of the app, as plain text (no colours, no escapes from the ranks).

Pure functions over the model and the log widgets, so tests can check the words and the text
without a terminal; the app sends the result with ``App.copy_to_clipboard`` (OSC 52).
"""

from __future__ import annotations

from .model import TYPED_MARK, RunView, typed_parts
from .widgets.ansi import plain_text
from .widgets.failure_report import failure_details
from .widgets.file_log import FileLog
from .widgets.rank_log import RankLog

__all__ = ["file_log_lines", "plural", "rank_log_lines", "traceback_text"]


def plural(count: int, word: str) -> str:
    """``"1 line"``, ``"12 lines"``."""
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


def rank_log_lines(log: RankLog) -> list[str]:
    """The lines a ``RankLog`` shows now (its unfinished last line included), plain."""
    buffer = log.buffer
    top = int(log.scroll_offset.y)
    height = int(log.scrollable_content_region.height)
    out: list[str] = []
    for index in range(top, top + height):
        if index < len(buffer):
            kind, line = buffer[index]
            if kind == "typed":
                prompt, typed = typed_parts(line)
                out.append(f"{plain_text(prompt)}{TYPED_MARK}{typed}")
            elif kind != "marker":
                out.append(plain_text(line))
        elif index == len(buffer) and buffer.partial:
            out.append(plain_text(buffer.partial))
    return out


def file_log_lines(log: FileLog) -> list[str]:
    """The lines a ``FileLog`` (a zoomed or filtered view) shows now, plain."""
    top = int(log.scroll_offset.y)
    height = int(log.scrollable_content_region.height)
    count = int(log.line_count)
    get_line = log.get_line
    return [plain_text(get_line(i)) for i in range(top, min(count, top + height))]


def traceback_text(run: RunView, *, stderr_lines: int = 20) -> tuple[str, str]:
    """The root cause's traceback (from its error file), else its last stderr lines, and how
    to say what it is; ``("", reason)`` when no rank failed."""
    root = run.root_cause()
    if root is None:
        return "", "no rank failed"
    view = run.ranks[root]
    details = failure_details(view)
    if details.callstack.strip():
        lines = [plain_text(line) for line in details.callstack.splitlines()]
        if details.message and details.message.strip() not in details.callstack:
            lines.append(plain_text(details.message))
        return "\n".join(lines), f"the traceback of rank {root} ({plural(len(lines), 'line')})"
    tail = [plain_text(line) for line in view.buffer.tail(stderr_lines, "stderr")]
    return "\n".join(tail), f"the last {plural(len(tail), 'stderr line')} of rank {root}"
