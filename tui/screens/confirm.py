"""ConfirmScreen: a yes/no question before anything destructive on all ranks (or quitting)."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Static

__all__ = ["ConfirmScreen"]


class ConfirmScreen(ModalScreen[bool]):
    """Dismisses with True (y, enter on Yes) or False (n, escape, No)."""

    BINDINGS = [
        Binding("y", "answer(True)", "Yes"),
        Binding("n,escape", "answer(False)", "No"),
        Binding("left,right,tab,h,l", "app.focus_next", "Switch", show=False),
    ]

    def __init__(self, title: str, question: str, *, yes: str = "Yes", no: str = "No") -> None:
        super().__init__(classes="dialog")
        self._title = title
        self._question = question
        self._yes = yes
        self._no = no

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog") as dialog:
            dialog.border_title = Text(self._title)
            yield Static(Text(self._question), id="question")
            with Horizontal(id="buttons"):
                yield Button(f"{self._yes} [y]", variant="error", id="yes")
                yield Button(f"{self._no} [n]", variant="primary", id="no")

    def on_mount(self) -> None:
        self.query_one("#no", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        self.dismiss(event.button.id == "yes")

    def action_answer(self, answer: bool) -> None:
        self.dismiss(answer)
