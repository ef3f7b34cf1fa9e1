"""``RunProcsResult``: what a finished run produced, rank by rank (torch's record).

A leaf of the engine (it imports only ``engine.errors``) so that the events a supervisor
publishes can carry it without importing the process contexts that produce it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .errors import ProcessFailure

__all__ = ["RunProcsResult"]


@dataclass
class RunProcsResult:
    """The outcome of a finished run, by local rank.

    ``return_values`` holds every rank's return value on success (None for binaries) and is
    empty on failure; ``stdouts``/``stderrs`` are the log paths ("" for the console).

    ``failures`` holds the ranks that failed on their own, every one of them, as torch's
    ``failures`` does. ``stopped`` holds the ranks that the engine's own teardown (or a
    person, through the Supervisor) stopped while they were still running: their records
    carry ``caused_by_us=True``. They are kept apart because a rank we stopped did not fail,
    and whether a rank that was about to exit 0 is caught by the teardown must not change
    what a run reports; ``ChildFailedError`` and torch's agent see ``failures`` only.
    """

    return_values: dict[int, Any] = field(default_factory=dict)
    failures: dict[int, ProcessFailure] = field(default_factory=dict)
    stdouts: dict[int, str] = field(default_factory=dict)
    stderrs: dict[int, str] = field(default_factory=dict)
    stopped: dict[int, ProcessFailure] = field(default_factory=dict, kw_only=True)
    """Ranks stopped by our own teardown or stop, by rank (not failures of those ranks).
    Keyword-only, after torch's four fields, so torch's positional calls still fit."""

    def is_failed(self) -> bool:
        """True if any rank failed on its own (ranks we stopped do not count)."""
        return len(self.failures) > 0
