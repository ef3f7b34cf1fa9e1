"""The command line: ``rankvisor``'s entry and its subcommands, apart from the Textual app.

A command on a run (``status`` in a script, ``stop`` from cron, a headless run under sbatch)
must work where Textual is missing or unwanted, and start fast: no module here imports
Textual, Rich or the app at its top. The app is started through one seam, where a TUI is
wanted (``app_seam``); pyproject's import-linter contract and tests/test_cli_contract.py
hold it.

Importing this package loads nothing until ``main`` is asked for (the console script's
``rankvisor.tui.cli:main``), so ``python -m rankvisor.tui.cli.serve`` runs its module once.
"""

from __future__ import annotations

from typing import Any

__all__ = ["main"]


def __getattr__(name: str) -> Any:
    if name == "main":
        from .entry import main

        return main
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
