"""The supervisor process for real: started by ``start_supervisor``, reached through its socket
and the commands, ended by its run's end, by its viewer's leave, by signals and by SIGKILL.

Every test ends every process it started (``tests.control.live``); each check that a process
is gone looks at every pid the ranks wrote (ranks, grandchildren in the rank's group and in a
session of their own) and at the supervisor's.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any, Iterator

import pytest
from rankvisor.engine.control.client import RemoteHandle
from rankvisor.engine.control.replay import RecordedRun
from rankvisor.engine.entry.spawn import Started
from rankvisor.engine.events import Event, RunFinished
from rankvisor.engine.handle import CommandResult, RestartRank, SignalRanks
from rankvisor.engine.states import RankState
from rankvisor.tui.cli import main

from tests.conftest import PYTHON, pid_alive, wait_until
from tests.control.live import START_S, Daemons

pytestmark = pytest.mark.processes

ROOT = Path(__file__).resolve().parents[2]


def ctl(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def tty_nr(pid: int) -> int:
    with open(f"/proc/{pid}/stat", "rb") as f:
        return int(f.read().rsplit(b")", 1)[1].split()[4])


def fds(pid: int) -> list[str]:
    out = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            out.append(os.readlink(f"/proc/{pid}/fd/{fd}"))
        except OSError:
            pass
    return out


def running(status: dict[str, Any]) -> bool:
    return status["state"] == "running" and all(
        r["state"] == "running" for r in status["ranks"])


@pytest.fixture
def viewers() -> Iterator[list[RemoteHandle]]:
    made: list[RemoteHandle] = []
    yield made
    for h in made:
        h.detach()


# -- the process itself, and finding it --------------------------------------------------


def test_the_supervisor_has_its_own_session_no_terminal_and_is_found_every_way(
        daemons: Daemons, capsys: pytest.CaptureFixture[str]) -> None:
    run = daemons.start("--child", "both")
    assert os.getsid(run.pid) == run.pid != os.getsid(0)
    assert tty_nr(run.pid) == 0
    assert os.readlink(f"/proc/{run.pid}/fd/0") == "/dev/null"
    log = Path(run.run_dir) / "supervisor.log"
    assert os.readlink(f"/proc/{run.pid}/fd/2") == str(log)
    wait_until(lambda: "supervising" in log.read_text(), START_S)

    status = run.wait_status(running)
    assert status["supervisor_pid"] == run.pid
    assert status["socket"] == run.started.socket
    assert [r["pid"] for r in status["ranks"]] == [run.pids(0)[0], run.pids(1)[0]]

    code, out, _ = ctl(capsys, "ls", "--json")
    assert code == 0
    (row,) = json.loads(out)
    assert (row["run_dir"], row["state"], row["ranks_running"], row["ranks_total"],
            row["mode"]) == (run.run_dir, "running", 2, 2, "supervisor")
    log_dir = os.path.dirname(run.run_dir)
    for how in (run.run_dir, log_dir, run.started.run_id, None):
        code, out, _ = ctl(capsys, "status", "--json", *([how] if how else []))
        assert code == 0, how
        got = json.loads(out)
        assert (got["run_dir"], got["state"], got["supervisor_pid"]) == (
            run.run_dir, "running", run.pid), how
        assert [r["pid"] for r in got["ranks"]] == [r["pid"] for r in status["ranks"]]

    code, out, _ = ctl(capsys, "stop", run.run_dir, "--timeout", "1")
    assert code == 0, out
    run.wait_gone()
    assert run.process.returncode == 1  # every rank stopped: not a success (torchrun's rule)
    assert len(run.all_pids()) == 1 + 2 * 3  # the supervisor, 2 ranks with 2 grandchildren
    assert not os.path.exists(run.started.socket)
    assert run.status()["state"] == "finished"


# -- SIGKILL: the guard, and a stale status -----------------------------------------------


def test_sigkill_of_the_supervisor_leaves_no_process_and_a_stale_run(
        daemons: Daemons, viewers: list[RemoteHandle],
        capsys: pytest.CaptureFixture[str]) -> None:
    from rankvisor.tui.cli.attach import open_handle

    run = daemons.start("--child", "both")
    run.wait_status(running)
    pids = run.all_pids()
    assert len(pids) == 7
    viewer = RemoteHandle.connect(run.started.socket, name="test")
    viewers.append(viewer)
    waiter = subprocess.Popen([PYTHON, "-m", "rankvisor.tui", "wait", run.run_dir],
                              env={**os.environ, "PYTHONPATH": str(ROOT)},
                              stderr=subprocess.PIPE)
    try:
        # Waiting: it watches status.json (an inotify descriptor is open).
        wait_until(lambda: waiter.poll() is not None or "anon_inode:inotify" in fds(waiter.pid),
                   START_S)
        assert waiter.poll() is None
        run.process.kill()
        run.process.wait()
        wait_until(lambda: not [p for p in pids if pid_alive(p)], START_S)
        # Those watching learn it: the viewer's connection ends, `wait` says stale.
        assert viewer.wait(START_S) is None and not viewer.connected
        _, err = waiter.communicate(timeout=START_S)
        assert waiter.returncode == 4 and b"stale" in err
    finally:
        if waiter.poll() is None:
            waiter.kill()
            waiter.wait()

    assert run.status()["state"] == "running"  # its last word, as it was killed
    code, out, err = ctl(capsys, "status", "--json", run.run_dir)
    assert code == 4 and json.loads(out)["state"] == "stale"
    code, out, _ = ctl(capsys, "ls", "--json")
    assert code == 0 and [r["state"] for r in json.loads(out)] == ["stale"]
    code, _, err = ctl(capsys, "stop", run.run_dir)
    assert code == 4 and "stale" in err

    handle = open_handle(run.run_dir, read_only=False)
    assert isinstance(handle, RecordedRun) and not handle.finished_cleanly
    result = handle.execute(RestartRank(0))
    assert not result.ok and "stale" in result.message
    assert [r.rank for r in handle.snapshot().ranks] == [0, 1]

    code, out, _ = ctl(capsys, "rm", run.run_dir)
    assert code == 0 and "removed" in out
    code, out, _ = ctl(capsys, "ls", "--json")
    assert json.loads(out) == []
    assert not os.path.exists(run.started.socket)


# -- a signal to the supervisor: the middle row of the table ------------------------------


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP],
                         ids=["SIGTERM", "SIGINT", "SIGHUP"])
def test_a_signal_to_the_supervisor_stops_the_ranks_with_escalation_and_it_exits(
        daemons: Daemons, viewers: list[RemoteHandle], sig: int) -> None:
    # Rank 0 ignores the signal (SIGKILL must follow at the term timeout); rank 1 dies of it.
    run = daemons.start("--child", "group", only={0: ("--ignore", str(int(sig)))},
                        term_timeout=1.0)
    run.wait_status(running)
    pids = run.all_pids()
    viewer = RemoteHandle.connect(run.started.socket, name="test")  # does not hold it back
    viewers.append(viewer)
    os.kill(run.pid, sig)
    finished = viewer.wait(START_S)
    assert finished is not None and sorted(finished.result.stopped) == [0, 1]
    assert run.process.wait(START_S) == 128 + sig
    wait_until(lambda: not [p for p in pids if pid_alive(p)], START_S)
    status = run.status()
    assert (status["state"], status["finished"], status["exitcode"]) == (
        "finished", True, 128 + sig)
    by_rank = {r["rank"]: r for r in status["ranks"]}
    assert by_rank[0]["signal"] == "SIGKILL" and by_rank[0]["exitcode"] == -signal.SIGKILL
    assert by_rank[1]["signal"] == signal.Signals(sig).name
    assert by_rank[1]["exitcode"] == -sig
    assert not os.path.exists(run.started.socket)


# -- when the supervisor exits on its own --------------------------------------------------


def test_a_finished_run_waits_for_its_viewer_and_exits_when_it_detaches(
        daemons: Daemons, viewers: list[RemoteHandle], tmp_path: Path) -> None:
    go = tmp_path / "go"
    run = daemons.start("--exit", "0", "--wait-file", str(go), expect_viewer=True)
    handle = RemoteHandle.connect(run.started.socket, name="test")
    viewers.append(handle)
    go.touch()
    finished = handle.wait(START_S)
    assert isinstance(finished, RunFinished) and not finished.result.failures
    run.wait_status(lambda s: s["state"] == "finished")
    # Still there for as long as the viewer is: it answers, again and again, while the
    # supervise loop goes round several times (it looks every half second).
    answers = 0
    until = time.monotonic() + 1.5
    while answers < 3 or time.monotonic() < until:
        assert run.process.poll() is None
        result = handle.execute(SignalRanks((0,), signal.SIGCONT))
        assert isinstance(result, CommandResult) and not result.ok
        answers += 1
    assert handle.connected
    handle.detach()
    assert run.process.wait(START_S) == 0
    run.wait_gone()
    assert not os.path.exists(run.started.socket)


def test_a_run_nobody_will_view_exits_once_finished(daemons: Daemons) -> None:
    run = daemons.start("--exit", "0")
    # Far below the wait for a first viewer (15 s) that a run started for a TUI allows.
    assert run.process.wait(10) == 0
    run.wait_gone()
    assert (run.status()["state"], run.status()["exitcode"]) == ("finished", 0)


def test_on_failure_runs_once_for_a_failed_run_and_never_for_a_clean_one(
        daemons: Daemons, tmp_path: Path) -> None:
    out = tmp_path / "hook.out"
    hook = f"echo $RANKVISOR_ROOT_CAUSE_RANK $RANKVISOR_EXITCODE >> {out}"
    # Rank 1 fails after a second: had it failed at once, the teardown could stop rank 0
    # before rank 0 wrote its pids, which the fixture waits for.
    failed = daemons.start("--exit", "3", "--after", "1", "--only-rank", "1",
                           on_failure=hook, term_timeout=1.0)
    assert failed.process.wait(START_S) == 1
    assert out.read_text() == "1 1\n"  # the hook ended before the supervisor did

    clean_out = tmp_path / "clean.out"
    clean = daemons.start("--exit", "0", on_failure=f"echo ran >> {clean_out}")
    assert clean.process.wait(START_S) == 0
    assert not clean_out.exists()


# -- the record of a finished run ----------------------------------------------------------


def fold(info: Any, events: list[Event]) -> Any:
    from rankvisor.tui.model import RunView

    view = RunView(info)
    for event in events:
        view.apply(event)
    return view


def ranks_of(view: Any) -> list[tuple[int, RankState, int | None, int]]:
    return [(r.rank, r.state, r.exitcode, r.restart_count) for r in view.ranks]


def test_a_finished_run_replays_from_its_record_as_it_was_watched_live(
        daemons: Daemons, viewers: list[RemoteHandle], tmp_path: Path) -> None:
    go = tmp_path / "go"
    run = daemons.start("--raise", "boom in rank 1", "--only-rank", "1", "--wait-file",
                        str(go), "--print", "3", expect_viewer=True, term_timeout=1.0)
    live = RemoteHandle.connect(run.started.socket, name="test")
    viewers.append(live)
    seen: list[Event] = []
    first, _unsubscribe = live.watch(seen.append)
    assert live.execute(RestartRank(0)).ok  # an earlier incarnation in the record
    run.pids(0, 1)
    go.touch()
    assert live.wait(START_S) is not None
    live_view = fold(first, list(seen))
    live.detach()
    assert run.process.wait(START_S) == 1

    recorded = RecordedRun.open(run.run_dir)
    assert recorded.finished_cleanly
    replayed: list[Event] = []
    info, _ = recorded.watch(replayed.append)
    view = fold(info, replayed)
    assert ranks_of(view) == ranks_of(live_view)
    assert [r.restart_count for r in view.ranks] == [1, 0]
    assert view.root_cause() == live_view.root_cause() == 1
    assert view.exit_code() == live_view.exit_code() == 1
    (failure,) = view.failures()
    assert failure.rank == 1 and "boom in rank 1" in str(failure.failure.message)
    assert len(view.ranks[0].earlier) == len(live_view.ranks[0].earlier) == 1
    assert "line 2 from rank 1" in view.ranks[1].buffer.tail(20, "stdout")
    assert not recorded.execute(RestartRank(0)).ok


# -- upgrade safety ------------------------------------------------------------------------


def test_preload_imports_every_module_of_the_engine() -> None:
    code = (
        "import json, sys\n"
        "from rankvisor.engine.entry.daemon import preload\n"
        "preload()\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('rankvisor.engine'))))\n"
    )
    out = subprocess.run([PYTHON, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=ROOT, timeout=120)
    loaded = set(json.loads(out.stdout))
    files = {
        "rankvisor." + ".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(
            ".__init__")
        for p in (ROOT / "engine").rglob("*.py")
    }
    # The multi-node modules import torch: a multi-node run's supervisor imports them at its
    # start (``_main_cluster``), before its ranks run; a one-node run never needs them.
    files = {m for m in files if not m.endswith(("__main__", ".cluster_run"))
             and not m.startswith("rankvisor.engine.cluster.")}
    assert files - loaded == set()


def test_a_supervisor_goes_on_after_its_package_files_are_removed(
        daemons: Daemons, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    copy = tmp_path / "pkg"
    for name in ("engine", "tui"):  # laid out as installed: pkg/rankvisor/{engine,tui}
        shutil.copytree(ROOT / name, copy / "rankvisor" / name,
                        ignore=shutil.ignore_patterns("__pycache__"))
    pid_dir = tmp_path / "pids"
    pid_dir.mkdir()
    config = daemons.config(nprocs=2, pid_dir=pid_dir, term_timeout=1.0)
    starter = (
        "import json, pickle, sys\n"
        "from rankvisor.engine.entry.daemon import Request\n"
        "from rankvisor.engine.entry.spawn import start_supervisor\n"
        "s = start_supervisor(Request(pickle.loads(sys.stdin.buffer.read()),"
        " expect_viewer=False))\n"
        "print(json.dumps([s.pid, s.socket, s.run_dir, s.run_id]))\n"
    )
    import pickle

    out = subprocess.run([PYTHON, "-c", starter], input=pickle.dumps(config),
                         capture_output=True, check=True, cwd=tmp_path, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(copy)})
    pid, sock, run_dir, run_id = json.loads(out.stdout)
    started = Started(pid, sock, run_dir, run_id,
                      subprocess.Popen(["true"]))  # a placeholder: not our child
    started.process.wait()
    run = daemons.adopt(started, pid_dir, 2)
    assert run.process is None
    with open(f"/proc/{pid}/environ", "rb") as f:
        assert f"PYTHONPATH={copy}".encode() in f.read().split(b"\0")  # it runs the copy
    run.pids(0), run.pids(1)
    run.wait_status(running)

    shutil.rmtree(copy / "rankvisor" / "engine")
    code, out_text, err = ctl(capsys, "restart", run_dir, "0")
    assert code == 0, err
    new = run.pids(0, 1)[0]
    status = run.wait_status(lambda s: s["ranks"][0]["pid"] == new
                             and s["ranks"][0]["state"] == "running")
    assert status["ranks"][0]["restart_count"] == 1
    code, out_text, err = ctl(capsys, "stop", run_dir)
    assert code == 0, err
    run.wait_gone()
    assert run.status()["state"] == "finished"
    log = (Path(run_dir) / "supervisor.log").read_text()
    assert "Traceback" not in log, log
