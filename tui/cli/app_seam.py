"""The one place the command line reaches the app, imported when a TUI is wanted.

``rankvisor status`` in a script, or a headless run under sbatch, must not pay for Textual
(or need it): no other module of the command line imports the app, Textual or Rich, even
lazily. The import-linter contract in pyproject.toml holds that and names the imports below
as its only exceptions.
"""

from __future__ import annotations

from types import ModuleType

__all__ = ["app_runner", "browser_door"]


def app_runner() -> ModuleType:
    """The app's runner, ``rankvisor.tui.run`` (``run_tui``, ``run_viewer``).

    Raises:
        ImportError: the app cannot be imported here (Textual is missing).
    """
    from .. import run

    return run


def browser_door() -> ModuleType:
    """``rankvisor.tui.serve_door``: the app in a browser, through textual-serve.

    Raises:
        ImportError: textual-serve is not installed (the ``web`` extra).
    """
    from .. import serve_door

    return serve_door
