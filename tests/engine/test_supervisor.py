"""The Supervisor with real processes: per-rank signals, escalation, descendants, results."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
from rankvisor.engine.events import (
    AttemptStarted,
    EscalationFinished,
    EscalationScheduled,
    RankOutput,
    RankStateChanged,
    RankStats,
    RunFinished,
)
from rankvisor.engine.handle import KillRanks, RestartRank, SignalRanks, TerminateRanks
from rankvisor.engine.states import RankState
from rankvisor.engine.supervisor import Supervisor, SupervisorConfig

from tests.conftest import BIN, PYTHON, pid_alive, wait_until
from tests.engine.supervisor_helpers import Factory, supervise_fixture  # noqa: F401 - fixture

pytestmark = pytest.mark.processes


def test_sigterm_to_one_rank_while_the_others_keep_running(supervise: Factory) -> None:
    run = supervise(3)
    pids = {r: run.pids(r)[0] for r in range(3)}
    res = run.sup.execute(TerminateRanks((1,)))
    assert res.ok, res.message
    run.rec.wait_state(1, RankState.SIGNALLED)
    (ev,) = run.rec.of(RankStateChanged, rank=1, new=RankState.SIGNALLED)
    assert (ev.exitcode, ev.signal_name, ev.caused_by_us) == (-15, "SIGTERM", True)
    assert run.rec.states(1) == [RankState.RUNNING, RankState.TERMINATING, RankState.SIGNALLED]
    (sched,) = run.rec.of(EscalationScheduled)
    assert (sched.ranks, sched.signal_name) == ((1,), "SIGTERM")
    wait_until(lambda: run.rec.of(EscalationFinished))
    assert run.rec.of(EscalationFinished)[0].killed == ()
    # A rank stopped by hand is not a failure that tears the group down.
    time.sleep(0.2)
    assert pid_alive(pids[0]) and pid_alive(pids[2]) and not pid_alive(pids[1])
    assert [r.state for r in run.sup.snapshot().ranks] == [
        RankState.RUNNING, RankState.SIGNALLED, RankState.RUNNING,
    ]
    # A plain signal through SignalRanks reaches rank 2 only.
    assert run.sup.execute(SignalRanks((2,), signal.SIGTERM)).ok
    run.rec.wait_state(2, RankState.SIGNALLED)
    assert pid_alive(pids[0])
    assert run.rec.of(RankStateChanged, rank=2, new=RankState.SIGNALLED)[0].caused_by_us


def test_a_rank_ignoring_sigterm_is_sigkilled_at_the_deadline(supervise: Factory) -> None:
    timeout = 1.5
    run = supervise(2, "--ignore-term", term_timeout=timeout)
    run.pids(0)  # written after SIGTERM is ignored
    run.pids(1)
    t0 = time.monotonic()
    assert run.sup.execute(TerminateRanks((0,))).ok
    run.rec.wait_state(0, RankState.SIGNALLED, timeout=timeout * 10)
    elapsed = time.monotonic() - t0
    # Not before the deadline; and soon after it (tolerance: a ratio of the timeout).
    assert timeout * 0.95 <= elapsed <= timeout * 2.5, elapsed
    (ev,) = run.rec.of(RankStateChanged, rank=0, new=RankState.SIGNALLED)
    assert (ev.exitcode, ev.signal_name, ev.caused_by_us) == (-9, "SIGKILL", True)
    wait_until(lambda: run.rec.of(EscalationFinished))
    assert run.rec.of(EscalationFinished)[0] == EscalationFinished((0,), (0,))
    sched = run.rec.of(EscalationScheduled)[0]
    assert sched.timeout_s == timeout
    assert run.sup.snapshot().ranks[1].state is RankState.RUNNING


def test_grandchildren_die_with_their_rank(supervise: Factory) -> None:
    run = supervise(2, "--child", "both")
    rank0 = run.pids(0)
    rank1 = run.pids(1)
    assert len(rank0) == 3 and all(pid_alive(p) for p in rank0)
    assert run.sup.execute(TerminateRanks((0,))).ok
    # The grandchild in the rank's group and the one that left it with setsid.
    wait_until(lambda: not any(pid_alive(p) for p in rank0))
    assert all(pid_alive(p) for p in rank1)
    assert run.sup.execute(KillRanks((1,))).ok
    wait_until(lambda: not any(pid_alive(p) for p in rank1))
    run.rec.wait_state(1, RankState.SIGNALLED)
    assert run.rec.of(RankStateChanged, rank=1, new=RankState.SIGNALLED)[0].exitcode == -9


def test_a_failure_tears_the_group_down_and_is_the_root_cause(supervise: Factory) -> None:
    run = supervise(3, "--raise", "boom", "--only-rank", "1", "--after", "0.2")
    finished = run.sup.wait(timeout=30)
    assert isinstance(finished, RunFinished)
    assert finished.root_cause_rank == 1
    failures = finished.result.failures
    assert sorted(failures) == [1]  # the ranks the teardown stopped did not fail
    assert failures[1].exitcode == 1 and not failures[1].caused_by_us
    assert "boom" in str(failures[1].message)
    stopped = finished.result.stopped
    assert sorted(stopped) == [0, 2]
    assert stopped[0].caused_by_us and stopped[0].exitcode == -15
    assert run.rec.of(RunFinished) == [finished]
    assert run.sup.snapshot().finished


def test_success_and_output_batches(supervise: Factory) -> None:
    run = supervise(2, "--print", "50", "--exit", "0", stdout_filters=("line 7 ",))
    finished = run.sup.wait(timeout=30)
    assert finished is not None and not finished.result.failures
    assert finished.root_cause_rank is None
    assert [e.new for e in run.rec.of(RankStateChanged, rank=0)][-1] is RankState.SUCCEEDED
    wait_until(lambda: run.rec.of(RankOutput, rank=0, stream="stdout"))
    # The last line arrived before the rank's exit event: the pump drains on exit.
    lines = [ln for e in run.rec.of(RankOutput, rank=0, stream="stdout") for ln in e.lines]
    assert lines[:50] == [f"line {i} from rank 0" for i in range(50)]
    assert len(run.rec.of(RankOutput, rank=0, stream="stdout")) < 50  # batches, not lines
    index = run.rec.events.index
    last_out = max(index(e) for e in run.rec.of(RankOutput, rank=0, stream="stdout"))
    exit_ev = index(run.rec.of(RankStateChanged, rank=0, new=RankState.SUCCEEDED)[0])
    assert last_out < exit_ev
    info = run.sup.snapshot()
    filtered = Path(info.filtered_stdout_path).read_text().splitlines()
    assert sorted(filtered) == ["[default0]:line 7 from rank 0", "[default1]:line 7 from rank 1"]
    assert run.rec.of(RankOutput, stream="filtered_stdout")


def test_commands_that_cannot_apply_get_an_answer_not_an_exception(supervise: Factory) -> None:
    run = supervise(2, "--exit", "0", "--only-rank", "1")
    run.rec.wait_state(1, RankState.SUCCEEDED)
    for cmd in (SignalRanks((5,), signal.SIGUSR1), TerminateRanks((-1, 0)), RestartRank(9)):
        res = run.sup.execute(cmd)
        assert not res.ok and "no rank" in res.message
    for cmd in (SignalRanks((1,), signal.SIGTERM), TerminateRanks((1,)), KillRanks((1,))):
        res = run.sup.execute(cmd)
        assert not res.ok and "rank 1 is not running (succeeded)" in res.message
    res = run.sup.execute(SignalRanks((0, 1), signal.SIGUSR2 + 1000))
    assert not res.ok and "not a signal" in res.message
    # A set with one live rank: done for it, and the answer says what was skipped.
    res = run.sup.execute(SignalRanks((0, 1), signal.SIGCONT))
    assert res.ok and "skipped rank(s) 1" in res.message
    run.sup.shutdown(timeout_s=1)
    res = run.sup.execute(KillRanks())
    assert not res.ok and "shutting down" in res.message


def test_not_started_and_shutdown_are_safe(tmp_path: Path) -> None:
    cfg = SupervisorConfig(
        entrypoint=PYTHON, args=(str(BIN / "sv_rank.py"),), log_dir=str(tmp_path)
    )
    sup = Supervisor(cfg)
    assert not sup.execute(KillRanks()).ok
    assert sup.snapshot().ranks[0].state is RankState.STARTING
    sup.shutdown()
    sup.shutdown()


def test_stats_events_and_exit_to_event_latency(supervise: Factory) -> None:
    run = supervise(2, "--exit", "3", "--after", "1.0", "--only-rank", "0",
                    sample_interval=0.1, teardown_on_failure=False)
    wait_until(lambda: len(run.rec.of(RankStats, rank=1)) >= 2)
    st = run.rec.of(RankStats, rank=1)[-1]
    assert st.pid == run.pids(1)[0] and st.rss_bytes > 0
    run.rec.wait_state(0, RankState.FAILED)
    ev = run.rec.of(RankStateChanged, rank=0, new=RankState.FAILED)[0]
    assert ev.exitcode == 3 and not ev.caused_by_us
    # The event's stamp follows the observed exit (ordering only: no wall-clock bound here;
    # tests/bench/bench_supervisor.py measures the latency).
    assert ev.failure is not None and ev.t * 1e9 >= ev.failure.exit_time_ns
    assert run.sup.snapshot().ranks[1].state is RankState.RUNNING  # no teardown asked


def test_attempt_started_and_env(supervise: Factory) -> None:
    run = supervise(2, role="trainer", run_id="myrun")
    (started,) = run.rec.of(AttemptStarted)
    assert started.attempt == 0 and started.log_dir.endswith("attempt_0")
    env = run.env(1)
    assert env["RANK"] == "1" and env["WORLD_SIZE"] == "2" and env["ROLE_NAME"] == "trainer"
    assert env["TORCHELASTIC_RUN_ID"] == "myrun" and env["TORCHELASTIC_RESTART_COUNT"] == "0"
    assert env["MASTER_PORT"] == str(run.sup.master_port)
    assert env["TORCHELASTIC_ERROR_FILE"] == run.sup.snapshot().ranks[1].error_file
    assert env["PYTHONUNBUFFERED"] == os.environ.get("PYTHONUNBUFFERED", "1")
    assert env["PYTHONFAULTHANDLER"] == os.environ.get("PYTHONFAULTHANDLER", "1")
    assert env["RANKVISOR_GUARD"]


def test_when_rankvisor_stopped_every_rank_nobody_is_the_root_cause(supervise: Factory) -> None:
    from rankvisor.engine.entry.headless import format_report
    from rankvisor.engine.errors import ChildFailedError

    run = supervise(3)
    for r in range(3):
        run.pids(r)
    assert run.sup.execute(TerminateRanks()).ok  # terminate-all
    finished = run.sup.wait(timeout=30)
    assert isinstance(finished, RunFinished)
    # Nobody failed on their own: the three ranks are reported apart, as stopped.
    assert finished.result.failures == {}
    stopped = finished.result.stopped
    assert sorted(stopped) == [0, 1, 2]
    assert all(f.exitcode == -15 and f.caused_by_us for f in stopped.values())
    assert finished.root_cause_rank is None
    # The torch-style report and the CLI's first line agree: the run was stopped, no blame.
    err = ChildFailedError("sv_rank.py", stopped)
    assert err.stopped_by_us
    assert "<NONE: every failed rank was stopped by rankvisor>" in err.format_msg()
    report = format_report("sv_rank.py", finished)
    assert report.startswith("rankvisor: no root cause: the run was stopped by rankvisor")
    assert "failed first" not in report
    assert "Root Cause (first observed failure):\n  <NONE" in report


def test_quit_is_not_a_failure_of_any_rank(supervise: Factory) -> None:
    run = supervise(2, "--ignore-term", term_timeout=0.5)
    run.pids(0)
    run.pids(1)
    run.sup.shutdown()  # what quitting the TUI does: SIGTERM, SIGKILL at the deadline
    finished = run.sup.finished
    assert isinstance(finished, RunFinished)
    assert finished.root_cause_rank is None
    assert finished.result.failures == {}
    assert {r: f.exitcode for r, f in finished.result.stopped.items()} == {0: -9, 1: -9}
    assert all(f.caused_by_us for f in finished.result.stopped.values())


def test_a_rank_that_exited_before_our_signal_reached_it_is_a_real_failure(
    supervise: Factory, tmp_path: Path
) -> None:
    """Terminate-all right after rank 1 exited 1 by itself, before the monitor saw it: our
    SIGTERM never reached rank 1, so its exit is its own failure, and the root cause."""
    go = tmp_path / "go"
    run = supervise(2, "--exit", "1", "--only-rank", "1", "--wait-file", str(go))
    run.pids(0)
    run.pids(1)
    slot = run.sup._state.slots[1]
    with run.sup._state.lock:  # hold the monitor off: it sees rank 1's exit only after the command
        go.touch()
        wait_until(lambda: slot.proc.poll() is not None)
        assert run.sup.execute(TerminateRanks()).ok
        assert slot.stop_reason == "terminate"  # asked to stop, but no signal was delivered
    finished = run.sup.wait(timeout=30)
    assert isinstance(finished, RunFinished)
    failures = finished.result.failures
    assert failures[1].exitcode == 1 and not failures[1].caused_by_us
    assert 0 not in failures
    assert finished.result.stopped[0].exitcode == -15
    assert finished.result.stopped[0].caused_by_us
    assert finished.root_cause_rank == 1
    (ev,) = run.rec.of(RankStateChanged, rank=1, new=RankState.FAILED)
    assert ev.exitcode == 1 and not ev.caused_by_us  # the pane must not say "by rankvisor"
    (ev0,) = run.rec.of(RankStateChanged, rank=0, new=RankState.SIGNALLED)
    assert ev0.caused_by_us


def test_a_rank_failing_by_itself_during_a_teardown_is_a_real_failure(
    supervise: Factory, tmp_path: Path
) -> None:
    """Rank 0 ignores SIGTERM and is being terminated; rank 1, never signalled, exits 1."""
    go = tmp_path / "go"
    run = supervise(
        2, "--ignore-term", "--exit", "1", "--only-rank", "1", "--wait-file", str(go),
        term_timeout=60,
    )
    run.pids(0)
    run.pids(1)
    assert run.sup.execute(TerminateRanks((0,))).ok
    run.rec.wait_state(0, RankState.TERMINATING)
    go.touch()
    run.rec.wait_state(1, RankState.FAILED)
    (ev,) = run.rec.of(RankStateChanged, rank=1, new=RankState.FAILED)
    assert ev.exitcode == 1 and not ev.caused_by_us and not ev.failure.caused_by_us
    assert run.sup.execute(KillRanks((0,))).ok
    finished = run.sup.wait(timeout=30)
    assert isinstance(finished, RunFinished)
    assert finished.root_cause_rank == 1
    assert finished.result.stopped[0].caused_by_us


def test_a_signal_we_sent_owns_only_the_death_it_causes(supervise: Factory, tmp_path: Path) -> None:
    """A person's signal that kills (SIGUSR2) makes the death ours; one the rank survives
    (SIGCONT) does not make its later failure ours."""
    go = tmp_path / "go"
    run = supervise(2, "--exit", "1", "--only-rank", "1", "--wait-file", str(go))
    run.pids(0)
    run.pids(1)
    assert run.sup.execute(SignalRanks((0,), signal.SIGUSR2)).ok
    run.rec.wait_state(0, RankState.SIGNALLED)
    (ev,) = run.rec.of(RankStateChanged, rank=0, new=RankState.SIGNALLED)
    assert ev.exitcode == -signal.SIGUSR2 and ev.caused_by_us
    assert run.sup.execute(SignalRanks((1,), signal.SIGCONT)).ok
    go.touch()
    run.rec.wait_state(1, RankState.FAILED)
    (ev,) = run.rec.of(RankStateChanged, rank=1, new=RankState.FAILED)
    assert ev.exitcode == 1 and not ev.caused_by_us
    finished = run.sup.wait(timeout=30)
    assert isinstance(finished, RunFinished) and finished.root_cause_rank == 1
