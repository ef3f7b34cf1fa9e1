"""``rankvisor serve``: loopback by default, a door (origin, token, viewer cap), session
processes that never import from the user's working directory, and what each session runs:
a viewer of a run (``attach RUN_DIR``, read-only unless ``--control``) or a run of its own.

The real server, its sessions and what SIGKILL leaves behind are tested in
tests/reliability/test_serve_door.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest
from rankvisor.engine.control.server import READ_ONLY_REFUSAL
from rankvisor.engine.handle import TerminateRanks
from rankvisor.engine.states import RankState
from rankvisor.tui.cli import attach, serve

from tests.conftest import wait_until
from tests.control.runs import Supervisors, failed_finish, make_run
from tests.tui.hosted_run import HostedRun, hosted_run

pytestmark = pytest.mark.processes

ROOT = Path(__file__).resolve().parents[2]


def test_session_command_execs_the_tui_module_with_the_job() -> None:
    command = serve.session_command(
        ["run", "--nproc-per-node", "2", "train.py", "--lr", "1e-3"], serve_pid=123
    )
    # exec: the shell becomes the app, so the app is serve's child and dies with serve.
    assert command.startswith("exec ")
    assert ("rankvisor.tui.cli.serve --session --serve-pid 123"
            " run --nproc-per-node 2 train.py --lr 1e-3") in (
        command
    )
    if sys.version_info >= (3, 11):
        assert " -P -m rankvisor.tui.cli.serve " in command


@pytest.mark.parametrize("safe_path", [True, False], ids=["dash-P", "dash-c"])
def test_python_children_never_import_from_the_working_directory(
    tmp_path: Path, safe_path: bool
) -> None:
    if safe_path and sys.version_info < (3, 11):
        pytest.skip("-P is new in Python 3.11")
    marker = tmp_path / "imported"
    # Since the one installed name, only a ``rankvisor`` of the working directory can shadow
    # ours; a project's ``engine.py`` and ``tui.py`` are beside the point, and kept.
    for name in ("rankvisor.py", "engine.py", "tui.py"):
        (tmp_path / name).write_text(
            f"open({str(marker)!r}, 'a').write(__name__)\nraise RuntimeError('hostile')\n"
        )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}  # PYTHONPATH still applies

    def run(argv: list[str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*argv, "--help"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
        )

    # The hostile directory bites a plain ``python -m``...
    plain = run([sys.executable, "-m", "rankvisor.tui.cli.serve"])
    assert plain.returncode != 0 and marker.read_text() == "rankvisor"
    marker.unlink()
    # ...and not the way rankvisor starts its own Python children.
    ours = run(serve.python_module_argv("rankvisor.tui.cli.serve", safe_path=safe_path))
    assert ours.returncode == 0, ours.stderr
    assert "usage: rankvisor serve" in ours.stdout and not marker.exists()


def test_default_host_is_loopback() -> None:
    args = serve._parser().parse_args([])
    assert args.host == "127.0.0.1" and serve._is_loopback(args.host)
    assert args.max_viewers == serve.DEFAULT_MAX_VIEWERS
    assert serve._is_loopback("localhost") and serve._is_loopback("::1")
    assert not serve._is_loopback("0.0.0.0") and not serve._is_loopback("example.org")
    assert serve._default_public_url("::1", 8000) == "http://[::1]:8000"


@pytest.mark.parametrize("value", ["0", "-1", "two"])
def test_max_viewers_is_a_positive_count(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        serve._parser().parse_args(["--max-viewers", value])
    assert exit_info.value.code == 2 and "--max-viewers" in capsys.readouterr().err


def test_public_url_must_be_http(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("textual_serve")
    with pytest.raises(SystemExit):
        serve.main(["--public-url", "ftp://example.org"])
    assert "--public-url must be an http" in capsys.readouterr().err


def test_origin_of_normalises_what_browsers_send() -> None:
    door = pytest.importorskip("rankvisor.tui.serve_door")
    assert door.origin_of("http://127.0.0.1:8000") == ("http", "127.0.0.1", 8000)
    assert door.origin_of("https://Example.ORG/rv/") == ("https", "example.org", 443)
    assert door.origin_of("http://[::1]:80") == door.origin_of("http://[::1]")
    for bad in ("null", "", "file:///x", "http://h:99999", "http://h:x", "ws://h:1"):
        assert door.origin_of(bad) is None, bad


def test_door_checks(tmp_path: Path) -> None:
    door = pytest.importorskip("rankvisor.tui.serve_door")
    server = door.DoorServer(
        "true", host="127.0.0.1", port=8000, public_url="http://127.0.0.1:8000",
        token="s3cret", max_viewers=2,
    )
    assert server.origin_allowed("http://127.0.0.1:8000")
    for origin in (None, "null", "http://127.0.0.1:8001", "http://localhost:8000",
                   "https://127.0.0.1:8000", "http://evil.example.com"):
        assert not server.origin_allowed(origin), origin
    assert server.token_matches("s3cret")
    for token in (None, "", "s3cre", "s3cret ", "S3CRET", "s3crét"):
        assert not server.token_matches(token), token
    with pytest.raises(ValueError):
        door.DoorServer("true", host="h", port=1, public_url="ftp://h", token="t", max_viewers=1)


@pytest.fixture
def private_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A state directory of this test's own: only the runs it makes are there."""
    path = tmp_path / "state"
    monkeypatch.setenv("RANKVISOR_STATE_DIR", str(path))
    return path


@pytest.fixture
def supervisors() -> Iterator[Supervisors]:
    s = Supervisors()
    yield s
    s.close()


def test_non_loopback_host_warns(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], private_state: Path
) -> None:
    door = pytest.importorskip("rankvisor.tui.serve_door")
    started: list[door.DoorServer] = []
    monkeypatch.setattr(door.DoorServer, "serve", lambda self, debug=False: started.append(self))
    assert serve.main(["--host", "0.0.0.0", "--port", "9001", "--max-viewers", "2"]) == 0
    assert "anyone who can reach port 9001" in capsys.readouterr().err
    (server,) = started
    assert server.host == "0.0.0.0" and server.port == 9001 and server.max_viewers == 2
    assert server.command.endswith("--session --serve-pid %d demo" % os.getpid())
    assert server.public_url == "http://0.0.0.0:9001"


def test_viewer_session_is_attach_of_the_run_dir_read_only_unless_control() -> None:
    assert serve.viewer_session_args("/r/x_1", control=False) == [
        "attach", "/r/x_1", "--read-only"]
    assert serve.viewer_session_args("/r/x_1", control=True) == ["attach", "/r/x_1"]
    command = serve.session_command(serve.viewer_session_args("/r/x_1", control=False), 7)
    assert command.endswith(
        "rankvisor.tui.cli.serve --session --serve-pid 7 attach /r/x_1 --read-only")


def test_plan_a_running_run_by_dir_or_id(
    private_state: Path, supervisors: Supervisors, tmp_path: Path
) -> None:
    entry = make_run(tmp_path / "logs", "job7", pid=supervisors.live().pid)
    for named in (entry.run_dir, "job7", str(tmp_path / "logs")):
        plan = serve.plan_sessions([named], control=False)
        assert plan.session_args == ["attach", entry.run_dir, "--read-only"], named
        assert plan.shows == f"a viewer of run job7 ({entry.run_dir}), read-only"
        assert "watch run job7" in plan.reach
    plan = serve.plan_sessions([entry.run_dir], control=True)
    assert plan.session_args == ["attach", entry.run_dir]
    assert "with control" in plan.shows and "signal, terminate and restart" in plan.reach


def test_plan_a_finished_or_stale_run_is_its_record_read_only(
    private_state: Path, supervisors: Supervisors, tmp_path: Path
) -> None:
    pid, start = supervisors.dead()
    finished = make_run(tmp_path / "logs", "done", pid=pid, start=start,
                        states=[RankState.FAILED, RankState.SUCCEEDED],
                        finished=failed_finish(0, 3, 2), exitcode=1)
    stale = make_run(tmp_path / "logs", "gone", pid=pid, start=start)
    for entry, state in ((finished, "finished"), (stale, "stale")):
        plan = serve.plan_sessions([entry.run_dir], control=True)
        assert plan.session_args == ["attach", entry.run_dir, "--read-only"]
        assert plan.shows.endswith(f"({entry.run_dir}), {state}, read-only")


def test_plan_with_no_run_picks_the_newest_running_else_the_demo(
    private_state: Path, supervisors: Supervisors, tmp_path: Path
) -> None:
    pid, start = supervisors.dead()
    make_run(tmp_path / "logs", "old", pid=pid, start=start)  # stale: not running
    plan = serve.plan_sessions([], control=False)
    assert plan.session_args == ["demo"] and "none of your runs is running" in plan.shows
    live = make_run(tmp_path / "logs", "live", pid=supervisors.live().pid)
    assert serve.plan_sessions([], control=False).session_args == [
        "attach", live.run_dir, "--read-only"]
    # demo and run ARGS keep a run per session, whatever runs.
    assert serve.plan_sessions(["demo"], control=True).session_args == ["demo"]
    job = ["run", "--nproc-per-node", "2", "train.py"]
    assert serve.plan_sessions(["--", *job], control=False).session_args == job


def test_a_run_that_names_nothing_is_one_line_and_exit_3(
    private_state: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("textual_serve")
    script = tmp_path / "train.py"
    script.write_text("")
    for named in ("nosuch", str(script)):
        assert serve.main([named, "--control"]) == serve.NO_SUCH_RUN
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and "serve run ARGS" in err, err
    with pytest.raises(SystemExit) as exit_info:
        serve.main(["one", "two"])
    assert exit_info.value.code == 2


def test_serve_of_a_run_announces_the_viewer_and_warns_of_control(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
    private_state: Path, supervisors: Supervisors, tmp_path: Path,
) -> None:
    door = pytest.importorskip("rankvisor.tui.serve_door")
    entry = make_run(tmp_path / "logs", "job9", pid=supervisors.live().pid)
    started: list[door.DoorServer] = []
    monkeypatch.setattr(door.DoorServer, "serve", lambda self, debug=False: started.append(self))
    assert serve.main(["--host", "0.0.0.0", "job9", "--control"]) == 0
    err = capsys.readouterr().err
    assert "can signal, terminate and restart the ranks of run job9" in err
    (server,) = started
    assert server.command.endswith(f"--serve-pid {os.getpid()} attach {entry.run_dir}")
    server._announce()
    assert f"each browser session shows a viewer of run job9 ({entry.run_dir}), with control" in (
        capsys.readouterr().out)


@pytest.fixture
def run(tmp_path: Path) -> Iterator[HostedRun]:
    yield from hosted_run(tmp_path / "logs")


def test_the_serve_session_views_without_a_terminal_and_read_only_refuses(
    run: HostedRun, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from rankvisor.engine.control.client import RemoteHandle
    from rankvisor.tui import run as tui_run

    viewed: list[RemoteHandle] = []

    def view(handle: RemoteHandle, **_kw: object) -> int:
        viewed.append(handle)
        return 0

    monkeypatch.setattr(tui_run, "run_viewer", view)
    # The command line still refuses a stdout that is no terminal (pytest's is not).
    assert attach.main([run.run_dir]) == 2 and not viewed
    assert "needs a terminal" in capsys.readouterr().err
    pids = run.rank_pids()
    for read_only in (True, False):
        args = serve.viewer_session_args(run.run_dir, control=not read_only)
        assert serve.main(["--session", *args]) == 0
        handle = viewed.pop()
        assert isinstance(handle, RemoteHandle) and handle.detachable
        assert handle.read_only is read_only
        wait_until(lambda: run.clients == 1)
        if read_only:
            result = handle.execute(TerminateRanks([0]))
            assert not result.ok and result.message == READ_ONLY_REFUSAL
        handle.detach()
        wait_until(lambda: run.clients == 0)
    assert run.all_running() and run.rank_pids() == pids


def test_without_textual_serve_serve_names_the_extra_and_the_docs_do_too(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The ``[web]`` extra was said only in the error: the serve paragraph (now in
    docs/app.md) did not name it."""
    for name in [m for m in sys.modules if m.split(".")[0] == "textual_serve"] + [
            "textual_serve"]:
        monkeypatch.setitem(sys.modules, name, None)  # not importable, even if imported
    monkeypatch.delitem(sys.modules, "rankvisor.tui.serve_door", raising=False)
    import rankvisor.tui

    monkeypatch.delattr(rankvisor.tui, "serve_door", raising=False)  # imported by another test
    assert serve.main(["demo"]) == 2
    assert capsys.readouterr().err == (
        "rankvisor serve: error: textual-serve is not installed (pip install 'rankvisor[web]')\n")
    page = (Path(__file__).parents[2] / "docs" / "app.md").read_text()
    paragraph = page[page.index("`rankvisor serve [--max-viewers"):]
    assert "pip install 'rankvisor[web]'" in paragraph[:paragraph.index("\n\n")]
