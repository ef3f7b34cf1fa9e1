"""Who reached the run and what they asked: one line in ``supervisor.log`` each.

A run can be driven from any shell of its user and, on many nodes, from the other hosts'
viewers through the cluster door; after an incident the question is "who typed that, who
stopped rank 3". So each connection that gets in (the peer's pid and uid for the Unix socket,
its address for the door) and each command it sends is logged once, with its answer.
Bounded: one line per connection and per command, never per byte. A typed line is logged by
its length and ranks only: its text may be a password (a hidden prompt), and the text of the
others is in ``stdin.log`` already.
"""

from __future__ import annotations

import logging
from typing import Final

from ..handle import (
    CloseInput,
    Command,
    CommandResult,
    KillRanks,
    RestartAll,
    RestartRank,
    SendInput,
    SignalRanks,
    TerminateRanks,
)
from ..names.signals import signal_name

__all__ = ["connected", "described", "log_command"]

log = logging.getLogger("rankvisor.audit")


def _ranks(ranks: tuple[int, ...] | None) -> str:
    if ranks is None:
        return "every rank"
    return ("rank " if len(ranks) == 1 else "ranks ") + ",".join(map(str, ranks))


def _sig(sig: int) -> str:
    try:
        return signal_name(sig)
    except ValueError:
        return f"signal {sig}"


_SAID: Final = (
    (CloseInput, "input: EOF to {ranks}"),
    (SignalRanks, "signal: {sig} to {ranks}"),
    (TerminateRanks, "stop: {sig} then SIGKILL to {ranks}"),
    (KillRanks, "stop: SIGKILL to {ranks}"),
    (RestartRank, "restart: rank {rank}"),
    (RestartAll, "restart: every rank"),
)
"""How each command that acts is named (the others by their class)."""


def described(command: Command) -> str:
    """What ``command`` asks, in a few words; never the text of a typed line."""
    ranks = _ranks(getattr(command, "ranks", None))
    if isinstance(command, SendInput):
        size = len(command.text.encode("utf-8", "surrogateescape")) + 1
        return f"input: a line of {size} bytes to {ranks}"
    for kind, words in _SAID:
        if isinstance(command, kind):
            return words.format(ranks=ranks, rank=getattr(command, "rank", None),
                                sig=_sig(getattr(command, "sig", 0)))
    return f"{type(command).__name__}: {ranks}"


def connected(who: str, name: str, read_only: bool) -> None:
    """A viewer or script got in (past its hello)."""
    log.info("connected: %s%s%s", who, f" as {name!r}" if name else "",
             " (read-only)" if read_only else "")


def log_command(who: str, command: Command | None, result: CommandResult) -> None:
    """A command and its answer (ok, or refused with a one-line reason)."""
    what = described(command) if command is not None else "an unreadable command"
    outcome = "done" if result.ok else "refused"
    log.info("command from %s: %s -> %s", who, what, outcome)
