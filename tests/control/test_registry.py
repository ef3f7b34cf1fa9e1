"""The registry: a private state dir, entries that survive garbage, and how RUN resolves."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from rankvisor.engine.control import registry
from rankvisor.engine.control.registry import NoSuchRun, StateDirUnsafe, resolve
from rankvisor.engine.states import RankState

from tests.control.runs import Supervisors, failed_finish, make_run

pytestmark = pytest.mark.processes


def test_the_state_dir_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch,
                                                  tmp_path: Path) -> None:
    monkeypatch.delenv("RANKVISOR_STATE_DIR")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    assert registry.state_dir() == str(tmp_path / "xdg" / "rankvisor")
    monkeypatch.delenv("XDG_STATE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert registry.state_dir() == str(tmp_path / "home" / ".local" / "state" / "rankvisor")


def test_socket_paths_are_short_fresh_and_in_a_private_dir(state_dir: Path) -> None:
    paths = {registry.new_socket_path() for _ in range(20)}
    assert len(paths) == 20
    for p in paths:
        assert os.path.dirname(p) == str(state_dir / "s")
        assert len(os.path.basename(p)) == len("0123abcd.sock")
    for d in (state_dir, state_dir / "s", state_dir / "runs"):
        assert stat.S_IMODE(os.stat(d).st_mode) == 0o700
    assert registry.state_dir_problem() is None


def test_a_state_dir_open_to_others_is_refused_with_the_fix(state_dir: Path) -> None:
    state_dir.mkdir(mode=0o700)
    os.chmod(state_dir, 0o755)
    problem = registry.state_dir_problem()
    assert problem is not None and "\n" not in problem
    assert "open to others" in problem and f"chmod 700 {state_dir}" in problem
    with pytest.raises(StateDirUnsafe, match="chmod 700"):
        registry.new_socket_path()
    assert not (state_dir / "s").exists()  # nothing is made inside it
    os.chmod(state_dir, 0o700)
    (state_dir / "s").mkdir(mode=0o777)
    os.chmod(state_dir / "s", 0o777)
    with pytest.raises(StateDirUnsafe, match="open to others"):
        registry.new_socket_path()


def test_a_state_dir_path_too_long_for_a_socket_is_refused(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("RANKVISOR_STATE_DIR", str(tmp_path / ("d" * 100)))
    with pytest.raises(StateDirUnsafe, match="shorter"):
        registry.new_socket_path()


def test_register_entries_unregister(supervisors: Supervisors, tmp_path: Path) -> None:
    proc = supervisors.live()
    socket = registry.new_socket_path()
    entry = registry.register("job", str(tmp_path / "job_1"), socket, supervisor_pid=proc.pid,
                              started=5.0, mode="headless")
    assert entry.key == os.path.basename(socket)[:8]
    assert entry.supervisor_start is not None and entry.supervisor_alive()
    assert registry.entries() == [entry]
    data = json.loads((Path(registry.runs_dir()) / f"{entry.key}.json").read_text())
    assert set(data) == {"run_id", "run_dir", "socket", "supervisor_pid", "supervisor_start",
                         "started", "mode"}
    assert registry.unregister(entry) and registry.entries() == []
    assert not registry.unregister(entry)


def test_torn_and_foreign_entry_files_are_skipped(supervisors: Supervisors,
                                                  tmp_path: Path) -> None:
    good = make_run(tmp_path, "good", pid=supervisors.live().pid)
    runs = Path(registry.runs_dir())
    (runs / "torn.json").write_bytes(b'{"run_id": "x", "run_d')
    (runs / "list.json").write_text("[1, 2]")
    (runs / "types.json").write_text(json.dumps(
        {"run_id": 3, "run_dir": "/", "socket": "", "supervisor_pid": 1, "started": 0}))
    (runs / "binary.json").write_bytes(b"\xff\x00\xfe")
    (runs / "dir.json").mkdir()
    (runs / "other.txt").write_text("hello")
    os.mkfifo(runs / "fifo.json")  # must not hang the reader
    os.symlink(runs / f"{good.key}.json", runs / "link.json")
    assert registry.entries() == [good]


def test_entries_are_newest_first_and_a_reused_pid_reads_stale(
        supervisors: Supervisors, tmp_path: Path) -> None:
    proc = supervisors.live()
    older = make_run(tmp_path, "a", pid=proc.pid, started=100.0)
    newer = make_run(tmp_path, "b", pid=proc.pid, started=200.0)
    assert registry.entries() == [newer, older]
    reused = make_run(tmp_path, "c", pid=proc.pid, start=1, started=300.0)
    assert registry.entry_state(reused)[0] == "stale"
    assert registry.entry_state(newer)[0] == "running"


def test_resolve_with_nothing_given(supervisors: Supervisors, tmp_path: Path) -> None:
    with pytest.raises(NoSuchRun, match="rankvisor ls"):
        resolve(None, running_only=False)
    live = supervisors.live()
    running = make_run(tmp_path, "run", pid=live.pid, started=100.0)
    pid, start = supervisors.dead()
    stale = make_run(tmp_path, "stale", pid=pid, start=start, started=200.0)
    done = make_run(tmp_path, "done", pid=pid, start=start, started=300.0,
                    states=[RankState.SUCCEEDED], finished=failed_finish(0, 1, 1), exitcode=1)
    assert resolve(None, running_only=False) == done  # the newest of any
    assert resolve(None, running_only=True) == running  # the newest running
    registry.unregister(running)
    with pytest.raises(NoSuchRun, match="no running run.*2 finished or stale"):
        resolve(None, running_only=True)
    assert stale in registry.entries()


def test_resolve_a_run_id_takes_the_newest_and_a_running_one_for_commands(
        supervisors: Supervisors, tmp_path: Path) -> None:
    live = supervisors.live()
    pid, start = supervisors.dead()
    node0 = make_run(tmp_path, "job", pid=live.pid, started=100.0)
    node1 = make_run(tmp_path, "job", pid=pid, start=start, started=200.0)
    make_run(tmp_path, "other", pid=live.pid, started=300.0)
    assert resolve("job", running_only=False) == node1
    assert resolve("job", running_only=True) == node0
    assert resolve(os.path.basename(node0.run_dir), running_only=False) == node0
    with pytest.raises(NoSuchRun, match="no run 'nope'.*rankvisor ls"):
        resolve("nope", running_only=False)


def test_resolve_a_path(supervisors: Supervisors, tmp_path: Path,
                        monkeypatch: pytest.MonkeyPatch) -> None:
    live = supervisors.live()
    logs = tmp_path / "logs"
    older = make_run(logs, "job", pid=live.pid, started=100.0)
    newer = make_run(logs, "job", pid=live.pid, started=200.0)
    assert resolve(older.run_dir, running_only=True) == older  # a run dir
    assert resolve(str(logs), running_only=False) == newer  # a log dir: its newest
    monkeypatch.chdir(logs)
    assert resolve(os.path.basename(older.run_dir), running_only=False) == older
    with pytest.raises(NoSuchRun, match="no status.json"):
        resolve(str(tmp_path / "logs" / os.path.basename(older.run_dir) / "attempt_0"),
                running_only=False)


def test_a_run_dir_without_an_entry_still_resolves_by_its_path(
        supervisors: Supervisors, tmp_path: Path) -> None:
    live = supervisors.live()
    entry = make_run(tmp_path, "orphan", pid=live.pid, started=123.0, register=False)
    assert registry.entries() == []
    got = resolve(entry.run_dir, running_only=True)
    assert (got.run_id, got.run_dir, got.socket, got.supervisor_pid, got.started, got.key) == (
        "orphan", entry.run_dir, entry.socket, live.pid, 123.0, "")
    assert got.supervisor_alive()
    with pytest.raises(NoSuchRun):
        resolve("orphan", running_only=False)  # an id is looked up in the registry only
