"""The run's lifecycle decisions, as pure functions of what the run holds now.

Which ranks a command names and which of them it can reach, where a stop moves a rank, when
a restart is refused, whom a failure's teardown stops, whether an exit was our doing, what
follows once ranks have exited (restart one, start attempt n+1, torch's restart policy, the
end): each is decided here once, from plain values, for every handle that carries them out
(the Supervisor over real processes, its scripted double over scripted ones, the handle of
a torchrun job). Nothing here reads a clock, a file or a process: times come in as
arguments, so a rule is tried as a table of inputs.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from ..names import refusals as words
from ..states import RankState

__all__ = [
    "End",
    "Refused",
    "Settlement",
    "end_of_run",
    "exit_is_ours",
    "failure_notice",
    "kill_move",
    "lifecycle_refusal",
    "restart_all_refusal",
    "restart_notice",
    "restart_rank_refusal",
    "resolve",
    "running",
    "settle",
    "stop_move",
    "teardown_targets",
]

Shown = Callable[[int], int]
"""A local rank as a person knows it (its global rank on many nodes)."""

_RESTARTING_REASONS = frozenset({"restart", "attempt"})
_STARTED = (RankState.STARTING, RankState.RUNNING)


class Refused(Exception):
    """A command that cannot be carried out; the message is for a person."""


def _same(rank: int) -> int:
    return rank


# -- naming ranks ------------------------------------------------------------------------


def resolve(ranks: Sequence[int] | None, known: Collection[int], shown: Shown = _same) -> list[int]:
    """The ranks a command names, sorted and once each (every known rank for None).

    Raises:
        Refused: naming the unknown ones and the range there is.
    """
    if ranks is None:
        return sorted(known)
    unknown = sorted({r for r in ranks if r not in known})
    if unknown:
        raise Refused(words.no_such_rank(map(shown, unknown), shown(0), shown(len(known) - 1)))
    return sorted(set(ranks))


def running(
    ranks: Sequence[int],
    live: Collection[int],
    state_of: Mapping[int, RankState],
    verb: str,
    shown: Shown = _same,
) -> tuple[list[int], str]:
    """The live ones among ``ranks``, and a note naming those skipped.

    Raises:
        Refused: when none is live (naming the one rank and its state, if one was named).
    """
    reached = [r for r in ranks if r in live]
    gone = [r for r in ranks if r not in live]
    if not reached:
        if len(gone) == 1:
            raise Refused(words.not_running(shown(gone[0]), state_of[gone[0]].value, verb))
        raise Refused(words.no_running_rank(verb))
    note = words.skipped_not_running(shown(r) for r in gone) if gone else ""
    return reached, note


def lifecycle_refusal(*, started: bool, stopping: bool) -> str | None:
    """Why no command that changes a rank's life can run now (None: it can)."""
    if not started:
        return words.NOT_STARTED
    if stopping:
        return words.SHUTTING_DOWN
    return None


# -- stopping ----------------------------------------------------------------------------


def stop_move(state: RankState, reason: str) -> RankState | None:
    """Where a rank in ``state`` moves when it is asked to stop for ``reason`` (None: it
    stays): to RESTARTING when it stops in order to start again ("restart", "attempt"),
    else to TERMINATING; a rank already stopping moves on only from TERMINATING to
    RESTARTING (a restart asked while it was stopping)."""
    target = RankState.RESTARTING if reason in _RESTARTING_REASONS else RankState.TERMINATING
    if state is not target and state in _STARTED:
        return target
    if state is RankState.TERMINATING and target is RankState.RESTARTING:
        return target
    return None


def kill_move(state: RankState) -> RankState | None:
    """A SIGKILL now moves a started rank to TERMINATING; its exit ends it."""
    return RankState.TERMINATING if state in _STARTED else None


def exit_is_ours(
    code: int,
    exit_time_ns: int | None,
    signals_ns: Mapping[int, int],
    stop_signal_ns: int | None,
    stop_caught: bool | None,
) -> bool:
    """Whether an exit with ``code``, seen at ``exit_time_ns``, was plausibly our doing.

    Ours: death by a signal we delivered (``-N``), or the ``128 + N`` a shell or a launcher
    in between reports for it; or any exit seen after we delivered a stop signal (SIGTERM's
    handler may exit 1, escalation's SIGKILL ends it). Not ours: an exit of a rank we never
    signalled, or one seen before our first stop signal. A signal a person sent owns only a
    death by that very signal: a SIGUSR1 for a stack dump does not own a later crash. A rank
    with no handler for our stop signal (``stop_caught`` False) that exits with a code of
    its own exited by itself, whenever it did: our signal would have ended it with ``-N``.

    Args:
        signals_ns: Each signal delivered to this process, with when it first was.
        stop_signal_ns: When the first stop signal was delivered; None while none was.
        stop_caught: Whether the process had a handler for that signal (None: unknown).
    """
    if code < 0 and -code in signals_ns:
        return True
    if code > 128 and code - 128 in signals_ns:
        return True
    if stop_signal_ns is None:
        return False
    if code >= 0 and stop_caught is False:
        return False
    return exit_time_ns is None or exit_time_ns >= stop_signal_ns


def teardown_targets(live: Iterable[int], stop_reason: Mapping[int, str | None]) -> list[int]:
    """torch's rule after a rank fails on its own: the others would hang in their next
    collective, so every live rank nobody has asked to stop yet is stopped."""
    return [r for r in live if stop_reason.get(r) is None]


def failure_notice(shown_rank: int, code: int) -> str:
    """Why the others are stopped: "rank 2 failed (exit code 1)"."""
    return f"rank {shown_rank} failed (exit code {code})"


# -- restarting --------------------------------------------------------------------------


def restart_rank_refusal(
    shown_rank: int, *, driven: bool, attempt_pending: bool, restarting: bool
) -> str | None:
    """Why one rank cannot be restarted alone now (None: it can).

    Args:
        driven: The run is one node of many (a lone rank cannot rejoin its collective).
        attempt_pending: Every rank is being restarted already.
        restarting: This rank is, already (a restart asked, or RESTARTING).
    """
    if driven:
        return (
            f"rank {shown_rank} cannot be restarted alone in a multi-node run: a lone rank "
            "cannot rejoin its collective; restart all ranks (a new round on every node)"
        )
    if attempt_pending:
        return words.ALL_RESTARTING
    if restarting:
        return words.already_restarting(shown_rank)
    return None


def restart_all_refusal(*, pending: bool) -> str | None:
    """Why every rank cannot be restarted now: a restart of all is under way already."""
    return words.ALL_RESTARTING if pending else None


def restart_notice(attempt: int, restarts_left: int) -> str:
    """What torch's restart policy says as it starts attempt ``attempt``."""
    return f"restarting all ranks as attempt {attempt} ({restarts_left} restart(s) left)"


# -- what follows exits ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Settlement:
    """What to start once ranks have exited: ranks again alone, then a new attempt."""

    respawn: tuple[int, ...] = ()
    new_attempt: bool = False


def settle(
    state_of: Mapping[int, RankState],
    restart_asked: Collection[int],
    *,
    shutting_down: bool,
    attempt_pending: bool,
) -> Settlement:
    """Ranks whose restart was asked start again once they have exited; a restart of all
    starts attempt n+1 once every rank has exited; nothing starts while shutting down."""
    if shutting_down:
        return Settlement()
    respawn = tuple(r for r in sorted(state_of) if r in restart_asked and state_of[r].is_final)
    # A respawned rank is alive again, so a new attempt waits for it too.
    all_final = not respawn and all(s.is_final for s in state_of.values())
    return Settlement(respawn, attempt_pending and all_final)


End = Literal["wait", "round", "restart", "finish"]
"""After the ranks were settled: nothing yet ("wait"); a driven run's round is over, for its
agent to decide ("round"); torch's restart policy starts attempt n+1 ("restart"); the run is
over ("finish")."""


def end_of_run(
    state_of: Mapping[int, RankState],
    restart_asked: Collection[int],
    *,
    started: bool,
    finished: bool,
    attempt_pending: bool,
    driven: bool,
    real_failure: bool,
    restarts_left: int,
    shutting_down: bool,
) -> End:
    """Whether the run (or a driven run's round) is over, and how it goes on.

    Over once every rank is final and no restart is pending (a restart asked before the
    run began shutting down never starts, so it holds nothing). Then torch's agent policy: a
    rank that failed on its own (``real_failure``: its current incarnation's failure, not
    one a restart by hand has since replaced) restarts the whole group while restarts last,
    unless the run is shutting down.
    """
    if finished or not started or attempt_pending:
        return "wait"
    if any(not s.is_final for s in state_of.values()):
        return "wait"
    if restart_asked and not shutting_down:  # nothing starts again while shutting down
        return "wait"
    if driven:
        return "round"
    if real_failure and restarts_left > 0 and not shutting_down:
        return "restart"
    return "finish"


def not_piped(mode: str) -> str:
    """The refusal of a line or an EOF to the ranks' stdin in a run started with ``--stdin
    mode``, not "pipe": the Supervisor and its double say the same words."""
    what = "/dev/null" if mode == "null" else "the terminal rankvisor was started from"
    return (f"not sent: the ranks' stdin is {what} (--stdin {mode}); start the run with "
            "--stdin pipe to type to its ranks")
