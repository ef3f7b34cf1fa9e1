"""TextBar: a one-line bar that repaints its text without asking for a new layout.

``Static.update`` refreshes the layout of the whole screen (its size may change); bars that
change every tick (the run summary, a view's title) must not pay that each time.
"""

from __future__ import annotations

from rich.text import Text
from textual.widget import Widget

__all__ = ["TextBar"]


class TextBar(Widget):
    """One line of ``Text``; ``show`` repaints only when the text changed."""

    DEFAULT_CSS = """
    TextBar {
        height: 1;
        text-wrap: nowrap;
        text-overflow: ellipsis;
    }
    """

    def __init__(self, text: Text | None = None, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self._text = text or Text()

    @property
    def text(self) -> Text:
        return self._text

    def on_mount(self) -> None:
        # The text may have been set before the bar was mounted: paint it now.
        self.refresh()

    def show_text(self, text: Text) -> None:
        if text != self._text:
            self._text = text
            self.refresh()

    def render(self) -> Text:
        return self._text
