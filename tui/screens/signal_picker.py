"""SignalPicker: choose a signal to send to the selected rank (s)."""

from __future__ import annotations

import signal
from typing import Final

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import OptionList, Static
from textual.widgets.option_list import Option

from engine.process.signals import parse_signal, signal_name

__all__ = ["SIGNALS", "SignalPicker"]

SIGNALS: Final[tuple[tuple[signal.Signals, str], ...]] = (
    (signal.SIGUSR1, "user signal 1 (stack dumps, checkpoint hooks)"),
    (signal.SIGUSR2, "user signal 2"),
    (signal.SIGINT, "interrupt: KeyboardInterrupt in Python"),
    (signal.SIGSTOP, "pause the rank (cannot be caught)"),
    (signal.SIGCONT, "resume a paused rank"),
    (signal.SIGHUP, "hang-up"),
    (signal.SIGQUIT, "quit; faulthandler dumps if registered"),
    (signal.SIGTERM, "terminate once (t also escalates to SIGKILL)"),
    (signal.SIGKILL, "kill at once"),
)
"""The signals offered, in order; only their numbers cross into the engine."""


class SignalPicker(ModalScreen["int | None"]):
    """Dismisses with the chosen signal number, or None (escape)."""

    BINDINGS = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, rank: int) -> None:
        super().__init__(classes="dialog")
        self._rank = rank

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog") as dialog:
            dialog.border_title = Text(f"Send a signal to rank {self._rank}")
            yield OptionList(
                *(
                    Option(
                        Text.assemble((f"{signal_name(sig):<8}", "bold"), "  ", (words, "dim")),
                        id=signal_name(sig),
                    )
                    for sig, words in SIGNALS
                ),
                id="signals",
            )
            yield Static(Text("enter send · escape cancel", style="dim"))

    def on_mount(self) -> None:
        self.query_one(OptionList).focus()

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        self.dismiss(parse_signal(event.option.id or "SIGTERM"))

    def action_cancel(self) -> None:
        self.dismiss(None)
