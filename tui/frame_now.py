"""Draw a key's frame before the key handler returns, not after Textual's round trip.

A widget that changed asks for a repaint on its own message queue; once that queue is
idle it posts an update to the screen; once the screen's queue is idle it wakes its update
timer, which fires on its next 1/60 s beat. Four hops of the event loop, each a wait for
the CPU when 64 ranks flood their logs on two cores: 15-30 ms between a selection move
and the start of its frame (``tests/bench/bench_tui.py``: a third of a key's time).

``draw_now`` takes the widgets that asked for a repaint straight to the screen's frame.
Only for repaints: a widget whose styles, scroll position or size changed needs Textual's
layout pass, and then the frame takes the usual way. The frame is Textual's own
(``Screen._on_timer_update``): the same partial update it would have drawn later. Textual
is pinned (pyproject.toml): this reads its screen's and widgets' refresh flags.
"""

from __future__ import annotations

from typing import Any

from textual.screen import Screen

__all__ = ["draw_now"]


def draw_now(screen: Screen[Any]) -> bool:
    """Draw the repaints that ``screen``'s widgets have asked for, now; False (nothing
    drawn, Textual draws them as usual) where a widget needs more than a repaint."""
    if not screen.is_current or screen.app._batch_count:
        return False
    if screen._layout_required or screen._scroll_required or screen._recompose_required:
        return False
    asked = []
    for widget in screen._compositor.visible_widgets:
        if (
            widget._layout_required
            or widget._scroll_required
            or widget._refresh_styles_required
            or widget._recompose_required
        ):
            return False
        if widget._repaint_required:
            asked.append(widget)
    if not asked:
        return False
    for widget in asked:
        widget._repaint_required = False  # taken here: no update message follows
    screen._dirty_widgets.update(asked)
    screen._on_timer_update()
    return True
