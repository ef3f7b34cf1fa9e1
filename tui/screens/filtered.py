"""FilteredScreen (f): filtered_stdout.log and filtered_stderr.log, live.

These files hold the lines of every rank that matched the duplicate filters
(``--filter-stdout`` / ``--filter-stderr``), prefixed with the rank, as torch writes them.
Same keys as the zoomed view: search, next/previous, o for stdout/stderr/both.
"""

from __future__ import annotations

from rich.text import Text

from ..model import RunView
from .log_files import LogFilesScreen, Streams
from .zoom import relative_path

__all__ = ["FilteredScreen"]


class FilteredScreen(LogFilesScreen):
    """The run's filtered logs (no filters configured: says so, and how to set them)."""

    def __init__(self, run: RunView, streams: Streams = "both") -> None:
        super().__init__(streams)
        self.run = run

    def paths(self) -> tuple[tuple[str, str], tuple[str, str]]:
        run = self.run
        out, err = run.filtered_stdout_path, run.filtered_stderr_path
        out_words = " | ".join(run.stdout_filters) or "none (--filter-stdout)"
        err_words = " | ".join(run.stderr_filters) or "none (--filter-stderr)"
        return (
            (out, f"{relative_path(out, run.log_dir) or 'filtered stdout'} · filter {out_words}"),
            (err, f"{relative_path(err, run.log_dir) or 'filtered stderr'} · filter {err_words}"),
        )

    def title_text(self) -> Text:
        text = Text(no_wrap=True, overflow="ellipsis")
        text.append(" filtered logs ", "bold reverse")
        text.append(f" {self.run.name} · attempt {self.run.attempt}")
        if not (self.run.stdout_filters or self.run.stderr_filters):
            text.append("  │ no filters set: rankvisor run --filter-stderr WORD ...", "italic")
        return text

    def on_filtered_lines(self, streams: set[str]) -> None:
        """The engine says new filtered lines arrived: read them now, not at the next poll."""
        self.poll()
