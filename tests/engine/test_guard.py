"""The guard kills a supervisor's ranks and all their descendants once the supervisor is gone."""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from rankvisor.engine.process.guard import Guard, _pin, in_exec, starttime, sweep

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


def _reads(pid: int) -> tuple[bytes, bytes, bytes]:
    # In the sweep's order: the arguments before the environment.
    proc = Path(f"/proc/{pid}")
    cmdline = (proc / "cmdline").read_bytes()
    return (proc / "stat").read_bytes(), cmdline, (proc / "environ").read_bytes()


def test_a_process_caught_inside_its_exec_is_read_again_by_the_sweep() -> None:
    # Right after a spawn the new program's arguments and environment are often not there
    # yet: a sweep that took such a process for one without our token let it live. Kernel
    # threads, zombies and a program run with no environment read so for good, and are not
    # waited for. A live process with neither arguments nor environment: inside its exec.
    assert in_exec(_reads(os.getpid())[0], b"", b"")
    # The guard's sweep right after spawns: every one of them is killed. (The sweep lists
    # /proc first, so here it reaches a new process after its exec more often than not.)
    token = secrets.token_hex(8)
    for _ in range(20):
        p = subprocess.Popen(["sleep", "30"], env={"RANKVISOR_GUARD": token})
        try:
            sweep(token.encode(), set())
            assert p.wait(timeout=10) == -signal.SIGKILL
        finally:
            p.kill()
            p.wait()
    # A kernel thread (its environment cannot even be opened), where /proc shows one.
    for stat_path in Path("/proc").glob("[0-9]*/stat"):
        try:
            stat = stat_path.read_bytes()
        except OSError:
            continue
        if int(stat.rsplit(b")", 1)[1].split()[6]) & 0x00200000:
            assert not in_exec(stat, b"", b"")
            break
    no_env = subprocess.Popen(["sleep", "30"], env={})
    zombie = subprocess.Popen(["true"])
    try:
        wait_until(lambda: _reads(no_env.pid)[1] != b"")
        assert _reads(no_env.pid)[2] == b"" and not in_exec(*_reads(no_env.pid))
        # A zombie: its environment is gone with its memory.
        stat = Path(f"/proc/{zombie.pid}/stat")
        wait_until(lambda: stat.read_bytes().rsplit(b")", 1)[1].split()[0] == b"Z")
        assert not in_exec(stat.read_bytes(), b"", b"")
    finally:
        no_env.kill()
        no_env.wait()
        zombie.wait()
