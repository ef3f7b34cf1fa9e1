"""ConfirmScreen: a yes/no question before anything destructive on all ranks (or quitting);
RestartRankScreen: before one rank of several restarts alone, with restart-all offered;
QuitScreen: quitting a viewer of a run that can go on without it (detach, or end the run)."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Static

__all__ = ["ConfirmScreen", "QuitScreen", "RestartRankScreen"]


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
                # Text, not markup: "[y]" is the key to press, not a style.
                yield Button(Text(f"{self._yes} [y]"), variant="error", id="yes")
                yield Button(Text(f"{self._no} [n]"), variant="primary", id="no")

    def on_mount(self) -> None:
        self.query_one("#no", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        self.dismiss(event.button.id == "yes")

    def action_answer(self, answer: bool) -> None:
        self.dismiss(answer)


class RestartRankScreen(ModalScreen[str]):
    """Before one rank of several restarts alone: its peers may not survive it.

    Ranks that talk to each other (a torch.distributed process group over gloo or NCCL)
    usually fail when one of them is stopped and started alone: the peers see their
    connection closed, and the new process cannot rejoin a collective already formed. So the
    dialog says so and offers the whole group instead. Dismisses with "rank" (y), "all" (a)
    or "" (n, escape, Cancel).
    """

    BINDINGS = [
        Binding("y", "answer('rank')", "Restart rank"),
        Binding("a", "answer('all')", "Restart all"),
        Binding("n,escape", "answer('')", "Cancel"),
        Binding("left,right,tab,h,l", "app.focus_next", "Switch", show=False),
    ]

    def __init__(self, rank: int, nprocs: int, next_attempt: int, distributed: str = "") -> None:
        super().__init__(classes="dialog")
        self._rank = rank
        self._nprocs = nprocs
        self._next_attempt = next_attempt
        self._distributed = distributed
        """How the ranks showed they form a torch.distributed group ("" : they did not):
        then restarting them all is the default."""

    def compose(self) -> ComposeResult:
        question = (
            f"Stop rank {self._rank} and start it again alone; the other "
            f"{self._nprocs - 1} rank(s) keep running.\n\n"
            "Ranks that talk to each other (torch.distributed, gloo, NCCL) usually fail "
            "when one of them restarts alone: its peers lose their connection "
            '("Connection closed by peer") and the new process cannot rejoin the group.\n\n'
            f"Restart all [a] stops every rank and starts attempt {self._next_attempt} "
            "together. Earlier logs stay on disk either way."
        )
        if self._distributed:
            question = (
                f"This job's ranks form a torch.distributed group ({self._distributed}): "
                "restarting them all is the default (enter).\n\n" + question
            )
        with Vertical(id="dialog") as dialog:
            dialog.border_title = Text(f"Restart rank {self._rank} alone?")
            yield Static(Text(question), id="question")
            with Horizontal(id="buttons"):
                # Text, not markup: "[y]" is the key to press, not a style.
                yield Button(Text(f"Rank {self._rank} [y]"), variant="error", id="rank")
                yield Button(Text("Restart all [a]"), variant="warning", id="all")
                yield Button(Text("Cancel [n]"), variant="primary", id="cancel")

    def on_mount(self) -> None:
        self.query_one("#all" if self._distributed else "#cancel", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        self.dismiss({"rank": "rank", "all": "all"}.get(event.button.id or "", ""))

    def action_answer(self, answer: str) -> None:
        self.dismiss(answer)


class QuitScreen(ModalScreen[str]):
    """Quitting a viewer whose run goes on without it: leave it running, or end it.

    The safe answer is the default one (focused, and what enter picks): detach, since a run
    that took a day to get where it is should not end because a viewer closed. Dismisses
    with "detach" (d), "terminate" (t) or "" (n, escape, Cancel).
    """

    BINDINGS = [
        Binding("d", "answer('detach')", "Detach"),
        Binding("t", "answer('terminate')", "Terminate all"),
        Binding("n,escape", "answer('')", "Cancel"),
        Binding("left,right,tab,h,l", "app.focus_next", "Switch", show=False),
    ]

    def __init__(self, alive: int, term_timeout_s: float) -> None:
        super().__init__(classes="dialog")
        self._alive = alive
        self._timeout = term_timeout_s

    def compose(self) -> ComposeResult:
        question = (
            f"{self._alive} rank(s) still running.\n\n"
            "Detach [d] leaves the run going: attach again later with `rankvisor attach`.\n"
            f"Terminate [t] sends every rank SIGTERM, SIGKILL after {self._timeout:g}s, "
            "then quits."
        )
        with Vertical(id="dialog") as dialog:
            dialog.border_title = Text("Quit the viewer?")
            yield Static(Text(question), id="question")
            with Horizontal(id="buttons"):
                yield Button(Text("Detach [d]"), variant="primary", id="detach")
                yield Button(Text("Terminate all [t]"), variant="error", id="terminate")
                yield Button(Text("Cancel [n]"), variant="default", id="cancel")

    def on_mount(self) -> None:
        self.query_one("#detach", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        answers = {"detach": "detach", "terminate": "terminate"}
        self.dismiss(answers.get(event.button.id or "", ""))

    def action_answer(self, answer: str) -> None:
        self.dismiss(answer)
