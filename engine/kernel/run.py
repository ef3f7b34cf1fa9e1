"""One run's lifecycle as one object: what each rank's life holds, the run's flags, the
escalations in flight; inputs in, effects out.

The Supervisor (over real processes) and its scripted double (over scripted ones, a fixed
clock) both hold a ``RunKernel`` and carry out what it returns, as an httpx client over a
real transport or a ``MockTransport``: one state machine, two edges. What happens on its
own (a rank exited, a signal reached the supervisor, time passed) comes in through one door,
``step(input, now)``; what a person asks (stop, kill, restart one or all, shut down) comes in
as a call that can be refused. Either answer is a list of effects, in the order the edge
must carry them out (publish a state change, deliver a signal, schedule or finish an
escalation, say something, note a failure, start a rank or an attempt, end the run or its
round). The kernel moves its own records as it decides; nothing here delivers a signal,
spawns, reads a clock or takes a lock: the edge passes ``now`` in and holds the lock around
every call.

A delivery is the one effect whose outcome comes back: a rank may have exited before the
signal reached it, so the edge answers ``Deliver`` with ``delivered`` (who got it), and
only those are put under escalation.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Generic, Literal, TypeVar, Union

from ..names import refusals as words
from ..names.signals import signal_name
from ..states import RankState, can_move, final_state_for
from . import policy
from .escalation import Escalation, EscalationTable
from .policy import Refused

__all__ = [
    "SIGKILL",
    "SIGTERM",
    "AfterExit",
    "Deliver",
    "Effect",
    "EscalationDone",
    "FailedOnOwn",
    "Input",
    "InvalidTransition",
    "KillSurvivors",
    "Moved",
    "NewAttempt",
    "Over",
    "RankExited",
    "RankLife",
    "Respawn",
    "RunKernel",
    "Say",
    "Scheduled",
    "SignalReceived",
    "StopReason",
    "Tick",
    "signame",
]

SIGTERM = 15
SIGKILL = 9
"""Linux's numbers (the kernel may not import ``signal``; the engine runs on Linux only)."""

AfterExit = Literal["restart", "attempt", None]
"""What to do once the current process exits: start it again alone, wait for the new
attempt, or nothing (record the exit)."""

StopReason = Literal["terminate", "kill", "restart", "attempt", "teardown", "shutdown", "signal"]
"""Why the current process was asked to stop ("signal": a person's signal that ended it)."""


class InvalidTransition(RuntimeError):
    """A move not in ``engine.states.TRANSITIONS``: a bug, never a user error."""


def signame(sig: int) -> str:
    """A signal's name for a message; its number if it has none (a message never fails)."""
    try:
        return signal_name(sig)
    except ValueError:
        return f"signal {sig}"


@dataclass(slots=True)
class RankLife:
    """What the kernel knows of one rank's current incarnation (the Supervisor's
    ``RankSlot`` adds its process, files and pipes).

    Attributes:
        signals_ns: Each signal delivered to the current process, with when it first was.
        stop_signal_ns: When the first stop signal was delivered; None while none was.
        stop_caught: Whether the process had a handler for that signal (None: unknown).
        exit_seq: The order of this exit among the run's (the first failure is the root).
    """

    rank: int
    state: RankState = RankState.STARTING
    attempt: int = 0
    incarnation: int = 0
    """Restarts of this rank alone within the attempt (its ``restart_<k>``)."""
    restart_count: int = 0
    """Every restart of this rank, alone or with its attempt."""
    exitcode: int | None = None
    exit_time_ns: int | None = None
    stop_reason: StopReason | None = None
    after_exit: AfterExit = None
    signals_ns: dict[int, int] = field(default_factory=dict)
    stop_signal_ns: int | None = None
    stop_caught: bool | None = None
    caused_by_us: bool = False
    exit_seq: int = 0

    @property
    def alive(self) -> bool:
        return self.state.is_alive

    @property
    def failed_on_own(self) -> bool:
        """Its current incarnation failed, and not by our signal."""
        return self.state.is_final and self.exitcode not in (None, 0) and not self.caused_by_us

    def to(self, new: RankState) -> RankState:
        """Change state, checked against ``TRANSITIONS``; the state it left."""
        old = self.state
        if not can_move(old, new):
            raise InvalidTransition(f"rank {self.rank}: {old.value} -> {new.value}")
        self.state = new
        return old

    def noted(self, sig: int, at_ns: int, *, stop: bool, caught: bool | None = None) -> None:
        """``sig`` was delivered at ``at_ns`` (a stop signal, or a person's)."""
        self.signals_ns.setdefault(int(sig), at_ns)
        if stop and self.stop_signal_ns is None:
            self.stop_signal_ns = at_ns
            self.stop_caught = caught

    def exit_is_ours(self, code: int, exit_time_ns: int | None) -> bool:
        """Whether an exit with ``code`` seen at ``exit_time_ns`` was plausibly our doing
        (``policy.exit_is_ours`` over what this life recorded)."""
        return policy.exit_is_ours(
            code, exit_time_ns, self.signals_ns, self.stop_signal_ns, self.stop_caught
        )

    def reset(self, attempt: int, incarnation: int) -> None:
        """A new incarnation into ``attempt``: nothing of the last one's life is kept."""
        self.attempt = attempt
        self.incarnation = incarnation
        self.exitcode = None
        self.exit_time_ns = None
        self.stop_reason = None
        self.after_exit = None
        self.signals_ns = {}
        self.stop_signal_ns = None
        self.stop_caught = None
        self.caused_by_us = False


# -- effects -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Moved:
    """A rank changed state (already recorded): publish it."""

    rank: int
    old: RankState
    new: RankState


@dataclass(frozen=True, slots=True)
class Deliver:
    """Send ``sig`` to ``ranks`` now (a stop), then answer with ``RunKernel.delivered``.
    ``timeout_s`` None: a SIGKILL, with nothing after it."""

    ranks: tuple[int, ...]
    sig: int
    reason: StopReason
    timeout_s: float | None


@dataclass(frozen=True, slots=True)
class Scheduled:
    """An escalation was recorded: SIGKILL at ``escalation.deadline`` (publish it)."""

    escalation: Escalation
    reason: StopReason


@dataclass(frozen=True, slots=True)
class KillSurvivors:
    """An escalation's deadline passed: SIGKILL these ranks now (those still alive)."""

    escalation: Escalation
    ranks: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class EscalationDone:
    """An escalation ended: its ranks exited, or the wait after its SIGKILL ran out."""

    escalation: Escalation


@dataclass(frozen=True, slots=True)
class Say:
    """A line for a person."""

    text: str
    severity: Literal["information", "warning", "error"] = "information"


@dataclass(frozen=True, slots=True)
class Respawn:
    """Start this rank again, alone (``RunKernel.begin_respawn`` first)."""

    rank: int


@dataclass(frozen=True, slots=True)
class NewAttempt:
    """Start every rank into attempt n+1 (``RunKernel.begin_attempt`` first)."""


@dataclass(frozen=True, slots=True)
class Over:
    """The run is over ("finish": publish its end) or a driven run's round is ("round")."""

    kind: Literal["finish", "round"]


@dataclass(frozen=True, slots=True)
class FailedOnOwn:
    """A rank failed, not by our signal: what the ranks did after this moment is the
    failure's aftermath, not evidence (the edge cuts the activity record here). ``first``:
    the attempt's first such failure, before any teardown signal goes (the edge reads the
    live ranks' collectives now, while they still hold what they were doing)."""

    rank: int
    exit_time_ns: int | None
    first: bool


Effect = Union[Moved, Deliver, Scheduled, KillSurvivors, EscalationDone, Say, FailedOnOwn,
               Respawn, NewAttempt, Over]


# -- inputs to ``step`` ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RankExited:
    """A rank's process ended with ``code`` (``caused``: by our signal, as the edge judged
    with ``RankLife.exit_is_ours`` and what only it can read). ``held``: the ranks a person
    holds at a post-mortem prompt now (the edge reads their hold files)."""

    rank: int
    code: int
    exit_time_ns: int | None
    caused: bool
    held: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class SignalReceived:
    """SIGTERM, SIGINT or SIGHUP reached the supervisor itself."""

    sig: int


@dataclass(frozen=True, slots=True)
class Tick:
    """The edge is up to date with every exit: what is due at ``now`` (escalations, a
    debug hold that ended, restarts and attempts whose ranks have all exited, the end).
    ``finished``: the run's end was published already (by us, or by an agent)."""

    held: tuple[int, ...] = ()
    finished: bool = False


Input = Union[RankExited, SignalReceived, Tick]

L = TypeVar("L", bound=RankLife)


class RunKernel(Generic[L]):
    """The run's lifecycle: every rank's life, the run's flags and its escalations.

    Args:
        lives: One record per rank, keyed by local rank (the edge's own subclass of
            ``RankLife`` if it keeps more per rank).
        max_restarts: Whole-group restarts torch's policy may make after a failure.
        term_timeout_s: Between a teardown's or a restart's SIGTERM and its SIGKILL.
        kill_wait_s: How long to wait for a reap after SIGKILL before giving up.
        teardown_on_failure: Stop the others when a rank fails on its own (torch's rule).
    """

    def __init__(
        self,
        lives: Mapping[int, L],
        *,
        max_restarts: int = 0,
        term_timeout_s: float = 30.0,
        kill_wait_s: float = 5.0,
        teardown_on_failure: bool = True,
    ) -> None:
        self.lives = lives
        self.term_timeout_s = term_timeout_s
        self.teardown_on_failure = teardown_on_failure
        self.escalations = EscalationTable(kill_wait_s=kill_wait_s)
        self.started = False
        self.shutting_down = False
        """Set by the shutdown or a handled signal: nothing may start again."""
        self.attempt = 0
        self.attempt_pending = False
        """A restart of every rank was asked: attempt n+1 starts once all have exited."""
        self.restarts_left = max_restarts
        self.driven = False
        """Driven by an agent (multi-node): no restart policy, no end of its own; each
        round ends for the agent to decide what comes next."""
        self.restart_requested = False
        """In a driven run: a person asked for a new round (RestartAll), for the agent."""
        self.teardown_held = False
        """A teardown after a failure waits for a debug hold (a rank at its post-mortem
        prompt) to end (``hold_ended``)."""
        self.rank_base = 0
        """In a multi-node run: the global rank of local rank 0 in the current round. Lives
        keep local ranks; what a person reads names ``rank_base + rank``."""
        self.received_signal: int | None = None
        """The first signal that reached the supervisor (the run ends with 128 + it)."""
        self._exits = itertools.count(1)
        self._failure_attempt = -1
        """The attempt whose first failure on its own was seen (``FailedOnOwn.first``)."""

    # -- one step --------------------------------------------------------------------------

    def step(self, event: Input, now: float) -> list[Effect]:
        """What follows ``event`` at ``now`` (the edge's monotonic clock).

        A ``Tick`` whose answer starts ranks (``Respawn``, ``NewAttempt``) is followed by
        another once the edge has started them: only then can the end be judged (a start
        that failed leaves its rank final).
        """
        if isinstance(event, RankExited):
            return self._rank_exited(event)
        if isinstance(event, SignalReceived):
            return self._signal_received(event.sig)
        if isinstance(event, Tick):
            return self._tick(event, now)
        raise TypeError(f"not an input of the run kernel: {event!r}")

    def _rank_exited(self, event: RankExited) -> list[Effect]:
        """The exit's move and the escalations it ends; a failure on its own is noted, then
        (torch's rule) the others are torn down, or held while a person debugs one."""
        rank = event.rank
        out = self.exited(rank, event.code, event.exit_time_ns, event.caused)
        if not self.lives[rank].failed_on_own:
            return out
        first = self._failure_attempt != self.attempt
        self._failure_attempt = self.attempt
        out.append(FailedOnOwn(rank, event.exit_time_ns, first))
        if self.tears_down(rank):
            held = [r for r in event.held if r != rank and self.lives[r].alive]
            out += self.failed(rank, held)
        return out

    def _signal_received(self, sig: int) -> list[Effect]:
        """The first such signal is passed on to every rank, SIGKILL at the term timeout
        (torch's agent does the same on its SignalException); a second one means it: SIGKILL
        now."""
        name = signame(sig)
        if self.received_signal is None:
            self.received_signal = sig
            say = Say(f"got {name}: stopping all ranks (SIGKILL in {self.term_timeout_s:g} s)",
                      "warning")
            return [say, *self.shut_down(self.term_timeout_s, sig)]
        say = Say(f"got {name} again: killing all ranks", "warning")
        return [say, *self.kill([life.rank for life in self.live()], "shutdown")]

    def _tick(self, event: Tick, now: float) -> list[Effect]:
        out = self.deadlines(now)
        if self.teardown_held and not any(self.lives[r].alive for r in event.held):
            out += self.hold_ended()
        starts = self.settle()
        out += starts
        if not starts:
            out += self.end(finished=event.finished)
        return out

    # -- views ---------------------------------------------------------------------------

    def shown(self, rank: int) -> int:
        """``rank`` (local) as a person knows it: its global rank in a multi-node run."""
        return self.rank_base + rank

    def ranks_text(self, ranks: Iterable[int]) -> str:
        """Local ranks as a person reads them: "1, 2" (global numbers on many nodes)."""
        return ", ".join(str(self.rank_base + r) for r in ranks)

    def live(self) -> list[L]:
        """The lives whose process runs (or stops); an edge whose records may lack a
        process says so by overriding this."""
        return [life for life in self.lives.values() if life.alive]

    @property
    def real_failure(self) -> bool:
        """A rank's current incarnation failed on its own. Derived, never stored: a rank
        restarted by hand since holds no failure, so stopping the run then must not bring
        the restart policy."""
        return any(life.failed_on_own for life in self.lives.values())

    def states(self) -> dict[int, RankState]:
        return {r: life.state for r, life in self.lives.items()}

    # -- stopping ------------------------------------------------------------------------

    def _moved(self, life: L, new: RankState) -> Moved:
        return Moved(life.rank, life.to(new), new)

    def stop(
        self, ranks: Iterable[int], reason: StopReason, sig: int, timeout_s: float
    ) -> list[Effect]:
        """Stop ``ranks`` for ``reason`` with ``sig``, SIGKILL at the deadline: each moves
        (``policy.stop_move``), then the signal goes (``Deliver``)."""
        live = {life.rank for life in self.live()}
        lives = [self.lives[r] for r in ranks if r in live]
        if not lives:
            return []
        out: list[Effect] = []
        for life in lives:
            life.stop_reason = reason
            target = policy.stop_move(life.state, reason)
            if target is not None:
                out.append(self._moved(life, target))
        out.append(Deliver(tuple(life.rank for life in lives), int(sig), reason, timeout_s))
        return out

    def kill(self, ranks: Iterable[int], reason: StopReason) -> list[Effect]:
        """SIGKILL ``ranks`` at once: TERMINATING now, their exits end them."""
        live = {life.rank for life in self.live()}
        lives = [self.lives[r] for r in ranks if r in live]
        out: list[Effect] = []
        for life in lives:
            if life.stop_reason is None:
                life.stop_reason = reason
            target = policy.kill_move(life.state)
            if target is not None:
                out.append(self._moved(life, target))
        if lives:
            out.append(Deliver(tuple(life.rank for life in lives), SIGKILL, reason, None))
        return out

    def delivered(self, deliver: Deliver, got: Sequence[int], now: float) -> list[Effect]:
        """``deliver`` reached ``got`` (its time noted on each life by the edge, which saw
        it): those are now under escalation, SIGKILL at ``now + timeout``."""
        if not got or deliver.timeout_s is None:
            return []
        esc = self.escalations.add(tuple(got), deliver.sig, deliver.timeout_s, now)
        return [Scheduled(esc, deliver.reason)]

    def deadlines(self, now: float) -> list[Effect]:
        """Every escalation due at ``now``: SIGKILL its survivors, and give up on those a
        SIGKILL did not end once the wait after it ran out."""
        out = self._kill_due(now)
        for esc in self.escalations.overdue(now):
            out.append(EscalationDone(esc))
            if esc.stuck:
                # Uninterruptible sleep (D state) delays even SIGKILL; we stop waiting,
                # the kernel will reap them when their I/O returns.
                out.append(Say(f"rank(s) {self.ranks_text(esc.stuck)} did not exit after "
                               "SIGKILL", "error"))
        return out

    def expire(self) -> list[Effect]:
        """Every SIGKILL deadline passes now (a scripted run's fast-forward); the wait for
        the reaps after it is not cut short."""
        return self._kill_due(float("inf"))

    def _kill_due(self, now: float) -> list[Effect]:
        out: list[Effect] = []
        for esc, survivors in self.escalations.due(now):
            out.append(KillSurvivors(esc, tuple(survivors)))
            if survivors:
                out.append(Say(words.outlived_deadline(
                    map(self.shown, survivors), esc.timeout_s, signame(esc.sig)), "warning"))
        return out

    def next_deadline(self) -> float | None:
        """When the edge must call ``deadlines`` next (None: nothing is due)."""
        return self.escalations.next_deadline()

    # -- exits ---------------------------------------------------------------------------

    def exited(
        self, rank: int, code: int, exit_time_ns: int | None, caused: bool
    ) -> list[Effect]:
        """``rank``'s process ended with ``code`` (``caused``: by our signal, as the edge
        judged with ``RankLife.exit_is_ours`` and what only it can read)."""
        life = self.lives[rank]
        life.exitcode = code
        life.exit_time_ns = exit_time_ns
        life.caused_by_us = caused
        if caused and life.stop_reason is None:
            life.stop_reason = "signal"
        life.exit_seq = next(self._exits)
        out: list[Effect] = [self._moved(life, final_state_for(code))]
        out += [EscalationDone(esc) for esc in self.escalations.rank_gone(rank)]
        return out

    def reported(
        self, rank: int, new: RankState, *, attempt: int, restart_count: int,
        exitcode: int | None, caused: bool,
    ) -> None:
        """A rank's state as a replayed script reports it, taken as it comes (the script
        is the truth: no check, no consequence): a start begins a fresh life, an exit takes
        its place in the run's order of exits."""
        life = self.lives[rank]
        if new is RankState.STARTING:
            life.reset(attempt, life.incarnation)
        life.state = new
        life.attempt = attempt
        life.restart_count = restart_count
        if new.is_final:
            life.exitcode = exitcode
            life.caused_by_us = caused
            life.exit_seq = next(self._exits)

    def tears_down(self, rank: int) -> bool:
        """Whether ``rank``'s exit brings torch's teardown of the others (then call
        ``failed``, with the ranks a person holds at a post-mortem prompt)."""
        life = self.lives[rank]
        return life.failed_on_own and self.teardown_on_failure and not self.shutting_down

    def failed(self, rank: int, held: Sequence[int] = ()) -> list[Effect]:
        """``rank`` failed on its own: stop the others, unless a person holds a rank at its
        post-mortem prompt (then once that hold ends: ``hold_ended``)."""
        why = policy.failure_notice(self.shown(rank), self.lives[rank].exitcode or 0)
        if not held:
            return self.teardown(why)
        if self.teardown_held:
            return []
        self.teardown_held = True
        ranks = self.ranks_text(held)
        return [Say(f"{why}; debug hold: rank(s) {ranks} at a post-mortem prompt, so the other "
                    "ranks are not stopped until that prompt ends (c or q there), or until "
                    f"rank(s) {ranks} are terminated", "warning")]

    def hold_ended(self) -> list[Effect]:
        """No rank is held any more: the teardown that waited for it goes on."""
        if not self.teardown_held:
            return []
        return self.teardown("the debug hold ended")

    def teardown(self, why: str) -> list[Effect]:
        """torch's rule: the others would hang in their next collective; stop them."""
        self.teardown_held = False
        live = self.live()
        targets = policy.teardown_targets(
            (life.rank for life in live), {life.rank: life.stop_reason for life in live}
        )
        out: list[Effect] = [Say(f"{why}: stopping the other ranks", "warning")] if targets else []
        return out + self.stop(targets, "teardown", SIGTERM, self.term_timeout_s)

    # -- commands ------------------------------------------------------------------------

    def restart_rank(self, rank: int) -> tuple[list[Effect], str]:
        """Start ``rank`` again alone once it has exited (stopped first if it runs).

        Raises:
            Refused: a multi-node run, all ranks restarting already, or this one is.
        """
        life = self.lives[rank]
        refusal = policy.restart_rank_refusal(
            self.shown(rank), driven=self.driven, attempt_pending=self.attempt_pending,
            restarting=life.after_exit == "restart" or life.state is RankState.RESTARTING,
        )
        if refusal is not None:
            raise Refused(refusal)
        life.after_exit = "restart"
        if any(other is life for other in self.live()):
            return self.stop([rank], "restart", SIGTERM, self.term_timeout_s), ""
        # Already exited: nothing to stop, it starts again at once.
        return [], f"rank {self.shown(rank)} had exited ({life.state.value}): starting it again"

    def restart_all(self) -> tuple[list[Effect], str]:
        """Every rank into attempt n+1 once all have exited (a driven run: asked of the
        agent, for a new round on every node).

        Raises:
            Refused: a restart of all is under way already.
        """
        refusal = policy.restart_all_refusal(
            pending=self.attempt_pending or self.restart_requested)
        if refusal is not None:
            raise Refused(refusal)
        if self.driven:
            # A rank of ours stopped before the other nodes are told would look like a
            # failure to them: the agent stops the ranks, on every node.
            self.restart_requested = True
            return [], "a new round on every node was asked for"
        self.attempt_pending = True
        for life in self.lives.values():
            life.after_exit = None  # a single-rank restart is folded into the new attempt
        live = [life.rank for life in self.live()]
        return self.stop(live, "attempt", SIGTERM, self.term_timeout_s), ""

    def shut_down(self, timeout_s: float | None, sig: int = SIGTERM) -> list[Effect]:
        """Stop every live rank for good with ``sig`` (SIGKILL at once when ``timeout_s``
        is None): no restart of one rank or of all is pending any more, none follows. A
        person's stop, a signal to the supervisor, a monitor that failed and a group
        stuck in D-state all end the run this one way (idempotent for the flags)."""
        self.shutting_down = True
        if not self.started:
            return []
        self.attempt_pending = False
        self.restarts_left = 0
        for life in self.lives.values():
            life.after_exit = None
        live = [life.rank for life in self.live()]
        if timeout_s is None:
            return self.kill(live, "shutdown")
        return self.stop(live, "shutdown", sig, timeout_s)

    # -- what follows exits --------------------------------------------------------------

    def settle(self) -> list[Effect]:
        """Ranks whose restart was asked start again once exited; a restart of all starts
        attempt n+1 once every rank has exited (``policy.settle``)."""
        restarts = [r for r, life in self.lives.items() if life.after_exit == "restart"]
        settlement = policy.settle(self.states(), restarts, shutting_down=self.shutting_down,
                                   attempt_pending=self.attempt_pending)
        out: list[Effect] = [Respawn(r) for r in settlement.respawn]
        if settlement.new_attempt:
            out.append(NewAttempt())
        return out

    def end(self, *, finished: bool) -> list[Effect]:
        """After ``settle``'s effects: whether the run (or a driven run's round) is over,
        and torch's restart policy (``policy.end_of_run``)."""
        waiting = [r for r, life in self.lives.items() if life.after_exit]
        end = policy.end_of_run(
            self.states(), waiting, started=self.started, finished=finished,
            attempt_pending=self.attempt_pending, driven=self.driven,
            real_failure=self.real_failure, restarts_left=self.restarts_left,
            shutting_down=self.shutting_down,
        )
        if end == "wait":
            return []
        if end == "restart":
            self.restarts_left -= 1
            return [Say(policy.restart_notice(self.attempt + 1, self.restarts_left), "warning"),
                    NewAttempt()]
        return [Over(end)]

    def begin_attempt(self, *, first: bool) -> None:
        """Attempt n+1 (or the first) begins: each rank's count goes up, none is alone.
        The edge then gives each life its ``reset`` with its new files."""
        if not first:
            self.attempt += 1
        self.attempt_pending = False
        for life in self.lives.values():
            if not first:
                life.restart_count += 1
            life.incarnation = 0

    def begin_respawn(self, rank: int) -> None:
        """``rank`` starts again alone: its counts go up (then ``reset``, as above)."""
        life = self.lives[rank]
        life.restart_count += 1
        life.incarnation += 1
