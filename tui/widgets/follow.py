"""Following the tail of a growing log, on Textual's anchor.

An anchored ``ScrollView`` is kept at the bottom by the compositor every time its virtual
size changes (that is, on the layout that change causes), so there is no race with layout:
the view follows new lines until the user scrolls up (Textual releases the anchor), and
follows again once they scroll back to the bottom. ``paused`` (space) drops the anchor
altogether, so reaching the bottom does not resume; unpausing anchors again.
"""

from __future__ import annotations

from rich.style import Style
from textual.reactive import reactive
from textual.scroll_view import ScrollView

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

    def keep_in_view(self, dropped: int) -> None:
        """``dropped`` lines left the front of the content: keep the same lines in view."""
        if dropped and not self.follow and self.scroll_y > 0:
            y = max(0, self.scroll_y - dropped)
            self.scroll_target_y = y
            self.scroll_y = y
