"""PromptsScreen (p): every rank at a prompt, longest waiting first, as ``ray debug`` lists
its breakpoints: rank, where it stopped, its prompt, since when. Enter jumps to the rank and
opens its input line; escape closes. The list follows the run while it is open (a rank that
is answered leaves it, one that starts waiting joins it)."""

from __future__ import annotations

from datetime import datetime, tzinfo

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import OptionList, Static
from textual.widgets.option_list import Option

from ..model import RunView
from ..widgets.ansi import plain_text

__all__ = ["PromptsScreen", "prompt_rows"]


def prompt_rows(run: RunView, tz: tzinfo | None = None) -> list[tuple[int, Text]]:
    """(rank, row) for each rank at a prompt, longest waiting first."""
    rows = []
    for view in run.waiting():
        wait = view.input_wait
        assert wait is not None
        since = datetime.fromtimestamp(wait.since, tz).strftime("%H:%M:%S")
        where = plain_text(wait.where) or "-"
        prompt = plain_text(wait.prompt).strip() or "(no prompt)"
        row = Text(no_wrap=True, overflow="ellipsis")
        row.append(f"{view.rank:<6}", "bold")
        row.append(f"{where:<34.34} ", "cyan")
        row.append(f"{prompt:<18.18} ", "bold magenta")
        row.append(since, "dim")
        rows.append((view.rank, row))
    return rows


class PromptsScreen(ModalScreen[int | None]):
    """Dismisses with the rank picked (enter), or None (escape, p)."""

    BINDINGS = [Binding("escape,p,q", "dismiss(None)", "Close")]

    def __init__(self, run: RunView, tz: tzinfo | None = None) -> None:
        super().__init__(classes="dialog")
        self.run = run
        self.tz = tz
        self._shown: list[tuple[int, str]] = []

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog") as dialog:
            dialog.border_title = Text("ranks at a prompt")
            dialog.border_subtitle = Text("enter: answer it · escape: close")
            yield Static(id="prompts-empty")
            yield Static(
                Text(f" {'rank':<6}{'where':<34} {'prompt':<18} since", style="dim"),
                id="prompts-heading",
            )
            yield OptionList(id="prompts")

    def on_mount(self) -> None:
        self.on_run_changed(None)
        self.query_one(OptionList).focus()

    def on_run_changed(self, changed: set[int] | None) -> None:
        rows = prompt_rows(self.run, self.tz)
        key = [(rank, row.plain) for rank, row in rows]
        if key == self._shown:
            return
        self._shown = key
        options = self.query_one(OptionList)
        highlighted = options.highlighted
        options.clear_options()
        options.add_options([Option(row, id=str(rank)) for rank, row in rows])
        if rows:
            options.highlighted = min(highlighted or 0, len(rows) - 1)
        options.display = bool(rows)
        self.query_one("#prompts-heading", Static).display = bool(rows)
        empty = self.query_one("#prompts-empty", Static)
        empty.display = not rows
        empty.update(Text("No rank is waiting for input."))

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        if event.option.id is not None:
            self.dismiss(int(event.option.id))
