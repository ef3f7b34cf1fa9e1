"""ErrorsScreen (e): the suspect first, with its evidence; then every failed rank, the root
cause (earliest failure) first and marked.

The suspect is the supervisor's reading of which rank started the failure (a rank that went
silent before it, one a person signalled, the earliest failure that is not a knock-on of
another rank's); torch's root cause, the earliest failure, stays as it was beside it.

Ranks with an error.json (torch's ``@record``) show its traceback in Rich's traceback style;
the others show their exit code or signal and the last lines of that incarnation's stderr (from
the pane's buffer since the rank's last restart, or the end of its own stderr.log when the
buffer holds none): never an earlier attempt's or restart's lines. Ranks rankvisor stopped (the
teardown after a failure, terminate, kill, quit) are listed after them, apart, with how they
ended: they did not fail, and are never the root cause. Last, the stack dumps saved under the
run directory (``S``, ``rankvisor stack``, before a SIGKILL): a line per file.
"""

from __future__ import annotations

import os

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Static

from ...engine.forensics.stacks import STACKS_DIR, list_dumps
from ...engine.output.sanitize import sanitize
from ..model import RunView
from ..widgets.failure_report import (
    render_failure,
    render_stack_dumps,
    render_stopped,
    render_suspect,
    stderr_tail,
)
from ..widgets.key_footer import KeyFooter
from ..widgets.run_summary import RunSummary

__all__ = ["ErrorsScreen", "stderr_tail"]


class ErrorsScreen(Screen[None]):
    """The failures of the run, most important first."""

    BINDINGS = [
        Binding("escape", "app.pop_screen", "Back"),
        Binding("j,down", "scroll(1)", "Scroll", show=False),
        Binding("k,up", "scroll(-1)", "Scroll", show=False),
    ]

    def __init__(self, run: RunView) -> None:
        super().__init__()
        self.run = run
        self._shown: tuple[object, ...] | None = None

    def compose(self) -> ComposeResult:
        yield RunSummary()
        yield VerticalScroll(id="failures")
        yield KeyFooter()

    def on_mount(self) -> None:
        self.on_run_changed(None)

    def on_run_changed(self, changed: set[int] | None) -> None:
        """The app calls this after engine events and on its tick."""
        args = getattr(self.app, "summary_args", None)
        if callable(args):
            self.query_one(RunSummary).show(self.run, **args())
        self.refresh_report()

    def action_scroll(self, lines: int) -> None:
        self.query_one("#failures").scroll_relative(y=lines, animate=False)

    def refresh_report(self) -> None:
        """Rebuild the report if the set of failures or of stopped ranks changed."""
        failures = self.run.failures()
        stopped = self.run.stopped()
        root = self.run.root_cause()
        suspect = self.run.suspect
        key = (
            root,
            suspect,
            self.run.live_suspect,
            tuple((v.rank, v.state, v.exitcode, v.restart_count, id(v.failure)) for v in failures),
            tuple((v.rank, v.state, v.exitcode, v.restart_count) for v in stopped),
            self._dump_names(),
        )
        if key == self._shown:
            return
        self._shown = key
        box = self.query_one("#failures", VerticalScroll)
        box.remove_children()
        title = f"errors · {len(failures)} failed rank(s)"
        if stopped:
            title += f" · {len(stopped)} stopped by rankvisor"
        box.border_title = Text(title)
        if not failures:
            alive = len(self.run.alive)
            words = "No rank has failed."
            if stopped:
                words = "No rank has failed: the run was stopped by rankvisor."
            if alive:
                words += f" {alive} still running."
            box.mount(Static(Text(words, "italic"), classes="no-failures"))
            if self.run.live_suspect:
                box.mount(Static(Text.assemble(
                    ("live suspect (still hanging): ", "bold yellow"),
                    sanitize(self.run.live_suspect),
                ), classes="suspect"))
        if suspect is not None and failures:
            box.mount(Static(render_suspect(suspect, root), classes="suspect"))
        width = max(40, self.size.width - 6)
        for view in failures:
            block = Static(
                render_failure(
                    view,
                    root_cause=view.rank == root,
                    stderr_tail=stderr_tail(view),
                    width=width,
                    log_dir=self.run.log_dir,
                    tz=getattr(self.app, "time_zone", None),
                ),
                classes="failure",
            )
            block.set_class(view.rank == root, "-root-cause")
            box.mount(block)
        if stopped:
            box.mount(Static(render_stopped(stopped), classes="stopped"))
        dumps = list_dumps(self.run.log_dir) if self.run.log_dir else []
        if dumps:
            box.mount(Static(render_stack_dumps(dumps, self.run.log_dir), classes="stack-dumps"))

    def _dump_names(self) -> tuple[str, ...]:
        """The run's saved stack dumps (a directory listing: cheap on every tick)."""
        if not self.run.log_dir:
            return ()
        try:
            names = os.listdir(os.path.join(self.run.log_dir, STACKS_DIR))
        except OSError:
            return ()
        return tuple(sorted(n for n in names if n.endswith(".txt")))
