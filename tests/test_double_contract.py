"""The scripted engine held to the real one: ``engine.testing.ScriptedSupervisor`` must answer
every command as ``engine.supervisor.Supervisor`` does, or the UI tests built on it test a
supervisor that does not exist. Both carry out the same run kernel (``engine.kernel.run``,
whose rules tests/kernel proves as tables: the restart policy, a run without teardown, a
failure restarted by hand), so what is held here is the two edges: the same words, paths,
pids' places, event orders and deadlines from real ranks and scripted ones.

Each test plays one sequence of steps on both: the real Supervisor runs tiny real ranks
(``tests/bin/sv_rank.py``), the double a run of the same shape whose log directory is the real
run's (so the paths it reports are comparable). For every step they must agree on:

* the ``CommandResult`` (ok, and the refusal's words exactly);
* per rank, the events in order: every state change (old, new, restart count, attempt, exit
  code and signal name, caused_by_us, the failure's exit code) and every RankRestarted
  (restart count, attempt, whole attempt or alone, the three paths);
* the run's events in order: AttemptStarted, escalations (who, which signal, timeout; who
  was SIGKILLed), notices, RunFinished (attempt, root cause, failures and stopped ranks);
* the snapshot afterwards.

Ranks, pids and times differ and are not compared; the real one delivers from several
threads, so events are compared per rank, and a step is over once the real one has delivered
as many events as the double did (a condition, never a sleep; a real one that delivers fewer
fails the comparison after the timeout, one that delivers more fails the next step).
"""

from __future__ import annotations

import dataclasses
import os
import signal
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Union

import pytest
from rankvisor.engine.events import (
    AttemptStarted,
    EscalationFinished,
    EscalationScheduled,
    Event,
    RankRestarted,
    RankStateChanged,
    RunFinished,
    SupervisorNotice,
)
from rankvisor.engine.handle import (
    CloseInput,
    Command,
    CommandResult,
    DumpStacks,
    KillRanks,
    RestartAll,
    RestartRank,
    RunInfo,
    SendInput,
    SignalRanks,
    TerminateRanks,
)
from rankvisor.engine.states import RankState
from rankvisor.engine.supervisor import Supervisor
from rankvisor.engine.supervisor.run_config import SupervisorConfig
from rankvisor.engine.testing import BASE_PID, EPOCH, ScriptedSupervisor

from tests.conftest import BIN, PYTHON, wait_until
from tests.engine.supervisor_helpers import Recorder
from tests.scenarios import scripted_info

pytestmark = pytest.mark.processes

STEP_TIMEOUT = 20.0
"""How long the real Supervisor gets to deliver a step's events (real ranks on a busy box)."""


# -- steps ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Exit:
    """Rank ``rank`` exits by itself with ``code`` (negative: a signal not ours kills it)."""

    rank: int
    code: int


@dataclass(frozen=True)
class Deadline:
    """The SIGKILL deadline of every escalation in flight passes."""


@dataclass(frozen=True)
class Shutdown:
    """The front end shuts the run down."""


Step = Union[Command, Exit, Deadline, Shutdown]


# -- what both must agree on ---------------------------------------------------------------


def reduce(events: list[Event]) -> dict[str, Any]:
    """The events, per rank and for the run, without pids, times and output."""
    ranks: dict[int, list[tuple[Any, ...]]] = defaultdict(list)
    run: list[tuple[Any, ...]] = []
    for e in events:
        if isinstance(e, RankStateChanged):
            failure = None if e.failure is None else (e.failure.exitcode, e.failure.caused_by_us)
            ranks[e.rank].append(
                (e.old.value, e.new.value, e.restart_count, e.attempt, e.exitcode,
                 e.signal_name, e.caused_by_us, failure)
            )
        elif isinstance(e, RankRestarted):
            ranks[e.rank].append(
                ("restarted", e.restart_count, e.attempt, e.whole_attempt, e.stdout_path,
                 e.stderr_path, e.error_file)
            )
        elif isinstance(e, AttemptStarted):
            run.append(("attempt", e.attempt, e.log_dir, len(e.pids)))
        elif isinstance(e, EscalationScheduled):
            run.append(("escalation", e.ranks, e.signal_name, e.timeout_s))
        elif isinstance(e, EscalationFinished):
            run.append(("escalation over", e.ranks, e.killed))
        elif isinstance(e, SupervisorNotice):
            run.append(("notice", e.severity, e.message))
        elif isinstance(e, RunFinished):
            result: Any = e.result
            run.append(
                ("finished", e.attempt, e.root_cause_rank,
                 {r: f.exitcode for r, f in result.failures.items()},
                 {r: f.exitcode for r, f in result.stopped.items()})
            )
    return {"ranks": dict(ranks), "run": run}


def snapshot(info: RunInfo) -> tuple[Any, ...]:
    return (
        info.attempt,
        info.finished,
        info.log_dir,
        [
            (r.rank, r.state.value, r.restart_count, r.attempt, r.exitcode, r.signal_name,
             r.stdout_path, r.stderr_path, r.error_file)
            for r in info.ranks
        ],
    )


def covers(real: dict[str, Any], double: dict[str, Any]) -> bool:
    """The real one delivered at least as many events as the double, per rank and run."""
    return len(real["run"]) >= len(double["run"]) and all(
        len(real["ranks"].get(r, ())) >= len(seq) for r, seq in double["ranks"].items()
    )


# -- the two sides -------------------------------------------------------------------------


class Contract:
    """A real Supervisor and a ScriptedSupervisor of the same run, stepped together."""

    def __init__(
        self,
        tmp_path: Path,
        nprocs: int,
        *rank_args: str,
        term_timeout: float = 5.0,
        max_restarts: int = 0,
        teardown_on_failure: bool = True,
        obey_term: bool = True,
        stdin: str | None = None,
    ) -> None:
        self.pid_dir = tmp_path / "pids"
        self.pid_dir.mkdir()
        extra = {} if stdin is None else {"stdin": stdin}
        config = SupervisorConfig(  # type: ignore[call-arg]
            entrypoint=PYTHON,
            args=("-u", str(BIN / "sv_rank.py"), "--pid-dir", str(self.pid_dir),
                  "--exit-on-file", *rank_args),
            nprocs=nprocs,
            log_dir=str(tmp_path / "logs"),
            term_timeout=term_timeout,
            max_restarts=max_restarts,
            teardown_on_failure=teardown_on_failure,
            sample_interval=0,
            # The double runs no py-spy: a dump before a SIGKILL would be a notice it lacks
            # (tests/engine/test_stacks.py holds the real one to those dumps).
            stack_on_kill=False,
            **extra,
        )
        self.real = Supervisor(config)
        self.seen = Recorder()
        self.real.subscribe(self.seen)
        self.real.start()
        self._ready()
        run_dir = self.real.snapshot().log_dir
        info = scripted_info(
            nprocs, run_dir=run_dir, term_timeout_s=term_timeout, stdout_filters=(),
            stderr_filters=(), stdin=self.real.snapshot().stdin,
        )
        started = [
            *(RankStateChanged(r, RankState.STARTING, RankState.RUNNING, BASE_PID + r, t=EPOCH)
              for r in range(nprocs)),
            AttemptStarted(0, f"{run_dir}/attempt_0", tuple(BASE_PID + r for r in range(nprocs))),
        ]
        self.double = ScriptedSupervisor(
            info,
            started,
            obey_term=obey_term,
            max_restarts=max_restarts,
            teardown_on_failure=teardown_on_failure,
        )
        self.got: list[Event] = []
        self.double.subscribe(self.got.append)
        self.double.start()
        self._compare("start", None, None, 0)

    def play(self, *steps: Step) -> None:
        for step in steps:
            self._ready()
            mark = len(self.seen.events)
            self.got.clear()
            self._compare(step, self._real(step), self._double(step), mark)

    def close(self) -> None:
        self.real.shutdown(timeout_s=1.0)

    def _real(self, step: Step) -> CommandResult | None:
        if isinstance(step, Exit):
            rank = self.real.snapshot().ranks[step.rank]
            order = self.pid_dir / f"{step.rank}.{rank.restart_count}.exit"
            order.with_suffix(".tmp").write_text(str(step.code))
            os.rename(order.with_suffix(".tmp"), order)  # the rank reads all of it or nothing
            return None
        if isinstance(step, Deadline):
            return None  # it passes by itself: the wait below covers it
        if isinstance(step, Shutdown):
            self.real.shutdown()
            return None
        return self.real.execute(step)

    def _double(self, step: Step) -> CommandResult | None:
        if isinstance(step, Exit):
            self.double.rank_exits(step.rank, step.code)
            return None
        if isinstance(step, Deadline):
            self.double.expire_escalations()
            return None
        if isinstance(step, Shutdown):
            self.double.shutdown()
            return None
        return self.double.execute(step)

    def _compare(
        self, step: object, real: CommandResult | None, double: CommandResult | None, mark: int
    ) -> None:
        want = reduce(self.got)
        try:
            wait_until(lambda: covers(reduce(self.seen.events[mark:]), want), STEP_TIMEOUT)
        except AssertionError:
            pass  # the comparison below shows what is missing
        assert real == double, f"step {step}: the answers differ"
        assert reduce(self.seen.events[mark:]) == want, f"step {step}: the events differ"
        assert snapshot(self.real.snapshot()) == snapshot(self.double.snapshot()), (
            f"step {step}: the snapshots differ"
        )

    def _ready(self) -> None:
        """Every live rank has started its program (and set up its signal handlers)."""
        def started() -> bool:
            return all(
                (self.pid_dir / f"{r.rank}.{r.restart_count}.pids").exists()
                for r in self.real.snapshot().ranks
                if r.state.is_alive
            )

        wait_until(started, STEP_TIMEOUT)


@pytest.fixture
def contract(tmp_path: Path) -> Iterator[Any]:
    made: list[Contract] = []

    def make(nprocs: int, *rank_args: str, **options: Any) -> Contract:
        made.append(Contract(tmp_path, nprocs, *rank_args, **options))
        return made[-1]

    yield make
    for c in made:
        c.close()


# -- the contract --------------------------------------------------------------------------


def test_signal_terminate_kill_and_their_refusals(contract: Any) -> None:
    run = contract(3)
    run.play(
        SignalRanks((0,), signal.SIGCONT),  # harmless: no event
        SignalRanks((0, 5, 7), signal.SIGCONT),  # unknown ranks
        SignalRanks((0,), 999),  # not a signal
        SignalRanks((1,), signal.SIGINT),  # fatal: SIGNALLED, caused by us
        SignalRanks((1,), signal.SIGCONT),
        TerminateRanks((0,)),
        TerminateRanks((0,)),
        KillRanks((0, 1)),
        KillRanks((0, 2)),  # rank 0 skipped; the last rank ends: RunFinished, all stopped
        TerminateRanks(),
        RestartRank(9),
        Shutdown(),
        TerminateRanks(),  # refused: the run is shutting down
    )


def test_refusals_on_ranks_that_failed_or_succeeded(contract: Any) -> None:
    run = contract(3)
    run.play(
        Exit(2, 0),  # succeeded: nothing else happens
        SignalRanks((2,), signal.SIGUSR1),
        TerminateRanks((2,)),
        KillRanks((2,)),
        Exit(1, 3),  # failed: the others are torn down, then RunFinished
        TerminateRanks((1,)),
        KillRanks((1,)),
        SignalRanks((1,), signal.SIGTERM),
        TerminateRanks((0, 1, 2)),
        TerminateRanks((1, 2)),
        RestartRank(1),  # had exited: started again at once
        Shutdown(),
    )


def test_restart_one_rank_and_all_ranks(contract: Any) -> None:
    run = contract(2)
    run.play(
        RestartRank(0),  # alive: stopped first, then alone into restart_1/
        RestartAll(),  # attempt 1
        KillRanks((1,)),
        RestartAll(),  # one alive, one exited: attempt 2 once rank 0 is gone
        KillRanks((1,)),
        RestartRank(1),
        TerminateRanks(),  # RunFinished: both stopped by us
        RestartAll(),  # nothing to stop: attempt 3 at once
        Shutdown(),
    )


def test_ranks_that_ignore_sigterm_are_killed_at_the_deadline(contract: Any) -> None:
    run = contract(2, "--ignore-term", term_timeout=3.0, obey_term=False)
    run.play(
        SignalRanks((0,), signal.SIGTERM),  # ignored
        TerminateRanks((0,)),  # TERMINATING until the deadline
        RestartRank(0),  # TERMINATING -> RESTARTING, a second escalation
        RestartRank(0),
        KillRanks((0,)),  # both escalations end; the restart goes on
        RestartAll(),
        RestartRank(1),
        RestartAll(),
        Deadline(),  # SIGKILL, then attempt 1
        Shutdown(),  # waits out the deadline too
    )


def test_stack_dumps_and_their_refusals(contract: Any) -> None:
    """The double dumps the same ranks and refuses with the same words; the stacks
    themselves (real frames, real pids) are the real one's alone."""
    run = contract(3)
    run.play(Exit(2, 0))

    def both(command: DumpStacks) -> tuple[CommandResult, CommandResult]:
        return run.real.execute(command), run.double.execute(command)

    for command in (DumpStacks((7,)), DumpStacks((2,)), DumpStacks(native=True, nonblocking=True)):
        real, double = both(command)
        assert real == double and not real.ok, command
    for command in (DumpStacks(), DumpStacks((0, 2), nonblocking=True)):
        real, double = both(command)
        assert (real.ok, real.message) == (double.ok, double.message), command
        assert real.data is not None and double.data is not None
        dumped = [[r["rank"] for r in x["ranks"]] for x in (real.data, double.data)]
        assert dumped[0] == dumped[1], command
    run.play(Shutdown())
    real, double = both(DumpStacks())
    assert real == double and not real.ok


def test_commands_before_start_are_refused(tmp_path: Path) -> None:
    config = SupervisorConfig(
        entrypoint=PYTHON, args=(str(BIN / "sv_rank.py"),), nprocs=2,
        log_dir=str(tmp_path / "logs"), sample_interval=0,
    )
    real = Supervisor(config)
    double = ScriptedSupervisor(scripted_info(2))
    try:
        for command in (TerminateRanks(), RestartAll(), SignalRanks((0,), signal.SIGUSR1),
                        DumpStacks()):
            assert real.execute(command) == double.execute(command)
        assert not double.execute(KillRanks()).ok
    finally:
        real.shutdown()


def _holds_stdin() -> bool:
    return "stdin" in {f.name for f in dataclasses.fields(SupervisorConfig)}


@pytest.mark.skipif(not _holds_stdin(), reason="this Supervisor holds no stdin of its ranks yet "
                    "(SupervisorConfig has no stdin): SendInput has nothing to be held to")
def test_input_to_ranks_and_its_refusals(contract: Any) -> None:
    run = contract(3, stdin="pipe")
    run.play(
        SendInput((0,), "hello"),
        SendInput(None, "every running rank"),
        SendInput((0, 7), "x"),  # no rank 7
        SendInput((0,), "two\nlines"),  # one line only
        Exit(2, 0),
        SendInput((2,), "x"),  # not running
        SendInput((1, 2), "x"),  # one of them not running: skipped, as for every command
        CloseInput((1,)),
        SendInput((1,), "x"),  # its stdin is closed
        CloseInput((0, 1)),  # rank 1's is closed already
        Shutdown(),
        SendInput((0,), "x"),  # the run is shutting down
    )


@pytest.mark.skipif(not _holds_stdin(), reason="this Supervisor holds no stdin of its ranks yet")
def test_input_is_refused_where_rankvisor_does_not_hold_the_ranks_stdin(contract: Any) -> None:
    run = contract(2, stdin="null")
    run.play(SendInput((0,), "x"), CloseInput(), Shutdown())
