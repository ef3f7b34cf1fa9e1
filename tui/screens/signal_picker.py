"""SignalPicker: choose a signal to send to the selected rank (s).

Each signal is labelled first by what it does to a process that installed no handler for it
(the POSIX default action), because that is what happens to most ranks: SIGUSR1 "for stack
dumps" kills a Python rank that never registered a dump. A signal that would end such a rank
is never the one highlighted when the picker opens, and the app asks before sending it.
"""

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

from ...engine.names.signals import DefaultAction, default_action, parse_signal, signal_name

__all__ = ["EFFECTS", "SIGNALS", "SignalPicker", "effect_words"]

SIGNALS: Final[tuple[tuple[signal.Signals, str], ...]] = (
    (signal.SIGSTOP, "pause (cannot be caught)"),
    (signal.SIGCONT, "resume a paused rank"),
    (signal.SIGUSR1, "stack dumps, checkpoints if handled"),
    (signal.SIGUSR2, "whatever the rank's handler does"),
    (signal.SIGINT, "KeyboardInterrupt in Python"),
    (signal.SIGHUP, "hang-up"),
    (signal.SIGQUIT, "faulthandler dumps if registered"),
    (signal.SIGTERM, "once (t escalates to SIGKILL)"),
    (signal.SIGKILL, "at once (cannot be caught)"),
)
"""The signals offered, in order; only their numbers cross into the engine."""

EFFECTS: Final[dict[DefaultAction, tuple[str, str]]] = {
    "terminate": ("terminates", "bold red"),
    "core": ("core dump", "bold red"),
    "stop": ("pauses", "bold yellow"),
    "continue": ("resumes", "bold green"),
    "ignore": ("ignored", "green"),
}
"""The default action as the picker shows it (ten columns at most), and its colour."""


def effect_words(signum: int, target: str = "it") -> str:
    """What ``signum`` does to ``target`` if it has no handler: "terminates rank 2"."""
    action = default_action(signum)
    return {
        "terminate": f"terminates {target}",
        "core": f"terminates {target} with a core dump",
        "stop": f"pauses {target} until SIGCONT",
        "continue": f"resumes {target} if paused",
        "ignore": f"does nothing to {target}",
    }[action]


def _first_safe() -> int:
    """Index of the first offered signal that does not end a process without a handler and
    does not pause it either: what enter sends if nothing is moved."""
    for index, (sig, _) in enumerate(SIGNALS):
        if default_action(sig) not in ("terminate", "core", "stop"):
            return index
    return 0


def _label(sig: int, words: str) -> Text:
    effect, style = EFFECTS[default_action(sig)]
    return Text.assemble(
        (f"{signal_name(sig):<8}", "bold"), " ", (f"{effect:<10}", style), " ", (words, "dim")
    )


class SignalPicker(ModalScreen["int | None"]):
    """Dismisses with the chosen signal number, or None (escape)."""

    BINDINGS = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, rank: int) -> None:
        super().__init__(classes="dialog")
        self._rank = rank

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog") as dialog:
            dialog.border_title = Text(f"Send a signal to rank {self._rank}")
            yield Static(
                Text(f" {'signal':<8} {'unhandled':<10} use", style="dim"),
                id="signals-heading",
            )
            yield OptionList(
                *(Option(_label(sig, words), id=signal_name(sig)) for sig, words in SIGNALS),
                id="signals",
            )
            yield Static(
                Text("enter send (asks first unless harmless) · escape cancel", style="dim")
            )

    def on_mount(self) -> None:
        options = self.query_one(OptionList)
        options.highlighted = _first_safe()
        options.focus()

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        self.dismiss(parse_signal(event.option.id or "SIGCONT"))

    def action_cancel(self) -> None:
        self.dismiss(None)
