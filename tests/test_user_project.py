"""A research repository with names of its own: every command works in it, and its ranks
import its own ``engine``.

DETR and its descendants keep an ``engine.py`` at the repository's root and run with
``PYTHONPATH=.``. The project here has that ``engine.py``, an ``engine/`` package beside it
(the one Python imports) and a ``tui.py`` that raises on import; every command runs as the
installed ``rankvisor`` script from the project's folder with ``PYTHONPATH=.``. Real
processes, bounded waits; whatever a test started is killed in its ``finally``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from tests.conftest import pid_alive, wait_until

SCRIPT = Path(sys.executable).with_name("rankvisor")
BOUND = 60.0
"""Seconds any one step may take (a rank imports nothing heavy; the TUI starts in seconds)."""

MAIN = """\
import os, sys, time
import engine
rank = os.environ["RANK"]
print(f"rank {rank} engine {engine.WHO} {engine.__file__}", flush=True)
stop = sys.argv[1] if len(sys.argv) > 1 else ""
deadline = time.monotonic() + 120
while stop and not os.path.exists(stop) and time.monotonic() < deadline:
    time.sleep(0.05)
"""
"""The training script: says which ``engine`` it got, then waits for the stop file."""

pytestmark = [
    pytest.mark.processes,
    pytest.mark.skipif(not SCRIPT.exists(), reason=f"no console script {SCRIPT}"),
]


@dataclass
class Project:
    root: Path
    env: dict[str, str]
    stop: Path
    logs: Path

    def rankvisor(self, *args: str, timeout: float = BOUND) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(SCRIPT), *args], cwd=self.root, env=self.env,
                              capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)

    def own_engine_line(self, rank: int) -> str:
        return f"rank {rank} engine project {self.root / 'engine' / '__init__.py'}"


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Project:
    root = tmp_path / "detr"
    (root / "engine").mkdir(parents=True)
    (root / "engine.py").write_text("raise RuntimeError('engine.py: the package wins')\n")
    (root / "engine" / "__init__.py").write_text("WHO = 'project'\n")
    (root / "tui.py").write_text("raise RuntimeError(\"the project's tui.py was imported\")\n")
    (root / "main.py").write_text(MAIN)
    state = Path(os.environ["RANKVISOR_STATE_DIR"]) / uuid.uuid4().hex[:6]
    state.mkdir(mode=0o700)
    monkeypatch.setenv("RANKVISOR_STATE_DIR", str(state))
    env = dict(os.environ, PYTHONPATH=".", TERM="xterm-256color")
    return Project(root, env, tmp_path / "stop", tmp_path / "logs")


def _run_dir(logs: Path) -> Path:
    (run_dir,) = logs.iterdir()
    return run_dir


def _stdout(run_dir: Path, rank: int) -> str:
    path = run_dir / "attempt_0" / str(rank) / "stdout.log"
    return path.read_text() if path.exists() else ""


def test_headless_and_demo(project: Project) -> None:
    res = project.rankvisor("run", "--headless", "--nproc-per-node", "2", "--log-dir",
                            str(project.logs), "main.py")
    assert res.returncode == 0, res.stderr
    for rank in (0, 1):
        assert f"[default{rank}]:{project.own_engine_line(rank)}" in res.stdout
    demo = project.rankvisor("demo", "--headless", "--log-dir", str(project.logs / "demo"),
                             timeout=3 * BOUND)
    # The demo's job fails one rank on purpose (exit status 1) and says which.
    assert demo.returncode == 1, demo.stderr
    assert "rankvisor: root cause: rank 2 failed first" in demo.stdout + demo.stderr


def test_detached_run_status_stack_attach_and_stop(project: Project) -> None:
    res = project.rankvisor("run", "-D", "--nproc-per-node", "2", "--log-dir",
                            str(project.logs), "main.py", str(project.stop))
    assert res.returncode == 0, res.stderr
    run_dir = _run_dir(project.logs)
    pids: list[int] = []
    session = f"rv-user-{uuid.uuid4().hex[:8]}"
    try:
        status = json.loads(project.rankvisor("status", "--json", str(run_dir)).stdout)
        pids = [status["supervisor_pid"], *(r["pid"] for r in status["ranks"])]
        assert status["state"] == "running"
        for rank in (0, 1):
            wait_until(lambda r=rank: project.own_engine_line(r) in _stdout(run_dir, r),
                       timeout=BOUND)
        stack = project.rankvisor("stack", str(run_dir))
        assert stack.returncode == 0, stack.stderr
        assert "ranks 0, 1:" in stack.stdout and "main.py" in stack.stdout

        viewer = _in_tmux(project, session, f"{SCRIPT} attach {run_dir}")
        pids.append(viewer)
        wait_until(lambda: "rank 1 engine project" in _screen(session), timeout=BOUND)

        stopped = project.rankvisor("stop", str(run_dir))
        assert stopped.returncode == 0, stopped.stderr
        assert json.loads(project.rankvisor("status", "--json", str(run_dir)).stdout)[
            "finished"] is True
        wait_until(lambda: "finished" in _screen(session) or "stopped" in _screen(session),
                   timeout=BOUND)
        _tmux("send-keys", "-t", session, "q")  # a finished run: q quits at once
        wait_until(lambda: not any(pid_alive(p) for p in pids), timeout=BOUND)
    finally:
        _kill_session(session)
        _kill(pids)


def test_the_tui_in_a_terminal(project: Project) -> None:
    session = f"rv-user-{uuid.uuid4().hex[:8]}"
    pids: list[int] = []
    try:
        pids.append(_in_tmux(project, session, (
            f"{SCRIPT} run --nproc-per-node 2 --log-dir {project.logs} main.py {project.stop}"
        )))
        wait_until(lambda: "rank 0 engine project" in _screen(session), timeout=BOUND)
        run_dir = _run_dir(project.logs)
        status = json.loads(project.rankvisor("status", "--json", str(run_dir)).stdout)
        pids += [status["supervisor_pid"], *(r["pid"] for r in status["ranks"])]
        for rank in (0, 1):
            assert project.own_engine_line(rank) in _stdout(run_dir, rank)
        project.stop.touch()  # the ranks end (exit 0); q on a finished run quits at once
        wait_until(lambda: "finished" in _screen(session), timeout=BOUND)
        _tmux("send-keys", "-t", session, "q")
        wait_until(lambda: not any(pid_alive(p) for p in pids), timeout=BOUND)
        final = json.loads((run_dir / "status.json").read_text())
        assert final["finished"] is True and final["exitcode"] == 0
    finally:
        _kill_session(session)
        _kill(pids)


def test_serve_answers_on_a_free_loopback_port(project: Project) -> None:
    port = _free_port()
    out = project.root / "serve.out"
    with open(out, "w") as sink:
        serve = subprocess.Popen(
            [str(SCRIPT), "serve", "--port", str(port), "run", "--nproc-per-node", "1",
             "main.py"],
            cwd=project.root, env=project.env, stdin=subprocess.DEVNULL, stdout=sink,
            stderr=subprocess.STDOUT, start_new_session=True,
        )
    tree: list[psutil.Process] = []
    try:
        url = wait_until(lambda: _served_url(out), timeout=BOUND)
        assert str(url).startswith(f"http://127.0.0.1:{port}/?token=")
        with urllib.request.urlopen(str(url), timeout=BOUND) as page:
            assert page.status == 200 and b"textual" in page.read()
        with pytest.raises(urllib.error.HTTPError) as refused:  # no token, no page
            urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=BOUND)
        assert refused.value.code == 403
        tree = psutil.Process(serve.pid).children(recursive=True)
        serve.send_signal(signal.SIGINT)  # Ctrl+C, as it says
        assert serve.wait(timeout=BOUND) == 0, out.read_text()
        wait_until(lambda: not any(p.is_running() for p in tree), timeout=BOUND)
    finally:
        if serve.poll() is None:
            os.killpg(serve.pid, signal.SIGKILL)
            serve.wait()
        _kill([p.pid for p in tree if p.is_running()])
    assert "Traceback" not in out.read_text()


# -- helpers ----------------------------------------------------------------------------------


def _tmux(*args: str) -> str:
    return subprocess.run(["tmux", *args], capture_output=True, text=True, check=True,
                          timeout=30).stdout


def _screen(session: str) -> str:
    return _tmux("capture-pane", "-p", "-t", session)


def _in_tmux(project: Project, session: str, command: str) -> int:
    """Start ``command`` in a new detached tmux session, 120x40; returns its pid."""
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed")
    env = " ".join(f"{k}={project.env[k]}" for k in ("PYTHONPATH", "TERM",
                                                     "RANKVISOR_STATE_DIR"))
    out = _tmux("new-session", "-d", "-P", "-F", "#{pane_pid}", "-s", session, "-x", "120",
                "-y", "40", f"cd {project.root} && exec env {env} {command}")
    return int(out.strip())


def _kill_session(session: str) -> None:
    subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True, timeout=30)


def _kill(pids: list[int]) -> None:
    for pid in pids:
        if pid_alive(pid):
            os.kill(pid, signal.SIGKILL)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _served_url(out: Path) -> str | None:
    for word in out.read_text().split():
        if word.startswith("http://") and "token=" in word:
            return word
    return None

