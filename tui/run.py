"""``run_tui``: the app in the terminal, the ranks shut down after it, the summary printed."""

from __future__ import annotations

import sys
from typing import Any

from textual.app import AutopilotCallbackType

from engine.events import Event
from engine.handle import SupervisorHandle
from tui.app import RankvisorApp
from tui.report import format_summary

__all__ = ["run_tui"]


def run_tui(
    handle: SupervisorHandle,
    *,
    mouse: bool = True,
    headless: bool = False,
    auto_pilot: AutopilotCallbackType | None = None,
    **kwargs: Any,
) -> int:
    """Run the app until the user quits; print the root-cause summary; return the exit code.

    The ranks never outlive this call: if the app ends without having shut the handle down
    (an exception, a signal), it is shut down here, with escalation. ``headless`` and
    ``auto_pilot`` are Textual's (tests drive the app with them); other keyword arguments
    go to ``RankvisorApp``.
    """
    app = RankvisorApp(handle, **kwargs)
    code: int | None = None
    try:
        code = app.run(mouse=mouse, headless=headless, auto_pilot=auto_pilot)
    finally:
        late: list[Event] = []
        if not app.shut_down:
            # The app has unmounted and its bridge no longer listens: collect the ranks'
            # final states here so the printed summary does not show them mid-teardown.
            unsubscribe = handle.subscribe(late.append)
            try:
                handle.shutdown()
            finally:
                unsubscribe()
        app.absorb_pending()
        for event in late:
            app.run_view.apply(event)
    try:
        sys.stdout.write(format_summary(app.run_view))
        sys.stdout.flush()
    except OSError:  # the terminal went away (a dropped SSH session): nobody to tell
        pass
    return code if isinstance(code, int) else app.run_view.exit_code()
