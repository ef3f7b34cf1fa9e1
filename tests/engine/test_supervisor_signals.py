"""Commands that carry a signal, with real processes: checked up front, named everywhere.

A valid signal the ranks ignore still ends in SIGKILL at the deadline (real-time signals
included); an invalid one is refused with a message and nothing is sent; and one escalation
that fails in the monitor's deadline pass does not keep the others from their SIGKILL.
"""

from __future__ import annotations

import logging
import math
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from rankvisor.engine.events import (
    EscalationFinished,
    EscalationScheduled,
    RankStateChanged,
    RunFinished,
    SupervisorNotice,
)
from rankvisor.engine.handle import Command, KillRanks, SignalRanks, TerminateRanks
from rankvisor.engine.process.proc_table import is_stopped
from rankvisor.engine.process.signal_inbox import SignalInbox
from rankvisor.engine.states import RankState
from rankvisor.engine.supervisor import Supervisor, SupervisorConfig
from rankvisor.engine.supervisor.rank_slot import RankSlot

from tests.conftest import BIN, PYTHON, pid_alive, wait_until
from tests.engine.supervisor_helpers import Factory, Run, supervise_fixture  # noqa: F401

pytestmark = pytest.mark.processes

RT6 = signal.SIGRTMIN + 6  # 40 with glibc: valid, but unnamed by Python's signal.Signals


def _monitor_alive(run: Run) -> bool:
    thread = run.sup._monitor._thread
    return thread is not None and thread.is_alive()


def _hold_until_due(run: Run) -> None:
    """With the state lock held: wait until every scheduled deadline has passed, so that
    the monitor finds them all due in one pass once the lock is released."""
    due = max(e.deadline for e in run.rec.of(EscalationScheduled))
    wait_until(lambda: time.monotonic() > due)


def test_a_real_time_signal_the_ranks_ignore_ends_in_sigkill_at_the_deadline(
    supervise: Factory,
) -> None:
    """TerminateRanks(sig=SIGRTMIN+6) on two ranks that ignore it, one command per rank,
    both deadlines due in the same pass of the monitor: both ranks get SIGKILL."""
    run = supervise(2, "--ignore", str(RT6))
    run.pids(0)  # written after the signal is ignored
    run.pids(1)
    with run.sup._state.lock:  # the monitor looks only once both deadlines have passed
        for rank in (0, 1):
            res = run.sup.execute(TerminateRanks((rank,), sig=RT6, timeout_s=0.3))
            assert res.ok, res.message
        _hold_until_due(run)
    finished = run.sup.wait(timeout=30)
    assert isinstance(finished, RunFinished)
    for rank in (0, 1):
        (ev,) = run.rec.of(RankStateChanged, rank=rank, new=RankState.SIGNALLED)
        assert (ev.exitcode, ev.signal_name, ev.caused_by_us) == (-9, "SIGKILL", True)
    scheduled = run.rec.of(EscalationScheduled)
    assert [(e.ranks, e.signal_name) for e in scheduled] == [
        ((0,), "SIGRTMIN+6"), ((1,), "SIGRTMIN+6"),
    ]
    # Each ends when its rank is reaped after the SIGKILL: in either order.
    assert sorted(run.rec.of(EscalationFinished), key=lambda e: e.ranks) == [
        EscalationFinished((0,), (0,)), EscalationFinished((1,), (1,)),
    ]
    notices = [n.message for n in run.rec.of(SupervisorNotice)]
    for rank in (0, 1):
        assert f"rank(s) {rank} outlived the 0.3 s deadline after SIGRTMIN+6: sent SIGKILL" in (
            notices
        ), notices
    assert finished.result.failures == {} and set(finished.result.stopped) == {0, 1}
    assert finished.root_cause_rank is None
    assert _monitor_alive(run)


def test_a_real_time_signal_that_kills_is_named(supervise: Factory) -> None:
    run = supervise(1)
    run.pids(0)
    assert run.sup.execute(SignalRanks((0,), RT6)).ok
    run.rec.wait_state(0, RankState.SIGNALLED)
    (ev,) = run.rec.of(RankStateChanged, rank=0, new=RankState.SIGNALLED)
    assert (ev.exitcode, ev.signal_name, ev.caused_by_us) == (-RT6, "SIGRTMIN+6", True)
    assert ev.failure is not None and ev.failure.signal_name() == "SIGRTMIN+6"
    assert run.sup.snapshot().ranks[0].signal_name == "SIGRTMIN+6"


def test_invalid_signals_and_timeouts_are_refused_and_nothing_is_sent(
    supervise: Factory,
) -> None:
    run = supervise(2)
    pids = [run.pids(r)[0] for r in (0, 1)]
    bad_signals: list[Any] = [0, -1, 999, "TERM", 15.0, True]
    commands: list[Command] = [SignalRanks((0,), s) for s in bad_signals]
    commands += [TerminateRanks((0, 1), sig=s) for s in bad_signals]
    commands += [TerminateRanks(None, sig=s) for s in bad_signals]
    for cmd in commands:
        res = run.sup.execute(cmd)
        assert not res.ok and "is not a signal number (valid: 1-31" in res.message, (cmd, res)
        assert res.message.startswith("not sent: ")
    for t in (-1.0, math.inf, -math.inf, math.nan):
        res = run.sup.execute(TerminateRanks((0,), timeout_s=t))
        assert not res.ok and "timeout must be a number of seconds >= 0" in res.message, res
    # Nothing was sent, recorded or scheduled; the ranks run on.
    slots: list[RankSlot] = list(run.sup._state.slots.values())
    for slot in slots:
        assert slot.proc is not None and slot.proc.signals_sent == []
        assert slot.stop_reason is None and slot.user_signals == set()
    assert run.rec.of(EscalationScheduled) == []
    assert [run.rec.states(r) for r in (0, 1)] == [[RankState.RUNNING]] * 2
    assert all(pid_alive(p) for p in pids)
    # ... and the next valid command is carried out as usual.
    assert run.sup.execute(TerminateRanks(timeout_s=0)).ok
    finished = run.sup.wait(timeout=30)
    assert isinstance(finished, RunFinished) and set(finished.result.stopped) == {0, 1}


def test_a_bad_signal_is_refused_for_what_it_is_even_before_the_start(tmp_path: Path) -> None:
    cfg = SupervisorConfig(
        entrypoint=PYTHON, args=(str(BIN / "sv_rank.py"),), log_dir=str(tmp_path)
    )
    sup = Supervisor(cfg)
    try:
        res = sup.execute(TerminateRanks(sig=0))
        assert not res.ok and "0 is not a signal number" in res.message
        res = sup.execute(TerminateRanks(sig=RT6))
        assert not res.ok and "has not started" in res.message
    finally:
        sup.shutdown()


def test_one_failing_escalation_does_not_keep_the_others_from_sigkill(
    supervise: Factory, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Two escalations due in one pass; the SIGKILL of the first fails (an injected fault):
    the second rank is SIGKILLed all the same, and the monitor goes on."""
    run = supervise(2, "--ignore-term", term_timeout=60)
    run.pids(0)
    run.pids(1)
    stopper = run.sup._stopper
    real = stopper.signal_slots

    def faulty(slots: list[RankSlot], sig: int) -> list[int]:
        if sig == signal.SIGKILL and any(s.rank == 0 for s in slots):
            raise RuntimeError("injected fault")
        return real(slots, sig)

    monkeypatch.setattr(stopper, "signal_slots", faulty)
    caplog.set_level(logging.ERROR)
    with run.sup._state.lock:  # timeout 0: both are due when the monitor next looks
        assert run.sup.execute(TerminateRanks((0,), timeout_s=0)).ok
        assert run.sup.execute(TerminateRanks((1,), timeout_s=0)).ok
    run.rec.wait_state(1, RankState.SIGNALLED)
    (ev,) = run.rec.of(RankStateChanged, rank=1, new=RankState.SIGNALLED)
    assert (ev.exitcode, ev.caused_by_us) == (-9, True)
    wait_until(lambda: "escalation of rank(s) 0 failed" in caplog.text)
    assert "monitor step failed" not in caplog.text
    assert run.sup.snapshot().ranks[0].state is RankState.TERMINATING
    assert _monitor_alive(run)
    monkeypatch.undo()
    assert run.sup.execute(KillRanks((0,))).ok
    finished = run.sup.wait(timeout=30)
    assert isinstance(finished, RunFinished) and set(finished.result.stopped) == {0, 1}


def test_a_stopped_rank_is_continued_so_that_it_can_act_on_sigterm(supervise: Factory) -> None:
    """A SIGSTOPped rank gets SIGCONT after SIGTERM: it dies of SIGTERM long before the
    SIGKILL deadline, instead of always costing the whole term timeout."""
    run = supervise(1, term_timeout=60.0)
    (pid,) = run.pids(0)[:1]
    os.kill(pid, signal.SIGSTOP)
    wait_until(lambda: is_stopped(pid))
    assert run.sup.execute(TerminateRanks((0,))).ok
    run.rec.wait_state(0, RankState.SIGNALLED, timeout=30)
    (ev,) = run.rec.of(RankStateChanged, rank=0, new=RankState.SIGNALLED)
    assert ev.exitcode == -signal.SIGTERM  # not -9: the deadline (60 s) was never reached
    notices = [n.message for n in run.rec.of(SupervisorNotice)]
    assert "rank(s) 0 were stopped: sent SIGCONT so that they can act on SIGTERM" in notices


def test_a_monitor_step_that_keeps_failing_neither_spins_nor_floods_the_log(
    supervise: Factory, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
    tmp_path: Path,
) -> None:
    """A rank's exit leaves its pidfd readable: a step that fails on it every time would
    wake the loop at once for ever. The monitor logs the first failures, then backs off."""
    from rankvisor.engine.supervisor.monitor import Monitor

    calls: list[int] = []
    real = Monitor._reconcile

    def broken(self: Monitor) -> None:
        calls.append(1)
        raise RuntimeError("a bug in one step")

    go = tmp_path / "go"
    run = supervise(1, "--exit", "3", "--wait-file", str(go))
    run.pids(0)
    with caplog.at_level(logging.ERROR, logger="rankvisor.engine.supervisor.monitor"):
        monkeypatch.setattr(Monitor, "_reconcile", broken)
        go.touch()  # the rank exits now, and its pidfd stays readable until a step succeeds
        wait_until(lambda: len(calls) >= 12, timeout=30)
        monkeypatch.setattr(Monitor, "_reconcile", real)
    messages = [r.getMessage() for r in caplog.records]
    assert messages.count("monitor step failed") == 3
    assert sum(m.startswith("monitor step keeps failing") for m in messages) == 1
    run.sup._wakeup.wake()
    assert isinstance(run.sup.wait(timeout=30), RunFinished)  # healthy again: the run ends


@pytest.mark.parametrize("how", ["signal", "monitor-crash", "d-state"])
def test_a_run_stopped_for_good_while_a_restart_waits_still_ends(
    supervise: Factory, how: str, request: pytest.FixtureRequest,
) -> None:
    """Rank 0's restart by hand waits for it to exit (it ignores SIGTERM); meanwhile the
    run is stopped for good (SIGTERM to the supervisor, its monitor failing, the group in
    D-state). Nothing starts again, and the run ends: the restart asked before held the
    end for ever once its rank was gone."""
    from rankvisor.engine.handle import RestartRank

    run = supervise(2, "--ignore-term", term_timeout=1.0)
    first = run.pids(0)[0]
    run.pids(1)
    assert run.sup.execute(RestartRank(0)).ok
    with run.sup._state.lock:
        assert run.sup._state.slots[0].after_exit == "restart"
    if how == "signal":
        inbox = SignalInbox([signal.SIGTERM])
        request.addfinalizer(inbox.close)
        with run.sup._state.lock:
            run.sup._monitor.signals = inbox
        os.write(inbox._pipe.write_fd, bytes([signal.SIGTERM]))  # what the C-level handler writes
    elif how == "monitor-crash":
        run.sup._monitor._stop_after_crash(RuntimeError("a bug"))
    else:
        run.sup._on_uninterruptible([(0, first, 61.0)])
    finished = run.sup.wait(timeout=30)
    assert isinstance(finished, RunFinished), "the run never ended"
    assert not (run.pid_dir / "0.1.pids").exists()  # rank 0 was not started again
    assert not pid_alive(first)
