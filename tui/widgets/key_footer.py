"""KeyFooter: the footer of every screen, its keys cut to the terminal's width.

Textual's ``Footer`` lays every shown key out in one row that scrolls: at 80 columns the
zoom's row ended "... s Signal r Re", and the keys past the edge could not be seen at all.
This one shows the keys that fit, the screen's own first, and always keeps ``?`` (the help
lists every key) and ``q`` (at 80 columns the views' footers ended before ``q Quit``). It
also draws its keys when the app does not have the focus: in a browser (``rankvisor
serve``) the page has none until it is clicked, and ``Footer`` waits for it, leaving the
row blank.
"""

from __future__ import annotations

from typing import Final, Iterable

from textual.app import ComposeResult
from textual.screen import Screen
from textual.widget import Widget
from textual.widgets import Footer
from textual.widgets._footer import FooterKey

__all__ = ["KeyFooter"]

KEPT: Final = frozenset(("help", "app.help", "request_quit", "app.request_quit"))
"""Actions whose key is shown whatever the width."""


class KeyFooter(Footer):
    """A compact footer with no command-palette key; see the module docstring."""

    def __init__(self) -> None:
        super().__init__(compact=True, show_command_palette=False)
        self.left_out: list[str] = []

    def compose(self) -> ComposeResult:
        keys = list(super().compose())
        fitted = fit_keys(keys, self.size.width or self.app.size.width)
        self.left_out = [
            f"{k.key_display} {k.description}" for k in keys
            if isinstance(k, FooterKey) and k not in fitted
        ]
        """The keys that did not fit this width (the help lists them)."""
        yield from fitted

    def bindings_changed(self, screen: Screen[object]) -> None:
        self._bindings_ready = True
        if self.is_attached and screen is self.screen:
            self.call_after_refresh(self.recompose)

    def on_resize(self) -> None:
        if self._bindings_ready:
            self.call_after_refresh(self.recompose)


def _cells(widget: Widget) -> int:
    if isinstance(widget, FooterKey):  # compact: "key description" and one cell of margin
        return len(widget.key_display) + 1 + len(widget.description) + 1
    return 0


def fit_keys(keys: Iterable[Widget], width: int) -> list[Widget]:
    """The keys, in order, that fit ``width`` cells; the ``KEPT`` ones first in line."""
    keys = list(keys)
    room = width - sum(_cells(k) for k in keys if getattr(k, "action", "") in KEPT)
    out: list[Widget] = []
    for key in keys:
        if getattr(key, "action", "") in KEPT:
            out.append(key)
            continue
        if _cells(key) <= room:
            out.append(key)
            room -= _cells(key)
        else:
            room = -1  # keep the order: nothing after the first key that did not fit
    return out
