"""``rankvisor ls / status / logs / wait / rm``: real status.json files, real processes for
the supervisors' liveness (a live ``sleep``; a killed one for a stale run), exit codes and the
JSON shapes. ``stop`` / ``terminate`` / ``signal`` / ``restart`` are only checked here up to
the point where they would connect to a supervisor."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from rankvisor.engine.control import registry
from rankvisor.engine.control.status import read_status, write_status
from rankvisor.engine.rundir.arrival import ArrivalWriter, arrival_path
from rankvisor.engine.states import RankState
from rankvisor.tui.cli import main
from rankvisor.tui.cli.command import EXIT_NO_RUN, EXIT_REFUSED, EXIT_STALE, EXIT_USAGE
from rankvisor.tui.cli.ranks import parse_ranks
from rankvisor.tui.cli.subcommands import SUBCOMMANDS

from tests.conftest import wait_until
from tests.control.runs import Supervisors, failed_finish, make_run, state_dir, supervisors

pytestmark = pytest.mark.processes

__all__ = ["state_dir", "supervisors"]  # fixtures, used by name

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _private_state_dir(state_dir: Path) -> Path:
    return state_dir


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def finish(run_dir: str, exitcode: int) -> None:
    status = read_status(run_dir)
    assert status is not None
    status.update(state="finished", finished=True, exitcode=exitcode)
    for r in status["ranks"]:
        r.update(state="succeeded", pid=None, exitcode=0)
    write_status(run_dir, status)


def cli(*argv: str, **kw: Any) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-m", "rankvisor.tui.cli", *argv], env=env, **kw)


def write_log(run_dir: str, rank: int, text: str, stream: str = "stdout",
              sub: str = "") -> Path:
    d = Path(run_dir) / "attempt_0" / str(rank) / sub
    d.mkdir(parents=True, exist_ok=True)
    path = d / f"{stream}.log"
    with path.open("a") as f:
        f.write(text)
    return path


def test_every_command_is_a_bare_word_and_listed_in_help(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "-h")
    assert code == 0
    for sub in SUBCOMMANDS:  # the one table: the help lists each row, with its line
        assert f"\n  {sub.name:<10} {sub.help}\n" in out + "\n"
    code, out, _ = run(capsys, "ls", "-h")
    assert code == 0 and "--json" in out
    fronts = ("run", "demo", "serve", "attach")  # their -h says more than one line
    for sub in (s for s in SUBCOMMANDS if s.name not in fronts):
        code, out, _ = run(capsys, sub.name, "-h")
        assert code == 0 and sub.help in " ".join(out.split()), sub.name  # its description


def test_ls_lists_running_finished_and_stale_runs(
        capsys: pytest.CaptureFixture[str], supervisors: Supervisors, tmp_path: Path) -> None:
    code, out, _ = run(capsys, "ls")
    assert code == 0 and "no runs" in out
    assert run(capsys, "ls", "--json")[:2] == (0, "[]\n")
    live = supervisors.live()
    running = make_run(tmp_path, "alive", pid=live.pid, started=100.0,
                       states=[RankState.RUNNING, RankState.SUCCEEDED, RankState.RUNNING])
    pid, start = supervisors.dead()
    stale = make_run(tmp_path, "gone", pid=pid, start=start, started=200.0)
    done = make_run(tmp_path, "done", pid=pid, start=start, started=300.0,
                    states=[RankState.FAILED], finished=failed_finish(0, 2, 1), exitcode=1)
    code, out, _ = run(capsys, "ls", "--json")
    rows = json.loads(out)
    assert code == 0
    assert [(r["run_id"], r["state"], r["ranks_running"], r["ranks_total"]) for r in rows] == [
        ("done", "finished", 0, 1), ("gone", "stale", 0, 2), ("alive", "running", 2, 3)]
    assert set(rows[0]) == {"run_id", "state", "ranks_running", "ranks_total", "attempt",
                            "exitcode", "started", "ended", "command", "cwd", "run_dir",
                            "socket", "supervisor_pid", "mode"}
    assert [r["run_dir"] for r in rows] == [done.run_dir, stale.run_dir, running.run_dir]
    assert rows[0]["exitcode"] == 1 and rows[2]["exitcode"] is None
    code, out, _ = run(capsys, "ls")
    lines = out.splitlines()
    assert lines[0].split() == ["STARTED", "DURATION", "RESULT", "COMMAND", "RUN", "ID", "RUN",
                                "DIR"]
    assert lines[1].split()[3:5] == ["failed", "(exit"] and "gone" in lines[2].split()
    assert lines[3].split()[3:5] == ["running", "2/3"]
    assert lines[3].endswith(running.run_dir)


def _typed(run_dir: str, command: list[str], ended: float | None = None) -> None:
    status = read_status(run_dir)
    assert status is not None
    status["command"] = command
    if ended is not None:
        status["updated"] = ended
    write_status(run_dir, status)


def test_ls_shows_the_command_result_and_duration_newest_first_and_filters(
        capsys: pytest.CaptureFixture[str], supervisors: Supervisors, tmp_path: Path) -> None:
    """Issue 22: ``ls`` was a column of run ids, all "finished", nothing else."""
    pid, start = supervisors.dead()
    day = time.time() - 10 * 86400, time.time() - 3 * 3600  # ten days ago, three hours ago
    ok = make_run(tmp_path, "ok", pid=pid, start=start, started=day[0],
                  states=[RankState.SUCCEEDED], finished=failed_finish(0, 1, 1), exitcode=0)
    _typed(ok.run_dir, ["rankvisor", "run", "--nproc-per-node", "4", "--log-dir", "/tmp/x",
                        "train.py", "--lr", "0.1"], ended=day[0] + 95)
    bad = make_run(tmp_path, "bad", pid=pid, start=start, started=day[1],
                   states=[RankState.FAILED], finished=failed_finish(0, 2, 1), exitcode=1)
    _typed(bad.run_dir, ["/usr/bin/python3", "-u", "-m", "pkg.train", "--x"], ended=day[1] + 12)
    live = make_run(tmp_path, "live", pid=supervisors.live().pid)
    _typed(live.run_dir, ["rankvisor", "demo"])
    code, out, _ = run(capsys, "ls")
    lines = out.splitlines()
    assert code == 0 and len(lines) == 4
    assert "demo" in lines[1] and "running 2/2" in lines[1]  # newest first
    assert "12s" in lines[2] and "failed (exit 1)" in lines[2] and "-m pkg.train --x" in lines[2]
    assert "1m35s" in lines[3] and "  ok  " in lines[3] and "train.py --lr 0.1" in lines[3]
    assert "--nproc-per-node" not in out and "/tmp/x" not in out
    assert [line.split()[-1] for line in run(capsys, "ls", "--running")[1].splitlines()[1:]] == [
        live.run_dir]
    assert [line.split()[-1] for line in run(capsys, "ls", "--failed")[1].splitlines()[1:]] == [
        bad.run_dir]
    # rm --finished prunes every run that is not running; --older-than only the old ones.
    assert run(capsys, "rm", "--finished", "--older-than", "7x")[0] == EXIT_USAGE
    code, out, _ = run(capsys, "rm", "--finished", "--older-than", "7d")
    assert code == 0 and {e.run_id for e in registry.entries()} == {"bad", "live"}
    assert run(capsys, "rm", "--finished", "--older-than", "4h")[0] == 0
    assert {e.run_id for e in registry.entries()} == {"bad", "live"}
    assert run(capsys, "rm", "--finished")[0] == 0
    assert [e.run_id for e in registry.entries()] == ["live"]


def test_ls_warns_about_a_state_dir_open_to_others(
        capsys: pytest.CaptureFixture[str], state_dir: Path) -> None:
    state_dir.mkdir(mode=0o700)
    os.chmod(state_dir, 0o755)
    code, _, err = run(capsys, "ls")
    assert code == 0 and f"chmod 700 {state_dir}" in err and len(err.splitlines()) == 1


def test_status_json_recomputes_the_state(
        capsys: pytest.CaptureFixture[str], supervisors: Supervisors, tmp_path: Path) -> None:
    live = supervisors.live()
    entry = make_run(tmp_path, "job", pid=live.pid)
    code, out, _ = run(capsys, "status", "--json")
    s = json.loads(out)
    assert code == 0 and s["state"] == "running" and s["run_dir"] == entry.run_dir
    assert {"schema", "run_id", "run_dir", "socket", "supervisor_pid", "state", "attempt",
            "finished", "exitcode", "ranks", "root_cause"} <= set(s)
    assert [r["state"] for r in s["ranks"]] == ["running", "running"]
    live.kill()
    live.wait()
    code, out, _ = run(capsys, "status", "job", "--json")
    assert code == EXIT_STALE and json.loads(out)["state"] == "stale"
    # The file itself still says running: the reader decides.
    assert read_status(entry.run_dir)["state"] == "running"  # type: ignore[index]


def test_status_text_shows_ranks_and_the_root_cause(
        capsys: pytest.CaptureFixture[str], supervisors: Supervisors, tmp_path: Path) -> None:
    pid, start = supervisors.dead()
    make_run(tmp_path, "job", pid=pid, start=start, exitcode=1,
             states=[RankState.SUCCEEDED, RankState.FAILED], finished=failed_finish(1, 7, 2))
    code, out, _ = run(capsys, "status", "job")
    assert code == 0
    assert out.startswith("run job  finished  exit code 1")
    assert "root cause  rank 1 (exit code 7)" in out
    assert any(line.split()[:4] == ["1", "-", "failed", "7"] for line in out.splitlines())


def test_a_run_nobody_knows_exits_3(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["status"], ["status", "nope"], ["logs", "nope"], ["wait", "nope"],
                 ["rm", "nope"], ["stop"], ["terminate", "nope", "0"],
                 ["signal", "nope", "all", "TERM"], ["restart", "nope", "all"]):
        code, _, err = run(capsys, *argv)
        assert code == EXIT_NO_RUN, argv
        assert "rankvisor ls" in err and len(err.splitlines()) == 1, argv


def test_usage_errors_exit_2_in_one_line(capsys: pytest.CaptureFixture[str],
                                         supervisors: Supervisors, tmp_path: Path) -> None:
    make_run(tmp_path, "job", pid=supervisors.live().pid)
    for argv in (["ls", "--nope"], ["rm"], ["terminate", "job"], ["terminate", "job", "x"],
                 ["terminate", "job", "3-1"], ["signal", "job", "0", "NOPE"],
                 ["signal", "job", "0", "0"], ["restart", "job", "0,1"],
                 ["stop", "--timeout", "-1"], ["terminate", "job", "5"],
                 ["logs", "job", "--rank", "9"], ["restart", "job", "2"]):
        code, out, err = run(capsys, *argv)
        assert code == EXIT_USAGE, argv
        assert out == "" and len(err.splitlines()) == 1 and "error:" in err, (argv, err)


def test_parse_ranks() -> None:
    assert parse_ranks("2") == (2,)
    assert parse_ranks("0,2") == (0, 2)
    assert parse_ranks("0-3") == (0, 1, 2, 3)
    assert parse_ranks("1, 4-5,1") == (1, 4, 5)
    assert parse_ranks("ALL") is None
    for bad in ("", "a", "-1", "3-1", "1-", "0,,1"):
        with pytest.raises(ValueError):
            parse_ranks(bad)
    with pytest.raises(ValueError, match="'all' is not accepted"):
        parse_ranks("all", allow_all=False)


def test_commands_on_a_stale_or_finished_run(
        capsys: pytest.CaptureFixture[str], supervisors: Supervisors, tmp_path: Path) -> None:
    pid, start = supervisors.dead()
    stale = make_run(tmp_path, "gone", pid=pid, start=start)
    for argv in (["stop", "gone"], ["terminate", "gone", "0"], ["signal", "gone", "1", "USR1"],
                 ["restart", "gone", "all"], ["stop", stale.run_dir]):
        code, _, err = run(capsys, *argv)
        assert code == EXIT_STALE, argv
        assert "is stale" in err and len(err.splitlines()) == 1
    make_run(tmp_path, "done", pid=pid, start=start, states=[RankState.SUCCEEDED],
             finished=failed_finish(0, 1, 1), exitcode=1)
    code, out, _ = run(capsys, "stop", "done")
    assert code == 0 and "already finished" in out
    code, _, err = run(capsys, "signal", "done", "0", "TERM")
    assert code == EXIT_REFUSED and "has finished" in err
    # With nothing given, stop looks for a running run only.
    code, _, err = run(capsys, "stop")
    assert code == EXIT_NO_RUN and "no running run" in err


def test_logs_prints_the_current_incarnation(
        capsys: pytest.CaptureFixture[str], supervisors: Supervisors, tmp_path: Path) -> None:
    entry = make_run(tmp_path, "job", pid=supervisors.live().pid)
    code, _, err = run(capsys, "logs", "job")
    assert code == EXIT_REFUSED and "no stdout or stderr file" in err
    write_log(entry.run_dir, 0, "zero\n")
    write_log(entry.run_dir, 1, "one out\n")
    write_log(entry.run_dir, 1, "one err\n", "stderr")
    assert run(capsys, "logs", "job")[:2] == (0, "zero\n")
    assert run(capsys, "logs", "job", "--rank", "1", "--stdout")[:2] == (0, "one out\n")
    assert run(capsys, "logs", entry.run_dir, "--rank", "1", "--stderr")[:2] == (0, "one err\n")
    write_log(entry.run_dir, 1, "again\n", sub="restart_1")
    write_log(entry.run_dir, 1, "and again\n", sub="restart_2")
    assert run(capsys, "logs", "job", "--rank", "1")[:2] == (0, "and again\n")


def test_logs_prints_both_streams_in_the_order_they_arrived(
        capsys: pytest.CaptureFixture[str], supervisors: Supervisors, tmp_path: Path) -> None:
    """Issue 22: logging and tqdm write to stderr; ``logs`` printed only stdout (nothing)."""
    entry = make_run(tmp_path, "job", pid=supervisors.live().pid)
    out = write_log(entry.run_dir, 0, "out 1\nout 2\n")
    err = write_log(entry.run_dir, 0, "INFO err 1\n", "stderr")
    index = ArrivalWriter(arrival_path(str(out), str(err)))
    index.note(0, 1)  # the pump's records: out 1, then err 1, then out 2
    index.note(1, 1)
    index.note(0, 2)
    index.flush()
    assert run(capsys, "logs", "job")[:2] == (0, "out 1\nINFO err 1\nout 2\n")
    assert run(capsys, "logs", "job", "--stderr")[:2] == (0, "INFO err 1\n")
    assert run(capsys, "logs", "job", "--stdout")[:2] == (0, "out 1\nout 2\n")
    # Lines no record covers yet, and a bar's unfinished line, still print (at the end).
    write_log(entry.run_dir, 0, "INFO err 2\n 45%|####  | 45/100", "stderr")
    late = "out 1\nINFO err 1\nout 2\nINFO err 2\n 45%|####  | 45/100"
    assert run(capsys, "logs", "job")[1] == late
    index.close()


def test_logs_on_a_terminal_shows_the_last_frame_of_a_progress_bar(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
        supervisors: Supervisors, tmp_path: Path) -> None:
    """Issue 34: every tqdm frame was printed, joined by a visible carriage-return mark;
    a terminal gets the last frame (as the panes show it), ``--raw`` every frame, a pipe
    the bytes."""
    entry = make_run(tmp_path, "job", pid=supervisors.live().pid)
    bars = "\r 10%|#    | 1/10\r 50%|##   | 5/10\r100%|#####| 10/10\nafter\r\n"
    write_log(entry.run_dir, 0, "INFO start\n" + bars + " 20%|#  | 2/10\r 30%|## | 3/10",
              "stderr")
    pipe = run(capsys, "logs", "job", "--stderr")[1]
    assert pipe == "INFO start\n" + bars + " 20%|#  | 2/10\r 30%|## | 3/10"
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    shown = run(capsys, "logs", "job", "--stderr")[1]
    assert shown == "INFO start\n100%|#####| 10/10\nafter\n 30%|## | 3/10\n"
    assert "\u240d" not in shown
    raw = run(capsys, "logs", "job", "--stderr", "--raw")[1]
    assert raw.count("\u240d") == 5 and "1/10" in raw
    assert run(capsys, "logs", "job")[1] == shown  # both streams (no stdout file here)


def test_logs_follow_stops_once_the_run_finished_and_the_file_is_drained(
        supervisors: Supervisors, tmp_path: Path) -> None:
    entry = make_run(tmp_path, "job", pid=supervisors.live().pid)
    log = write_log(entry.run_dir, 0, "first\n")
    out = tmp_path / "out"
    err = tmp_path / "err"
    with out.open("wb") as o, err.open("wb") as e:
        proc = cli("logs", "job", "-f", stdout=o, stderr=e)
    try:
        wait_until(lambda: out.read_bytes() == b"first\n", timeout=30)
        with log.open("a") as f:
            f.write("second\npartial")
        wait_until(lambda: out.read_bytes() == b"first\nsecond\npartial", timeout=30)
        # The rank is restarted alone: logs moves on to the new incarnation's file.
        write_log(entry.run_dir, 0, "reborn\n", sub="restart_1")
        wait_until(lambda: out.read_bytes().endswith(b"reborn\n"), timeout=30)
        # The last bytes land just before the run is marked finished: they are printed.
        write_log(entry.run_dir, 0, "last\n", sub="restart_1")
        finish(entry.run_dir, 0)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert out.read_bytes() == b"first\nsecond\npartialreborn\nlast\n"
    assert "restart_1" in err.read_text()


def test_logs_follow_exits_4_when_the_supervisor_dies(
        supervisors: Supervisors, tmp_path: Path) -> None:
    live = supervisors.live()
    entry = make_run(tmp_path, "job", pid=live.pid)
    write_log(entry.run_dir, 0, "x\n")
    proc = cli("logs", "job", "-f", stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    live.kill()
    live.wait()
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == EXIT_STALE
    assert out == b"x\n" and b"is stale" in err


def test_wait_exits_with_the_runs_exit_status(
        supervisors: Supervisors, tmp_path: Path) -> None:
    entry = make_run(tmp_path, "job", pid=supervisors.live().pid)
    proc = cli("wait", "job", stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        # It blocks while the run runs: write a running status again, still no exit.
        write_status(entry.run_dir, read_status(entry.run_dir))  # type: ignore[arg-type]
        assert proc.poll() is None
        finish(entry.run_dir, 3)
        assert proc.wait(timeout=30) == 3
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_wait_on_a_finished_run_returns_at_once_and_a_stale_one_exits_4(
        capsys: pytest.CaptureFixture[str], supervisors: Supervisors, tmp_path: Path) -> None:
    pid, start = supervisors.dead()
    make_run(tmp_path, "done", pid=pid, start=start, states=[RankState.SUCCEEDED],
             finished=failed_finish(0, 1, 1), exitcode=1)
    assert run(capsys, "wait", "done")[0] == 1
    make_run(tmp_path, "gone", pid=pid, start=start)
    code, _, err = run(capsys, "wait", "gone")
    assert code == EXIT_STALE and "is stale" in err
    live = supervisors.live()
    make_run(tmp_path, "dies", pid=live.pid)
    proc = cli("wait", "dies", stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    live.kill()
    live.wait()
    _, err_bytes = proc.communicate(timeout=30)
    assert proc.returncode == EXIT_STALE and b"is stale" in err_bytes


def test_rm_refuses_a_running_run_and_removes_a_finished_one(
        capsys: pytest.CaptureFixture[str], supervisors: Supervisors, tmp_path: Path) -> None:
    live = supervisors.live()
    running = make_run(tmp_path, "job", pid=live.pid)
    code, _, err = run(capsys, "rm", "job")
    assert code == EXIT_REFUSED and "is running" in err and "rankvisor stop" in err
    assert registry.entries() == [running]
    pid, start = supervisors.dead()
    done = make_run(tmp_path, "done", pid=pid, start=start, states=[RankState.SUCCEEDED],
                    finished=failed_finish(0, 1, 1), exitcode=1)
    Path(done.socket).touch()  # left behind by a supervisor that was killed
    code, out, _ = run(capsys, "rm", "done")
    assert code == 0 and "removed its entry" in out
    assert registry.entries() == [running] and not Path(done.socket).exists()
    assert Path(done.run_dir).is_dir()  # the logs stay
    # By its path the run still resolves; --logs removes the run dir.
    code, out, _ = run(capsys, "rm", done.run_dir, "--logs")
    assert code == 0 and "removed its run directory" in out
    assert not Path(done.run_dir).exists()
    stale = make_run(tmp_path, "gone", pid=pid, start=start)
    assert run(capsys, "rm", "gone", "--logs")[0] == 0
    assert not Path(stale.run_dir).exists() and registry.entries() == [running]
