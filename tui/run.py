"""``run_tui``: the app in the terminal; afterwards the summary, or how to attach again."""

from __future__ import annotations

import sys
from typing import Any, Callable

from textual.app import AutopilotCallbackType

from ..engine.events import Event
from ..engine.handle import SupervisorHandle
from .app import RankvisorApp
from .attach_hint import attach_hint
from .report import format_summary

__all__ = ["run_tui", "run_viewer"]


def run_tui(
    handle: SupervisorHandle,
    *,
    mouse: bool = True,
    headless: bool = False,
    auto_pilot: AutopilotCallbackType | None = None,
    on_app: Callable[[RankvisorApp], None] | None = None,
    detach_message: str | None = None,
    **kwargs: Any,
) -> int:
    """Run the app until the user quits; print the summary; return the exit code.

    A run inside this process never outlives this call: if the app ends without having shut
    the handle down (an exception, a signal), it is shut down here, with escalation. A run
    that goes on without its viewer (``handle.detachable``) is only let go of, unless the
    person chose to terminate it: then this prints the root-cause summary as for a run here;
    after a detach it prints how to attach again and returns 0. ``headless`` and
    ``auto_pilot`` are Textual's (tests drive the app with them); other keyword arguments
    go to ``RankvisorApp``; ``on_app`` is given the app before it runs; ``detach_message``
    replaces the attach hint printed after a detach.
    """
    kwargs.setdefault("freeze_heap", not headless)  # tests drive it headless: no freeze
    app = RankvisorApp(handle, **kwargs)
    if on_app is not None:
        on_app(app)
    code: int | None = None
    try:
        code = app.run(mouse=mouse, headless=headless, auto_pilot=auto_pilot)
    finally:
        late: list[Event] = []
        if handle.detachable and not app.shut_down:
            # The run is not ours to end: an exception or a signal only ends the viewer.
            handle.detach()
            app.detached = app.detached or not app.run_view.finished
        elif not app.shut_down:
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
        if app.detached:
            sys.stdout.write(detach_message or attach_hint(app.run_view.log_dir))
        else:
            sys.stdout.write(format_summary(app.run_view))
        sys.stdout.flush()
    except OSError:  # the terminal went away (a dropped SSH session): nobody to tell
        pass
    if app.detached:
        return 0
    return code if isinstance(code, int) else app.run_view.exit_code()


VIEWER_EXIT_GRACE_S = 5.0
"""After a hang-up or SIGTERM, how long the app may take to end before the process does."""


def run_viewer(handle: SupervisorHandle, **kwargs: Any) -> int:
    """``run_tui`` for a viewer of a run that goes on without it (``attach``, default ``run``).

    SIGHUP (the terminal went away) and SIGTERM end the viewer, never the run: the handle is
    let go of and the app asked to exit. A lost terminal can leave Textual unable to finish
    its last writes, so if the app has not ended ``VIEWER_EXIT_GRACE_S`` later the process
    ends anyway: a viewer holds nothing that needs cleaning up, and nobody could reach it.
    SIGINT from outside interrupts the app as Python does; the run goes on as well.
    """
    import os
    import signal
    import threading

    received: list[int] = []
    wake = threading.Event()
    ended = threading.Event()
    app_ref: list[Any] = []

    def on_signal(signum: int, _frame: Any) -> None:
        received.append(signum)
        wake.set()

    def leave() -> None:
        wake.wait()
        if ended.is_set():
            return
        try:
            handle.detach()
        finally:
            if app_ref:
                try:
                    app_ref[0].call_from_thread(app_ref[0].exit, 0)
                except Exception:  # noqa: BLE001 - the app is already ending
                    pass
        if not ended.wait(VIEWER_EXIT_GRACE_S):
            os._exit(128 + received[0])

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGHUP, signal.SIGTERM)}
    threading.Thread(target=leave, name="rankvisor-viewer-exit", daemon=True).start()
    kwargs.setdefault("on_app", app_ref.append)
    try:
        return run_tui(handle, **kwargs)
    finally:
        ended.set()
        wake.set()
        for sig, old in previous.items():
            signal.signal(sig, old)
