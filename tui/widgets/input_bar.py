"""InputBar (i): a line typed to one rank's stdin, or to every rank at a prompt.

The bar only edits and asks: Enter posts ``InputBar.Send``, Ctrl-D on an empty line posts
``InputBar.Eof``, and the app turns them into ``SendInput`` / ``CloseInput`` through the
handle (after asking, for a line that would end a debugger). It stays open after a line, as a
terminal would; Esc leaves. Up/Down walk the lines typed to its rank (by any viewer: the
history is the run's, from the ``RankInput`` events). Ctrl-T flips between the bound rank and
every rank at a prompt; the label says which. A viewer that may not type gets the bar
disabled, with the reason in it.

Closed, the line is hidden and may not take the focus: Textual gives a screen that comes
back (from a view, a zoom) its first focusable widget, and a hidden line would then have
taken every key, unseen, for the rank. Open, the bar is drawn apart while its line has the
keys (``-typing``), so a person sees where a key goes.
"""

from __future__ import annotations

from typing import Callable, Sequence

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.message import Message
from textual.widgets import Input, Static

__all__ = ["InputBar", "InputLine"]


class InputLine(Input):
    """The text box: Input's editing keys, plus history, the toggle, EOF and Esc."""

    BINDINGS = [
        Binding("escape", "leave", "Leave"),
        Binding("up", "history(-1)", "History", show=False),
        Binding("down", "history(1)", "History", show=False),
        Binding("ctrl+t", "toggle_all", "All at a prompt"),
        Binding("ctrl+d", "eof", "EOF"),
    ]

    def allow_focus(self) -> bool:
        """Only while its bar is shown (see the module docstring)."""
        bar = self.parent
        return super().allow_focus() and not (isinstance(bar, InputBar) and not bar.display)

    def action_leave(self) -> None:
        bar = self.parent
        if isinstance(bar, InputBar):
            bar.close()

    def action_history(self, step: int) -> None:
        bar = self.parent
        if isinstance(bar, InputBar):
            bar.walk_history(step)

    def action_toggle_all(self) -> None:
        bar = self.parent
        if isinstance(bar, InputBar):
            bar.to_all = not bar.to_all

    def action_eof(self) -> None:
        """EOF on an empty line (as in a terminal); else delete forward, as Input does."""
        bar = self.parent
        if self.value or not isinstance(bar, InputBar):
            self.action_delete_right()
            return
        bar.post_message(InputBar.Eof(bar.rank, bar.to_all))


class InputBar(Horizontal):
    """``INPUT rank 0 ›`` and the line; see the module docstring."""

    DEFAULT_CSS = """
    InputBar {
        height: 1;
        background: $boost;
    }
    InputBar > #input-label {
        width: auto;
        padding: 0 1;
        background: $accent;
        color: $text;
        text-style: bold;
    }
    InputBar > InputLine {
        border: none;
        height: 1;
        padding: 0 1;
        width: 1fr;
        background: $boost;
    }
    InputBar > InputLine:focus {
        border: none;
    }
    InputBar.-typing > #input-label {
        background: $warning;
        color: $text-warning;
    }
    InputBar.-typing > InputLine {
        background: $warning 15%;
    }
    """

    class Send(Message):
        """Enter: ``text`` for ``rank`` (or every rank at a prompt, ``to_all``)."""

        def __init__(self, rank: int, text: str, to_all: bool) -> None:
            super().__init__()
            self.rank = rank
            self.text = text
            self.to_all = to_all

    class Eof(Message):
        """Ctrl-D on an empty line: close the stdin of ``rank`` (or of every rank at a
        prompt)."""

        def __init__(self, rank: int, to_all: bool) -> None:
            super().__init__()
            self.rank = rank
            self.to_all = to_all

    def __init__(
        self,
        rank: int,
        history: Callable[[int], Sequence[str]],
        *,
        refusal: str = "",
        waiting: Callable[[], int] = lambda: 0,
    ) -> None:
        super().__init__()
        self.rank = rank
        self._history = history
        self._waiting = waiting
        self._to_all = False
        self._refusal = refusal
        self._back = 0
        """How far back in the history the line is (0: the line being written)."""
        self._draft = ""
        self.label = Static(id="input-label")
        self.line = InputLine(id="input-line", select_on_focus=False)

    def compose(self) -> ComposeResult:
        yield self.label
        yield self.line

    def on_mount(self) -> None:
        # The app's choice (off in tests and screenshots): a blinking cursor drew the line
        # with or without it, by the time a screenshot was taken.
        self.line.cursor_blink = bool(getattr(self.app, "cursor_blink", True))
        self.bind_to(self.rank, refusal=self._refusal)

    # -- what it is bound to ---------------------------------------------------------------

    def bind_to(self, rank: int, *, refusal: str = "") -> None:
        """Bind the line to ``rank``; a ``refusal`` (why this viewer may not type) disables it."""
        self.rank = rank
        self._refusal = refusal
        self._back = 0
        self.line.disabled = bool(refusal)
        self.line.placeholder = (
            refusal or f"a line for rank {rank}'s stdin · enter sends · ↑↓ history · "
            "=EXPR its value on every rank at pdb · ctrl+t every rank at a prompt · ctrl+d EOF · "
            "esc leaves"
        )
        self.show_label()

    @property
    def to_all(self) -> bool:
        return self._to_all

    @to_all.setter
    def to_all(self, value: bool) -> None:
        self._to_all = value
        self.show_label()

    def on_descendant_focus(self) -> None:
        self.set_class(True, "-typing")
        self.show_label()

    def on_descendant_blur(self) -> None:
        self.set_class(False, "-typing")
        self.show_label()

    def show_label(self) -> None:
        if self._to_all:
            words = f"INPUT every rank at a prompt ({self._waiting()})"
        else:
            words = f"INPUT rank {self.rank}"
        if self._refusal:
            words += " · read-only"
        elif not self.line.has_focus:
            words += " · keys go to the app (i: type)"
        self.label.update(Text(words + " ›"))

    def open(self) -> None:
        self.display = True
        self.show_label()
        if not self.line.disabled:
            self.line.focus()

    def close(self) -> None:
        self.display = False
        self.line.value = ""
        self._back = 0
        self._to_all = False
        self.screen.set_focus(None)

    # -- editing ---------------------------------------------------------------------------

    def walk_history(self, step: int) -> None:
        """Up (-1) goes back through the lines typed to this rank, Down (+1) forward to the
        line being written."""
        lines = self._history(self.rank)
        if self._back == 0:
            self._draft = self.line.value
        back = max(0, min(len(lines), self._back - step))
        if back == self._back:
            return
        self._back = back
        self.line.value = self._draft if back == 0 else lines[-back]
        self.line.cursor_position = len(self.line.value)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.post_message(InputBar.Send(self.rank, event.value, self._to_all))
        self.line.value = ""
        self._back = 0
        self._draft = ""
