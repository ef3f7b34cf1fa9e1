"""A terminal that goes away never leaves a process of rankvisor behind.

``rankvisor run --foreground`` (the TUI with the supervisor inside it) runs in a tmux session;
the test kills the session, as a dropped SSH connection would take the terminal: the ranks
stop, rankvisor and its guard end, and the report is in the run directory (there was no
terminal left to print it on). Without ``--foreground`` the run outlives its terminal:
``test_detach_tmux.py``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.conftest import BIN, pid_alive, wait_until

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [
    pytest.mark.processes,
    pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed"),
]


def _children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(x) for x in text.split()]


def test_killing_the_terminal_ends_rankvisor_its_guard_and_the_ranks(tmp_path: Path) -> None:
    session = f"rv-lost-{uuid.uuid4().hex[:8]}"
    pid_dir = tmp_path / "pids"
    pid_dir.mkdir()
    command = (
        # A tmux server started before the test has its own environment: the state dir is
        # passed on the command line, or the run would register in the user's own.
        f"cd {ROOT} && exec env RANKVISOR_STATE_DIR={os.environ['RANKVISOR_STATE_DIR']} "
        f"{sys.executable} -m rankvisor.tui run --foreground --nproc-per-node 2 "
        "--term-timeout 3 "
        f"--log-dir {tmp_path / 'logs'} {BIN / 'sv_rank.py'} --pid-dir {pid_dir}"
    )
    out = subprocess.run(
        ["tmux", "new-session", "-d", "-P", "-F", "#{pane_pid}", "-s", session, "-x", "120",
         "-y", "40", command],
        capture_output=True, text=True, check=True, timeout=30,
    )
    rankvisor = int(out.stdout.strip())
    try:
        for rank in (0, 1):
            wait_until((pid_dir / f"{rank}.0.pids").exists, timeout=30)
        ranks = [int((pid_dir / f"{r}.0.pids").read_text().split()[0]) for r in (0, 1)]
        ours = [rankvisor, *_children(rankvisor)]  # the guard and the ranks
        subprocess.run(["tmux", "kill-session", "-t", session], check=True, timeout=30)
        wait_until(lambda: not any(pid_alive(p) for p in ranks), timeout=30)
        wait_until(lambda: not any(pid_alive(p) for p in ours), timeout=30)
        (summary,) = (tmp_path / "logs").glob("*/summary.txt")
        text = summary.read_text()
        assert text.startswith("rankvisor: the run was stopped by SIGHUP")
        assert "stopped by rankvisor" in text
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True, timeout=30)
        for pid in [rankvisor, *_children(rankvisor)]:
            if pid_alive(pid):
                subprocess.run(["kill", "-9", str(pid)], capture_output=True)
