"""Following the tail of a growing log, on Textual's anchor.

An anchored ``ScrollView`` is kept at the bottom by the compositor every time its virtual
size changes (that is, on the layout that change causes), so there is no race with layout:
the view follows new lines until the user scrolls up (Textual releases the anchor), and
follows again once they scroll back to the bottom. ``paused`` (space) drops the anchor
altogether, so reaching the bottom does not resume; unpausing anchors again.
"""

from __future__ import annotations

from rich.style import Style
from textual.geometry import Size
from textual.reactive import reactive
from textual.scroll_view import ScrollView
from textual.widget import Widget

__all__ = ["FollowingScrollView", "LineScrollView"]


class LineScrollView(ScrollView):
    """A Line-API ``ScrollView`` whose base style is computed once per style change.

    ``rich_style`` walks the widget's ancestors; ``render_line`` needs it for every row drawn.
    """

    _base: Style | None = None

    def _base_style(self) -> Style:
        if self._base is None:
            self._base = self.rich_style
        return self._base

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._base = None


class FollowingScrollView(LineScrollView):
    """A Line-API view that follows its tail (see the module docstring)."""

    paused: reactive[bool] = reactive(False, init=False)
    """Following paused by the user; new lines arrive but the view holds still."""

    @property
    def follow(self) -> bool:
        """True while the view sticks to the bottom."""
        return self._anchored and not self._anchor_released

    def on_mount(self) -> None:
        if not self.paused:
            self.anchor()

    def resume_following(self) -> None:
        """Back to the tail (unless paused): after showing other content, for instance."""
        if not self.paused:
            self.anchor()

    def watch_paused(self, paused: bool) -> None:
        self.set_class(paused, "-paused")
        self.anchor(not paused)

    def set_virtual_size(self, size: Size) -> None:
        """Take a new content size; without a layout of the screen where nothing but this
        view's scroll range changes.

        Textual lays out the whole screen for every change of a virtual size, and the anchor
        follows in that layout. With logs growing at every drain tick that was a layout and a
        full frame (50-150 ms under a flood, against 20-30 ms for a frame of the panes that
        changed) each time one pane's line count moved, and a key waited behind it
        (``tests/bench/bench_tui.py``). When the view scrolls before and after (its
        scrollbar stays as it is, and so does every other widget's place), the size is set in
        place: the scrollbar takes the new range and a following view moves to its new
        bottom, as the anchor would. Any other change (the first lines, a resize) lays out as
        before. Textual is pinned (pyproject): the two internals used here are its own
        ``_size_updated`` steps for a scrolling view.
        """
        old = self.virtual_size
        if size == old:
            return
        view = self.container_size
        if not (view and self.show_vertical_scrollbar and not self.show_horizontal_scrollbar
                and old.height > view.height and size.height > view.height):
            self.virtual_size = size
            return
        self.set_reactive(Widget.virtual_size, size)
        self._scroll_update(size)
        if self.follow:
            bottom = self.max_scroll_y
            self.scroll_target_y = bottom
            self.scroll_y = bottom

    def keep_in_view(self, dropped: int) -> None:
        """``dropped`` lines left the front of the content: keep the same lines in view."""
        if dropped and not self.follow and self.scroll_y > 0:
            y = max(0, self.scroll_y - dropped)
            self.scroll_target_y = y
            self.scroll_y = y
