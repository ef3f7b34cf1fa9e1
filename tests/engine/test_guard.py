"""The guard kills a supervisor's ranks and all their descendants once the supervisor is gone."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from rankvisor.engine.process.guard import Guard, _pin, starttime

from tests.conftest import BIN, pid_alive, wait_until

pytestmark = pytest.mark.processes


def _rank(tmp_path: Path, guard: Guard, child: str, rank: int = 0) -> list[int]:
    env = dict(os.environ, RANK=str(rank), **guard.env)
    subprocess.Popen(
        [sys.executable, str(BIN / "sv_rank.py"), "--pid-dir", str(tmp_path), "--child", child],
        env=env,
        stdout=subprocess.DEVNULL,
        start_new_session=True,
    )
    path = tmp_path / f"{rank}.0.pids"
    wait_until(path.exists)
    return [int(x) for x in path.read_text().split()]


def test_close_kills_ranks_and_descendants_in_and_out_of_the_group(tmp_path: Path) -> None:
    g = Guard()
    g.start()
    pids = _rank(tmp_path, g, "group", 0) + _rank(tmp_path, g, "setsid", 1)
    g.add_rank(pids[0])
    g.add_rank(pids[2])
    assert all(pid_alive(p) for p in pids)
    g.close()
    wait_until(lambda: not any(pid_alive(p) for p in pids))
    assert not g.alive


def test_guard_outlives_a_sigkilled_owner_and_cleans_up(tmp_path: Path) -> None:
    # The owner (a stand-in for rankvisor) starts a guard and a rank, then is SIGKILLed.
    owner_code = textwrap.dedent(
        f"""
        import os, subprocess, sys, time
        sys.path.insert(0, {str(Path(__file__).parents[2])!r})
        from rankvisor.engine.process.guard import Guard
        g = Guard(); g.start()
        env = dict(os.environ, RANK="0", **g.env)
        p = subprocess.Popen([sys.executable, {str(BIN / "sv_rank.py")!r}, "--pid-dir",
                              {str(tmp_path)!r}, "--child", "setsid"], env=env,
                             stdout=subprocess.DEVNULL, start_new_session=True)
        g.add_rank(p.pid)
        print(g.pid, flush=True)
        time.sleep(60)
        """
    )
    owner = subprocess.Popen([sys.executable, "-c", owner_code], stdout=subprocess.PIPE, text=True)
    assert owner.stdout is not None
    guard_pid = int(owner.stdout.readline())
    wait_until((tmp_path / "0.0.pids").exists)
    pids = [int(x) for x in (tmp_path / "0.0.pids").read_text().split()]
    assert all(pid_alive(p) for p in pids)
    owner.send_signal(signal.SIGKILL)
    owner.wait()
    wait_until(lambda: not any(pid_alive(p) for p in pids))
    wait_until(lambda: not pid_alive(guard_pid))


def test_a_recycled_pid_is_not_pinned(tmp_path: Path) -> None:
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        st = starttime(p.pid)
        assert st is not None
        fd = _pin(p.pid, st)
        assert fd is not None
        os.close(fd)
        # Same pid, other start time: the process we were told about is not this one.
        assert _pin(p.pid, st + 1) is None
    finally:
        p.kill()
        p.wait()
