"""``rankvisor ls status stop terminate signal restart wait logs`` on live runs: a real supervisor
process (or a ``--headless`` / ``--foreground`` run) with real ranks, reached through its socket.

The commands run in this process (``rankvisor.tui.cli.main``) where they return at once, and as
``python -m rankvisor.tui`` where they block (``wait``, ``logs -f``). Every process a test starts is
ended by it (``tests.control.live``); the checks that a run is gone look at every pid.
"""

from __future__ import annotations

import json
import os
import pickle
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest
from rankvisor.engine.control import registry
from rankvisor.engine.entry.spawn import Started
from rankvisor.tui.cli import main

from tests.conftest import PYTHON, pid_alive, wait_until
from tests.control.live import START_S, SV_RANK, Daemons, daemons
from tests.control.runs import state_dir

pytestmark = pytest.mark.processes

__all__ = ["daemons", "state_dir"]  # fixtures, used by name

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _private_state_dir(state_dir: Path) -> Path:
    return state_dir


def ctl(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def rankvisor(*argv: str, **kw: Any) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([PYTHON, "-m", "rankvisor.tui", *argv], env=env, **kw)


def rank(status: dict[str, Any], r: int) -> dict[str, Any]:
    (found,) = [x for x in status["ranks"] if x["rank"] == r]
    return found


def all_running(status: dict[str, Any]) -> bool:
    return status["state"] == "running" and all(r["state"] == "running"
                                                 for r in status["ranks"])


def test_signal_a_rank_then_a_list_of_ranks(
        daemons: Daemons, capsys: pytest.CaptureFixture[str]) -> None:
    run = daemons.start()
    run.wait_status(all_running)
    code, out, err = ctl(capsys, "signal", run.run_dir, "1", "SIGUSR1")
    assert code == 0, err
    status = run.wait_status(lambda s: rank(s, 1)["signal"] == "SIGUSR1")
    assert rank(status, 1)["exitcode"] == -signal.SIGUSR1
    # Our own signal is no failure: no teardown, rank 0 goes on.
    assert status["state"] == rank(status, 0)["state"] == "running"
    # A list with a rank that is gone: the live one gets it, the other is named as skipped.
    code, out, err = ctl(capsys, "signal", run.run_dir, "0,1", "USR1")
    assert code == 0 and "skipped rank(s) 1" in out, (out, err)
    status = run.wait_status(lambda s: s["state"] == "finished")
    assert rank(status, 0)["signal"] == "SIGUSR1"
    run.wait_gone()
    code, _, _ = ctl(capsys, "wait", run.run_dir)
    assert code == 1 == status["exitcode"]  # the run did not succeed


def test_terminate_escalates_refusals_usage_errors_and_stop_no_wait(
        daemons: Daemons, capsys: pytest.CaptureFixture[str]) -> None:
    run = daemons.start(nprocs=3, only={0: ("--ignore-term",)}, term_timeout=30.0)
    run.wait_status(all_running)
    code, out, err = ctl(capsys, "terminate", run.run_dir, "0", "--timeout", "1")
    assert code == 0, err
    status = run.wait_status(lambda s: rank(s, 0)["state"] not in ("running", "terminating"))
    assert (rank(status, 0)["signal"], rank(status, 0)["exitcode"]) == (
        "SIGKILL", -signal.SIGKILL)
    assert not pid_alive(run.pids(0)[0])
    # Refused by the supervisor: its words, exit 1.
    code, out, err = ctl(capsys, "terminate", run.run_dir, "0")
    assert code == 1 and "rank 0 is not running" in err, (out, err)
    # Usage errors: exit 2, nothing sent.
    for argv in (["restart", run.run_dir, "7"], ["restart", run.run_dir, "1,2"],
                 ["signal", run.run_dir, "1", "NOSUCHSIG"], ["terminate", run.run_dir, "x"],
                 ["stop", run.run_dir, "--timeout", "-1"], ["status", "--bogus"]):
        code, out, err = ctl(capsys, *argv)
        assert code == 2, (argv, out, err)
    # No such run: exit 3.
    for argv in (["status", "no-such-run"], ["stop", "no-such-run"],
                 ["restart", "no-such-run", "0"]):
        code, out, err = ctl(capsys, *argv)
        assert code == 3 and "no run" in err, (argv, err)
    assert all_running({"state": "running", "ranks": run.status()["ranks"][1:]})

    # A list of ranks: both terminated.
    code, out, err = ctl(capsys, "terminate", run.run_dir, "1,2", "--timeout", "1")
    assert code == 0, err
    run.wait_status(lambda s: s["state"] == "finished")
    run.wait_gone()


def test_stop_no_wait_returns_and_the_run_ends(
        daemons: Daemons, capsys: pytest.CaptureFixture[str]) -> None:
    run = daemons.start("--child", "both", term_timeout=1.0)
    run.wait_status(all_running)
    code, out, err = ctl(capsys, "stop", "--no-wait")  # no RUN: the newest running run
    assert code == 0, err
    run.wait_gone()
    assert run.status()["state"] == "finished"
    code, out, err = ctl(capsys, "stop", run.run_dir)
    assert code == 0 and "already finished" in out


def test_stop_while_the_run_stops_already_is_no_refusal(
        daemons: Daemons, capsys: pytest.CaptureFixture[str]) -> None:
    # The run ends by itself (here SIGTERM to its supervisor; an agent's end on many nodes
    # is another way): its ranks ignore SIGTERM, so it stops until the SIGKILL deadline.
    run = daemons.start("--ignore-term", term_timeout=60.0)
    run.wait_status(all_running)
    os.kill(run.pid, signal.SIGTERM)
    run.wait_status(lambda s: all(r["state"] == "terminating" for r in s["ranks"]))
    code, out, err = ctl(capsys, "terminate", run.run_dir, "0")
    assert code == 1 and "the run is shutting down" in err, (out, err)
    # A person's stop now asks for what is under way: no refusal, exit 0.
    code, out, err = ctl(capsys, "stop", run.run_dir, "--no-wait")
    run_id = run.status()["run_id"]
    assert (code, out.strip(), err) == (0, f"run {run_id} is already stopping", ""), err


def test_restart_one_rank_then_all_then_stop_leaves_no_process(
        daemons: Daemons, capsys: pytest.CaptureFixture[str]) -> None:
    run = daemons.start("--child", "both", term_timeout=1.0)
    before = run.wait_status(all_running)
    old = rank(before, 0)["pid"]
    code, out, err = ctl(capsys, "restart", run.run_dir, "0")
    assert code == 0, err
    new = run.pids(0, 1)[0]
    status = run.wait_status(lambda s: rank(s, 0)["pid"] == new
                             and rank(s, 0)["state"] == "running")
    assert new != old and rank(status, 0)["restart_count"] == 1
    assert rank(status, 1)["pid"] == rank(before, 1)["pid"]
    run.all_pids()

    code, out, err = ctl(capsys, "restart", run.started.run_id, "all")
    assert code == 0, err
    status = run.wait_status(lambda s: s["attempt"] == 1 and all_running(s))
    assert {rank(status, r)["pid"] for r in (0, 1)}.isdisjoint({new, rank(before, 1)["pid"]})
    wait_until(lambda: len(list(run.pid_dir.glob("*.pids"))) >= 4, START_S)
    pids = run.all_pids()

    code, out, err = ctl(capsys, "stop", run.run_dir)
    assert code == 0 and "every rank is gone" in out, (out, err)
    run.wait_gone()
    assert not [p for p in pids + [rank(status, r)["pid"] for r in (0, 1)] if pid_alive(p)]
    assert run.process is not None and run.process.returncode == 1
    assert not os.path.exists(run.started.socket)


def test_wait_exits_with_the_runs_code_and_logs_prints_and_follows(
        daemons: Daemons, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    go = tmp_path / "go"
    run = daemons.start("--print", "3", "--exit", "0", "--wait-file", str(go))
    run.wait_status(all_running)
    stdout_log = Path(run.run_dir) / "attempt_0" / "1" / "stdout.log"
    wait_until(lambda: stdout_log.exists() and b"ready" in stdout_log.read_bytes(), START_S)
    code, out, err = ctl(capsys, "logs", run.run_dir, "--rank", "1", "--stdout")
    assert code == 0 and out == stdout_log.read_text() and "line 2 from rank 1" in out

    followed = tmp_path / "followed"
    with open(followed, "wb") as f:
        follower = rankvisor("logs", run.run_dir, "--rank", "1", "--stdout", "-f", stdout=f)
    waiter = rankvisor("wait", run.run_dir)
    try:
        wait_until(lambda: b"ready" in followed.read_bytes(), START_S)
        with open(stdout_log, "a") as f:  # the files are the record: -f prints what comes
            f.write("a late line\n")
        wait_until(lambda: b"a late line" in followed.read_bytes(), START_S)
        assert follower.poll() is None and waiter.poll() is None
        go.touch()
        assert waiter.wait(START_S) == 0
        assert follower.wait(START_S) == 0
    finally:
        for p in (follower, waiter):
            if p.poll() is None:
                p.kill()
                p.wait()
    assert followed.read_text() == stdout_log.read_text()
    run.wait_gone()


def test_wait_and_logs_of_a_failed_run(
        daemons: Daemons, capsys: pytest.CaptureFixture[str]) -> None:
    # After a second: at once, the teardown could stop rank 0 before it wrote its pids.
    run = daemons.start("--raise", "boom from rank 1", "--after", "1", "--only-rank", "1",
                        term_timeout=1.0)
    run.wait_gone()
    code, _, _ = ctl(capsys, "wait", run.run_dir)
    assert code == 1
    code, out, err = ctl(capsys, "logs", run.started.run_id, "--rank", "1", "--stderr")
    assert code == 0 and "RuntimeError: boom from rank 1" in out, err
    code, out, _ = ctl(capsys, "status", "--json")
    got = json.loads(out)
    assert (got["exitcode"], got["root_cause"]["rank"]) == (1, 1)
    assert "boom from rank 1" in got["root_cause"]["message"]


# -- runs without a supervisor process of their own register too -------------------------


def test_a_headless_run_is_found_and_stopped(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    pid_dir = tmp_path / "pids"
    pid_dir.mkdir()
    proc = rankvisor("run", "--headless", "--nproc-per-node", "2", "--term-timeout", "1",
                     "--log-dir", str(tmp_path / "logs"), SV_RANK, "--pid-dir", str(pid_dir),
                     "--child", "both", stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        entry = wait_until(lambda: registry.entries(), START_S)[0]  # type: ignore[index]
        wait_until(lambda: len(list(pid_dir.glob("*.pids"))) == 2, START_S)
        assert entry.supervisor_pid == proc.pid and entry.mode == "headless"
        code, out, _ = ctl(capsys, "status", "--json")
        got = json.loads(out)
        assert code == 0 and (got["state"], got["supervisor_pid"]) == ("running", proc.pid)
        pids = [int(p) for f in pid_dir.glob("*.pids") for p in f.read_text().split()]
        code, out, err = ctl(capsys, "stop", entry.run_id)
        assert code == 0, err
        assert proc.wait(START_S) == 1  # every rank stopped: not a success, as torchrun's
        wait_until(lambda: not [p for p in pids if pid_alive(p)], START_S)
        code, out, _ = ctl(capsys, "status", "--json", entry.run_dir)
        assert code == 0 and json.loads(out)["state"] == "finished"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


FOREGROUND = """
import pickle, sys
from rankvisor.engine.entry.headless import run_interactive

def run_tui(sup):
    # What the app does with a handle it holds: start it, then stay until the run ends.
    sup.start()
    sup.wait()
    return None

sys.exit(run_interactive(pickle.loads(sys.stdin.buffer.read()), run_tui))
"""


def test_a_foreground_run_registers_and_is_stopped_from_outside(
        daemons: Daemons, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    # No terminal needed: the TUI is replaced by a function doing what the app does.
    pid_dir = tmp_path / "pids"
    pid_dir.mkdir()
    config = daemons.config("--child", "group", nprocs=2, pid_dir=pid_dir, term_timeout=1.0)
    proc = subprocess.Popen([PYTHON, "-c", FOREGROUND], stdin=subprocess.PIPE,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert proc.stdin is not None
        proc.stdin.write(pickle.dumps(config))
        proc.stdin.close()
        entry = wait_until(lambda: registry.entries(), START_S)[0]  # type: ignore[index]
        assert entry.supervisor_pid == proc.pid and entry.mode == "foreground"
        run = daemons.adopt(Started(proc.pid, entry.socket, entry.run_dir, entry.run_id, proc),
                            pid_dir, 2)
        run.pids(0), run.pids(1)
        run.wait_status(all_running)
        code, out, err = ctl(capsys, "restart", entry.run_dir, "1")
        assert code == 0, err
        run.pids(1, 1)
        code, out, err = ctl(capsys, "stop", entry.run_dir)
        assert code == 0, err
        assert proc.wait(START_S) == 1
        run.wait_gone()
        assert run.status()["state"] == "finished"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
