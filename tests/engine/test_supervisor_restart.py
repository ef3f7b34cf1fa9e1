"""Restarts: one rank (earlier files kept), all ranks (a new attempt), and the policy."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from rankvisor.engine.events import AttemptStarted, RankRestarted, RankStateChanged, RunFinished
from rankvisor.engine.handle import RestartAll, RestartRank, SignalRanks, TerminateRanks
from rankvisor.engine.states import RankState

from tests.conftest import pid_alive, wait_until
from tests.engine.supervisor_helpers import (  # noqa: F401 - the fixture
    Factory,
    attempt_dir,
    supervise_fixture,
)

pytestmark = pytest.mark.processes


def test_restart_one_rank_keeps_its_earlier_logs_and_error_json(supervise: Factory) -> None:
    run = supervise(
        2, "--print", "2", "--raise", "first life", "--only-rank", "1", teardown_on_failure=False
    )
    run.rec.wait_state(1, RankState.FAILED)
    first = run.sup.snapshot().ranks[1]
    old_err = json.loads(Path(first.error_file).read_text())
    assert "first life" in old_err["message"]["message"]
    wait_until(lambda: "RuntimeError: first life" in Path(first.stderr_path).read_text())
    old_out = Path(first.stdout_path).read_text()
    rank0 = run.pids(0)[0]

    res = run.sup.execute(RestartRank(1))
    assert res.ok and res.message == "rank 1 had exited (failed): starting it again"
    (restarted,) = wait_until(lambda: run.rec.of(RankRestarted, rank=1))
    assert (restarted.restart_count, restarted.attempt, restarted.whole_attempt) == (1, 0, False)
    rank_dir = attempt_dir(run, 0) / "1"
    assert restarted.stdout_path == str(rank_dir / "restart_1" / "stdout.log")
    assert restarted.error_file == str(rank_dir / "restart_1" / "error.json")
    # The new incarnation sees its restart count and its own error file.
    env = run.env(1, restart_count=1)
    assert env["RANKVISOR_RESTART_COUNT"] == "1"
    assert env["TORCHELASTIC_ERROR_FILE"] == restarted.error_file
    assert env["TORCHELASTIC_RESTART_COUNT"] == "0"  # still attempt 0
    run.rec.wait_state(1, RankState.FAILED, count=2)
    # The first life's files are untouched; the second wrote beside them.
    assert Path(first.stdout_path).read_text() == old_out
    assert json.loads(Path(first.error_file).read_text()) == old_err
    assert "first life" in json.loads(Path(restarted.error_file).read_text())["message"]["message"]
    assert Path(restarted.stdout_path).read_text().startswith("line 0 from rank 1")
    assert run.rec.states(1) == [
        RankState.RUNNING, RankState.FAILED, RankState.STARTING, RankState.RUNNING,
        RankState.FAILED,
    ]
    assert run.rec.of(RankStateChanged, rank=1, new=RankState.STARTING)[0].restart_count == 1
    assert pid_alive(rank0)  # the other rank never noticed


def test_restart_a_running_rank(supervise: Factory) -> None:
    run = supervise(2, "--ignore-term", term_timeout=0.5)
    old = run.pids(0)[0]
    assert run.sup.execute(RestartRank(0)).ok
    again = run.sup.execute(RestartRank(0))
    assert not again.ok and "already restarting" in again.message
    new = run.pids(0, restart_count=1)[0]
    assert new != old and not pid_alive(old) and pid_alive(new)
    assert run.rec.states(0) == [
        RankState.RUNNING, RankState.RESTARTING, RankState.SIGNALLED, RankState.STARTING,
        RankState.RUNNING,
    ]
    killed = run.rec.of(RankStateChanged, rank=0, new=RankState.SIGNALLED)[0]
    assert killed.exitcode == -9 and killed.caused_by_us  # it ignored SIGTERM


def test_restart_all_starts_attempt_1_with_the_count_incremented(supervise: Factory) -> None:
    run = supervise(2, "--print", "1")
    first = {r: run.pids(r)[0] for r in range(2)}
    assert run.sup.execute(RestartAll()).ok
    wait_until(lambda: len(run.rec.of(AttemptStarted)) == 2)
    started = run.rec.of(AttemptStarted)[1]
    assert started.attempt == 1 and started.log_dir == str(attempt_dir(run, 1))
    for r in range(2):
        env = run.env(r, restart_count=1)
        assert env["TORCHELASTIC_RESTART_COUNT"] == "1"
        assert env["TORCHELASTIC_ERROR_FILE"].endswith(f"attempt_1/{r}/error.json")
        assert not pid_alive(first[r])
    # attempt_0 is still on disk with its output.
    assert (attempt_dir(run, 0) / "0" / "stdout.log").read_text().startswith("line 0")
    wait_until(lambda: (attempt_dir(run, 1) / "1" / "stdout.log").read_text())
    assert run.sup.snapshot().attempt == 1
    ev = run.rec.of(RankRestarted, rank=1)[0]
    assert ev.whole_attempt and ev.attempt == 1 and ev.restart_count == 1


def test_restart_dirs_are_numbered_within_their_attempt(supervise: Factory) -> None:
    # The first rank restarted alone in attempt 1 writes to restart_1/, though it is the
    # rank's second restart overall (RANKVISOR_RESTART_COUNT counts them all).
    run = supervise(2, "--print", "1")
    assert run.sup.execute(RestartAll()).ok
    run.pids(1, restart_count=1)
    assert run.sup.execute(RestartRank(1)).ok
    alone = wait_until(lambda: run.rec.of(RankRestarted, rank=1, whole_attempt=False))[0]
    rank_dir = attempt_dir(run, 1) / "1"
    assert (alone.attempt, alone.restart_count) == (1, 2)
    assert alone.stdout_path == str(rank_dir / "restart_1" / "stdout.log")
    assert alone.error_file == str(rank_dir / "restart_1" / "error.json")
    env = run.env(1, restart_count=2)
    assert env["RANKVISOR_RESTART_COUNT"] == "2"
    assert env["TORCHELASTIC_RESTART_COUNT"] == "1"  # the attempt
    assert env["TORCHELASTIC_ERROR_FILE"] == alone.error_file
    # A second restart alone in the same attempt is restart_2.
    assert run.sup.execute(RestartRank(1)).ok
    again = wait_until(lambda: run.rec.of(RankRestarted, rank=1, whole_attempt=False)[1:])[0]
    assert again.stdout_path == str(rank_dir / "restart_2" / "stdout.log")


def test_max_restarts_2_on_an_always_failing_rank_gives_exactly_3_attempts(
    supervise: Factory,
) -> None:
    run = supervise(2, "--exit", "7", "--only-rank", "1", max_restarts=2, term_timeout=2)
    finished = run.sup.wait(timeout=60)
    assert isinstance(finished, RunFinished)
    assert finished.attempt == 2 and finished.root_cause_rank == 1
    assert finished.result.failures[1].exitcode == 7
    assert [e.attempt for e in run.rec.of(AttemptStarted)] == [0, 1, 2]
    run_dir = Path(run.sup.snapshot().log_dir)
    assert sorted(p.name for p in run_dir.iterdir()) == ["attempt_0", "attempt_1", "attempt_2"]
    assert [run.env(1, n)["TORCHELASTIC_RESTART_COUNT"] for n in range(3)] == ["0", "1", "2"]
    assert run.env(1)["TORCHELASTIC_MAX_RESTARTS"] == "2"
    assert len(run.rec.of(RunFinished)) == 1


def test_no_restart_by_default(supervise: Factory) -> None:
    run = supervise(1, "--exit", "7")
    finished = run.sup.wait(timeout=30)
    assert finished is not None and finished.attempt == 0
    assert len(run.rec.of(AttemptStarted)) == 1


def _set_next_pid(pid: int) -> bool:
    try:
        with open("/proc/sys/kernel/ns_last_pid", "w") as f:
            f.write(str(pid - 1))
        return True
    except OSError:
        return False


def test_a_recycled_pid_is_not_signalled(supervise: Factory) -> None:
    run = supervise(2, "--exit", "0", "--only-rank", "0")
    run.rec.wait_state(0, RankState.SUCCEEDED)
    old_proc_pid = run.pids(0)[0]
    slot_proc = run.sup._state.slots[0].proc  # the RankProcess of the exited incarnation
    victim = None
    for _ in range(20):
        # Make the kernel hand the rank's old pid to an unrelated process (needs root).
        if not _set_next_pid(old_proc_pid):
            pytest.skip("cannot choose the next pid here (needs CAP_SYS_ADMIN)")
        p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
        if p.pid == old_proc_pid:
            victim = p
            break
        p.kill()
        p.wait()
    if victim is None:
        pytest.skip("another process took the pid first")
    try:
        res = run.sup.execute(SignalRanks((0,), signal.SIGKILL))
        assert not res.ok and "not running" in res.message
        res = run.sup.execute(TerminateRanks((0,)))
        assert not res.ok
        assert slot_proc.send_signal(signal.SIGKILL) is False
        time.sleep(0.2)
        assert victim.poll() is None and pid_alive(victim.pid)
    finally:
        victim.kill()
        victim.wait()
    assert os.path.exists(run.sup.snapshot().log_dir)


def test_a_restart_asked_as_the_loop_wakes_for_a_reading_is_carried_out(
    supervise: Factory,
) -> None:
    """The run loop wakes for its readings as well as for commands. A command whose wake-up
    lands after such a wake-up returned, and before the loop empties its pipe, must still
    be carried out (a loaded run once accepted a restart of all and never started it)."""
    run = supervise(1, "--exit", "0", sample_interval=0.05)  # a reading every 50 ms
    wait_until(lambda: run.sup.finished is not None)
    wakeup = run.sup._wakeup
    drain = wakeup.drain
    answers = []

    def command_then_drain() -> bytes:
        if not answers:  # once, on the loop's thread, between its poll and its drain
            answers.append(run.sup.execute(RestartAll()))
        return drain()

    # Nothing else wakes a finished run's loop: its next drain follows a reading's wake-up.
    wakeup.drain = command_then_drain  # type: ignore[method-assign]
    wait_until(lambda: answers)
    assert answers[0].ok
    wait_until(lambda: len(run.rec.of(AttemptStarted)) == 2)
