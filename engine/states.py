"""The lifecycle of one rank, as an explicit state machine.

A leaf module (no engine imports) so that UI code can import the states without pulling in
the supervisor. Transitions are listed once, in ``TRANSITIONS``; the Supervisor checks every
move against it and labels each move in its code (``# RUNNING -> TERMINATING: ...``).
"""

from __future__ import annotations

import enum
from typing import Final


class RankState(enum.Enum):
    """Where one rank is in its life. Values are the words the UI shows."""

    STARTING = "starting"
    """Spawned (or being spawned); no exit seen yet and not yet confirmed running."""
    RUNNING = "running"
    TERMINATING = "terminating"
    """A death signal was sent; SIGKILL follows at the escalation deadline."""
    RESTARTING = "restarting"
    """Being stopped in order to start again (one rank, or a new attempt)."""
    SUCCEEDED = "succeeded"
    """Exited with code 0 ("exited ok")."""
    FAILED = "failed"
    """Exited with a non-zero code."""
    SIGNALLED = "signalled"
    """Killed by a signal (negative exit code)."""

    @property
    def is_alive(self) -> bool:
        """True while a process exists for this rank."""
        return self in _ALIVE

    @property
    def is_final(self) -> bool:
        """True once the rank's process is gone and nothing will restart it on its own."""
        return self in _FINAL


_ALIVE: Final = frozenset(
    {RankState.STARTING, RankState.RUNNING, RankState.TERMINATING, RankState.RESTARTING}
)
_FINAL: Final = frozenset({RankState.SUCCEEDED, RankState.FAILED, RankState.SIGNALLED})

TRANSITIONS: Final[dict[RankState, frozenset[RankState]]] = {
    RankState.STARTING: frozenset(
        {RankState.RUNNING, RankState.TERMINATING, RankState.RESTARTING, *_FINAL}
    ),
    RankState.RUNNING: frozenset({RankState.TERMINATING, RankState.RESTARTING, *_FINAL}),
    RankState.TERMINATING: frozenset({RankState.RESTARTING, *_FINAL}),
    RankState.RESTARTING: frozenset({RankState.STARTING, *_FINAL}),
    # A finished rank only moves again when it is restarted by hand or by policy.
    RankState.SUCCEEDED: frozenset({RankState.STARTING, RankState.RESTARTING}),
    RankState.FAILED: frozenset({RankState.STARTING, RankState.RESTARTING}),
    RankState.SIGNALLED: frozenset({RankState.STARTING, RankState.RESTARTING}),
}


def can_move(old: RankState, new: RankState) -> bool:
    """Whether ``old -> new`` is an allowed transition."""
    return new in TRANSITIONS[old]


def final_state_for(exitcode: int) -> RankState:
    """The final state an exit code maps to (negative codes are signals, as in Popen)."""
    if exitcode == 0:
        return RankState.SUCCEEDED
    return RankState.SIGNALLED if exitcode < 0 else RankState.FAILED
