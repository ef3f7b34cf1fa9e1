"""No orphans: however rankvisor ends, its ranks and every descendant end too.

rankvisor runs headless in a child process (its own session, so the signal reaches it
alone); the ranks write their pids and their children's pids (one child in the rank's
process group, one that left it with setsid), and after rankvisor is gone none may be alive.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import BIN, pid_alive, wait_until

pytestmark = pytest.mark.processes

ROOT = Path(__file__).parents[2]


def _start_rankvisor(tmp_path: Path, *extra: str) -> tuple[subprocess.Popen[bytes], list[int]]:
    pid_dir = tmp_path / "pids"
    pid_dir.mkdir()
    cmd = [
        sys.executable, "-m", "rankvisor.tui", "run", "--headless", "--nproc-per-node", "2",
        "--term-timeout", "3", "--log-dir", str(tmp_path / "logs"), *extra,
        str(BIN / "sv_rank.py"), "--pid-dir", str(pid_dir), "--child", "both",
    ]
    proc = subprocess.Popen(
        cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True
    )
    for rank in (0, 1):
        wait_until((pid_dir / f"{rank}.0.pids").exists, timeout=30)
    pids = [int(x) for r in (0, 1) for x in (pid_dir / f"{r}.0.pids").read_text().split()]
    assert len(pids) == 6 and all(pid_alive(p) for p in pids)
    return proc, pids


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_rankvisor_ending_by_signal_leaves_nothing_alive(tmp_path: Path, sig: int) -> None:
    proc, pids = _start_rankvisor(tmp_path)
    proc.send_signal(sig)
    code = proc.wait(timeout=30)
    if sig == signal.SIGKILL:
        assert code == -signal.SIGKILL
    else:
        # Terminated the ranks with escalation, then exited with 128 + N.
        assert code == 128 + sig, proc.stderr.read() if proc.stderr else ""
    wait_until(lambda: not any(pid_alive(p) for p in pids), timeout=15)


def test_ranks_ignoring_the_forwarded_signal_are_killed_after_the_timeout(
    tmp_path: Path,
) -> None:
    pid_dir = tmp_path / "pids"
    pid_dir.mkdir()
    cmd = [
        sys.executable, "-m", "rankvisor.tui", "run", "--headless", "--nproc-per-node", "1",
        "--term-timeout", "1", "--log-dir", str(tmp_path / "logs"),
        str(BIN / "sv_rank.py"), "--pid-dir", str(pid_dir), "--ignore-term",
    ]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, start_new_session=True)
    wait_until((pid_dir / "0.0.pids").exists, timeout=30)
    (rank,) = [int(x) for x in (pid_dir / "0.0.pids").read_text().split()]
    os.kill(proc.pid, signal.SIGTERM)
    assert proc.wait(timeout=30) == 128 + signal.SIGTERM
    assert not pid_alive(rank)
    assert proc.stderr is not None
    assert b"SIGKILL" in proc.stderr.read()
