"""The words of a refused command (and of an escalation's SIGKILL), one copy for every handle.

The Supervisor, its scripted double (``engine.testing``) and the handle of a torchrun job
(``engine.attach``) answer the same command with the same ``CommandResult`` message: a
person, a script matching on the text and the double's contract test see one wording
whichever handle they hold. Ranks arrive as a person knows them (global numbers on many
nodes); each function takes them already shown.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

__all__ = [
    "ALL_RESTARTING",
    "NO_COLLECTIVES",
    "NO_WORKER_SERVER",
    "NOT_STARTED",
    "OVER",
    "SHUTTING_DOWN",
    "already_restarting",
    "exited_before_signal",
    "no_running_rank",
    "no_such_rank",
    "not_running",
    "outlived_deadline",
    "ranks_text",
    "skipped_not_running",
]

NOT_STARTED: Final = "the run has not started"
SHUTTING_DOWN: Final = "the run is shutting down"
OVER: Final = "the run is over"
ALL_RESTARTING: Final = "all ranks are being restarted already"
NO_COLLECTIVES: Final = (
    "no collectives: no rank of this run serves torch's Flight Recorder (it was started "
    "with --no-collectives, or no rank is a Python script)"
)
NO_WORKER_SERVER: Final = (
    "no worker server: a torchrun worker serves one only when its script runs under torch's "
    "worker_main() with TORCH_WORKER_SERVER_SOCKET set (and TORCH_FR_BUFFER_SIZE for its "
    "Flight Recorder)"
)


def ranks_text(ranks: Iterable[int]) -> str:
    """"1, 2": ranks as a sentence lists them."""
    return ", ".join(str(r) for r in ranks)


def no_such_rank(unknown: Iterable[int], first: int, last: int) -> str:
    return f"no rank {ranks_text(unknown)} (ranks are {first}..{last})"


def not_running(rank: int, state: str, verb: str) -> str:
    """The one rank named has ended (``state``: its state's value)."""
    return f"rank {rank} is not running ({state}): nothing to {verb}"


def no_running_rank(verb: str) -> str:
    return f"no running rank to {verb}"


def skipped_not_running(ranks: Iterable[int]) -> str:
    """Not a refusal: the note of a command carried out on the others."""
    return f"skipped rank(s) {ranks_text(ranks)}: not running"


def exited_before_signal(ranks: Iterable[int]) -> str:
    return f"rank(s) {ranks_text(ranks)} exited before the signal"


def already_restarting(rank: int) -> str:
    return f"rank {rank} is already restarting"


def outlived_deadline(ranks: Iterable[int], timeout_s: float, sig_name: str) -> str:
    """The notice of an escalation that had to SIGKILL (not a refusal: the stop goes on)."""
    return (f"rank(s) {ranks_text(ranks)} outlived the {timeout_s:g} s deadline after "
            f"{sig_name}: sent SIGKILL")
