"""The supervisor's monitor thread outlives a bad value and a failing pass (issue 23, case 1).

A terminate timeout of a month (or 1e308 over the socket) used to reach poll() as more
milliseconds than a C int holds: OverflowError, the monitor thread gone, the rank never
SIGKILLed, an outside kill never seen, ``stop`` hanging. Now such a timeout is refused at
the command line and by ``command_problem`` (the week cap ``--term-timeout`` has), the poll
is capped, and a pass that raises where no step catches it is caught by the loop's own
watchdog, which says so and SIGKILLs the ranks, so that the run ends instead of hanging.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from rankvisor.engine.events import RunFinished, SupervisorNotice
from rankvisor.engine.handle import MAX_TIMEOUT_S, TerminateRanks, command_problem
from rankvisor.engine.states import RankState

from tests.conftest import wait_until
from tests.engine.supervisor_helpers import Factory, supervise_fixture  # noqa: F401

pytestmark = pytest.mark.processes

ROOT = Path(__file__).resolve().parents[2]


def test_a_timeout_over_a_week_is_refused_by_every_handle() -> None:
    for t in (3_000_000, 1e308, MAX_TIMEOUT_S + 1):
        problem = command_problem(TerminateRanks((0,), timeout_s=t))
        assert problem is not None and "at most" in problem, t
    assert command_problem(TerminateRanks((0,), timeout_s=MAX_TIMEOUT_S)) is None


def test_the_command_line_refuses_it_in_one_line() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "rankvisor.tui", "terminate", "no-such-run", "0",
         "--timeout", "3000000"], cwd=ROOT, capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 2
    assert "at most 604800" in done.stderr and "Traceback" not in done.stderr


def test_a_far_deadline_leaves_the_monitor_watching(supervise: Factory) -> None:
    run = supervise(1, "--ignore-term")
    (pid,) = run.pids(0)[:1]
    sup = run.sup
    # What a huge timeout used to do, bypassing the checks: a deadline poll() cannot take.
    with sup._state.lock:
        sup._stopper.stop_ranks(list(sup._state.live()), "terminate", signal.SIGTERM, 1e308)
    sup._wakeup.wake()
    run.rec.wait_state(0, RankState.TERMINATING)
    assert sup._monitor._thread is not None and sup._monitor._thread.is_alive()
    os.kill(pid, signal.SIGKILL)  # killed from outside: the monitor must still see it
    run.rec.wait_state(0, RankState.SIGNALLED)
    wait_until(lambda: run.rec.of(RunFinished))


def test_a_pass_that_raises_stops_the_run_instead_of_hanging(supervise: Factory) -> None:
    run = supervise(2, "--ignore-term")
    run.pids(0), run.pids(1)
    sup = run.sup
    stopper = sup._stopper
    real = stopper.next_deadline
    calls = {"n": 0}

    def broken() -> float | None:
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("a bug outside every step")
        return real()

    stopper.next_deadline = broken  # type: ignore[method-assign]
    sup._wakeup.wake()
    wait_until(lambda: run.rec.of(RunFinished), timeout=30)
    notices = [n.message for n in run.rec.of(SupervisorNotice)]
    assert any("monitor failed" in m and "a bug outside every step" in m for m in notices)
    assert all(r.state.is_final for r in sup.snapshot().ranks)
