"""The run outlives its terminal: ``rankvisor run`` in tmux, the session killed, the run found,
watched again, refused to a read-only viewer, kept from other users, and stopped.

Every step is what a person does over SSH: start a run in a terminal, lose the terminal,
come back with ``ls`` / ``status`` / ``attach`` in a new one, and end it with ``stop``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import pytest

from tests.conftest import BIN, pid_alive, wait_until

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [
    pytest.mark.processes,
    pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed"),
]


def _tmux(*args: str) -> str:
    return subprocess.run(["tmux", *args], capture_output=True, text=True, check=True,
                          timeout=30).stdout


def _screen(session: str) -> str:
    return _tmux("capture-pane", "-p", "-t", session)


@pytest.fixture(autouse=True)
def _own_state_dir(monkeypatch: pytest.MonkeyPatch) -> None:
    """A state dir for this test alone: it opens the dir's modes to everyone (to show that
    the peer check, not the modes, refuses another user), which the registry would then
    rightly refuse to use for every later run of the session."""
    path = tempfile.mkdtemp(prefix="rv-tmux-", dir="/tmp")
    os.chmod(path, 0o700)
    monkeypatch.setenv("RANKVISOR_STATE_DIR", path)


def _rankvisor(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rankvisor.tui", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)


def _in_tmux(session: str, command: str) -> int:
    env = f"RANKVISOR_STATE_DIR={os.environ['RANKVISOR_STATE_DIR']} TERM=xterm-256color"
    out = _tmux("new-session", "-d", "-P", "-F", "#{pane_pid}", "-s", session, "-x", "150",
                "-y", "45", f"cd {ROOT} && exec env {env} {command}")
    return int(out.strip())


def _ticks(log: Path) -> int:
    """The last tick number in a rank's stdout.log (-1 before the first)."""
    last = -1
    for line in log.read_text().splitlines():
        if " tick " in line:
            last = int(line.rsplit(" ", 1)[1])
    return last


def test_a_run_outlives_its_terminal_and_is_found_watched_and_stopped(tmp_path: Path) -> None:
    tag = uuid.uuid4().hex[:8]
    first, second, third = (f"rv-{tag}-{n}" for n in ("a", "b", "c"))
    pid_dir = tmp_path / "pids"
    pid_dir.mkdir()
    logs = tmp_path / "logs"
    started: list[int] = []
    ranks: list[int] = []
    try:
        viewer = _in_tmux(first, (
            f"{sys.executable} -m rankvisor.tui run --nproc-per-node 2 --term-timeout 2 "
            f"--log-dir {logs} {BIN / 'ticker.py'} --pid-dir {pid_dir}"
        ))
        started.append(viewer)
        for rank in (0, 1):
            wait_until((pid_dir / f"{rank}.pid").exists, timeout=60)
        ranks = [int((pid_dir / f"{r}.pid").read_text()) for r in (0, 1)]
        wait_until(lambda: "tick 3" in _screen(first), timeout=30)

        # The terminal goes away (a dropped SSH connection): the viewer ends, the run not.
        _tmux("kill-session", "-t", first)
        wait_until(lambda: not pid_alive(viewer), timeout=30)
        (run_dir,) = logs.iterdir()
        out0 = next(run_dir.glob("attempt_0/0/stdout.log"))
        before = _ticks(out0)
        wait_until(lambda: _ticks(out0) > before + 2, timeout=30)  # still ticking
        assert all(pid_alive(p) for p in ranks)

        # ls and status find it.
        listed = json.loads(_rankvisor("ls", "--json").stdout)
        (entry,) = [r for r in listed if r["run_dir"] == str(run_dir)]
        assert entry["state"] == "running"
        status = json.loads(_rankvisor("status", "--json").stdout)
        assert status["state"] == "running" and status["run_dir"] == str(run_dir)
        assert [r["pid"] for r in status["ranks"]] == ranks
        supervisor = status["supervisor_pid"]
        started.append(supervisor)
        socket_path = status["socket"]

        # attach in a new terminal shows lines written before the detach.
        written_before = _ticks(out0)
        started.append(_in_tmux(second, f"{sys.executable} -m rankvisor.tui attach {run_dir}"))
        shown = re.compile(rf"rank 0 tick {written_before}\b")
        wait_until(lambda: shown.search(_screen(second)), timeout=30)

        # A second viewer at the same time, read-only: its terminate is refused.
        started.append(_in_tmux(third, f"{sys.executable} -m rankvisor.tui attach --read-only"))
        wait_until(lambda: "rank 0 tick" in _screen(third), timeout=30)
        _tmux("send-keys", "-t", third, "t")
        wait_until(lambda: "read-only" in _screen(third), timeout=15)
        assert all(pid_alive(p) for p in ranks)

        # Another user gets no answer, even with the modes opened to everyone: the peer
        # check itself refuses it.
        if os.geteuid() == 0 and shutil.which("setpriv"):
            sockets = os.path.dirname(socket_path)
            for folder in (os.path.dirname(sockets), sockets):
                os.chmod(folder, 0o777)
            os.chmod(socket_path, 0o666)
            # Whatever it sends, it reads nothing: the server closes without a byte.
            probe = (
                "import socket,sys\n"
                "s=socket.socket(socket.AF_UNIX); s.settimeout(5)\n"
                f"s.connect({socket_path!r})\n"
                "try:\n s.sendall(b'{\"t\":\"hello\",\"protocol\":1}\\n')\n"
                "except OSError: pass\n"
                "try:\n d=s.recv(4096)\n"
                "except socket.timeout:\n d=b'TIMEOUT'\n"
                "except OSError:\n d=b''\n"
                "sys.stdout.write(repr(d))"
            )
            res = subprocess.run(
                ["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups",
                 sys.executable, "-c", probe],
                capture_output=True, text=True, timeout=30,
            )
            assert res.stdout == "b''", (res.stdout, res.stderr)

        # stop ends the run. The viewers show its end; once they quit (q on a finished run
        # quits at once) the supervisor has nobody to serve and exits: no process is left.
        res = _rankvisor("stop", str(run_dir))
        assert res.returncode == 0, res.stderr
        wait_until(lambda: not any(pid_alive(p) for p in ranks), timeout=30)
        for session in (second, third):
            wait_until(lambda s=session: "finished" in _screen(s)  # type: ignore[misc]
                       or "stopped" in _screen(s), timeout=30)
            assert pid_alive(supervisor)  # a viewer is still attached
            _tmux("send-keys", "-t", session, "q")
        wait_until(lambda: not pid_alive(supervisor), timeout=30)
        wait_until(lambda: not any(pid_alive(p) for p in started), timeout=30)
        final = json.loads((run_dir / "status.json").read_text())
        assert final["state"] == "finished" and final["finished"] is True
    finally:
        for session in (first, second, third):
            subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True,
                           timeout=30)
        for pid in [*ranks, *started]:
            if pid_alive(pid):
                subprocess.run(["kill", "-9", str(pid)], capture_output=True)
