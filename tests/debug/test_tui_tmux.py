"""A person answers pdb from the TUI, in a real terminal: ``rankvisor run`` (the supervisor
process, its ranks' stdin a pipe it holds) in tmux on a 2-rank job whose rank 0 stops at
``breakpoint()`` with ``x = 41``; ``i`` opens the input line, ``p x`` and Enter make 41
appear in rank 0's pane, ``c`` and Enter let it go on, and the run ends well.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from rankvisor.engine.control.status import read_status

from tests.conftest import wait_until

ROOT = Path(__file__).resolve().parents[2]
JOB = Path(__file__).parent / "jobs" / "bp_job.py"
START_S = 60.0

pytestmark = [
    pytest.mark.processes,
    pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed"),
]


def _tmux(*args: str) -> str:
    return subprocess.run(["tmux", *args], capture_output=True, text=True, check=True,
                          timeout=30).stdout


def _run_dir(logs: Path) -> str | None:
    found = sorted(logs.glob("*/status.json"))
    return str(found[0].parent) if found else None


def test_pdb_answered_from_the_input_line(tmp_path: Path) -> None:
    session = f"rv-pdb-{uuid.uuid4().hex[:8]}"
    logs = tmp_path / "logs"
    env = (f"RANKVISOR_STATE_DIR={os.environ['RANKVISOR_STATE_DIR']} TERM=xterm-256color")
    command = (f"cd {ROOT} && exec env {env} {sys.executable} -m rankvisor.tui run "
               f"--nproc-per-node 2 --term-timeout 2 --log-dir {logs} {JOB}")
    _tmux("new-session", "-d", "-s", session, "-x", "150", "-y", "45", command)
    run_dir: str | None = None
    try:
        def at_prompt() -> bool:
            nonlocal run_dir
            run_dir = run_dir or _run_dir(logs)
            status = read_status(run_dir) if run_dir else None
            return bool(status and status["ranks"][0].get("input_wait"))

        wait_until(at_prompt, START_S, interval=0.2)
        screen = lambda: _tmux("capture-pane", "-p", "-t", session)  # noqa: E731
        wait_until(lambda: "at a prompt" in screen(), 20, interval=0.2)  # the header says so
        _tmux("send-keys", "-t", session, "i")
        wait_until(lambda: "INPUT rank 0" in screen(), 20, interval=0.2)
        _tmux("send-keys", "-t", session, "-l", "p x")
        _tmux("send-keys", "-t", session, "Enter")
        # The answer in rank 0's pane, after what was typed.
        wait_until(lambda: "41" in screen().split("p x", 1)[-1], 20, interval=0.2)
        _tmux("send-keys", "-t", session, "-l", "c")
        _tmux("send-keys", "-t", session, "Enter")
        assert run_dir is not None

        def finished() -> dict | None:  # type: ignore[type-arg]
            status = read_status(run_dir)
            return status if status and status.get("finished") else None

        status = wait_until(finished, START_S, interval=0.2)
        assert isinstance(status, dict) and status["exitcode"] == 0, status
        out = (Path(run_dir) / "attempt_0" / "0" / "stdout.log").read_text()
        assert "(Pdb) 41" in out and "done 0" in out  # the rank's own bytes, as it wrote them
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True,
                       timeout=30)
        if run_dir:
            subprocess.run([sys.executable, "-m", "rankvisor.tui", "stop", run_dir],
                           capture_output=True, timeout=60)
