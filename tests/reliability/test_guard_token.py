"""The guard's token stays secret: never on a command line, where any user's ``ps`` sees it.

A process that learned the token could put it in its own environment and have the guard
SIGKILL it on our exit, or hide from our sweeps by knowing what we look for. The guard gets
it through its pipe; it still kills a rank's whole tree when its owner is SIGKILLed.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import BIN, pid_alive, wait_until

pytestmark = pytest.mark.processes

ROOT = Path(__file__).resolve().parents[2]


def test_the_token_is_not_on_the_guard_command_line_and_the_guard_still_works(
    tmp_path: Path,
) -> None:
    # The owner stands in for rankvisor: a guard, one rank with a setsid grandchild.
    owner_code = textwrap.dedent(
        f"""
        import os, subprocess, sys, time
        sys.path.insert(0, {str(ROOT)!r})
        from rankvisor.engine.process.guard import Guard
        g = Guard(); g.start()
        env = dict(os.environ, RANK="0", **g.env)
        p = subprocess.Popen([sys.executable, {str(BIN / "sv_rank.py")!r}, "--pid-dir",
                              {str(tmp_path)!r}, "--child", "setsid"], env=env,
                             stdout=subprocess.DEVNULL, start_new_session=True)
        g.add_rank(p.pid)
        print(g.pid, g.token, flush=True)
        time.sleep(60)
        """
    )
    owner = subprocess.Popen([sys.executable, "-c", owner_code], stdout=subprocess.PIPE, text=True)
    try:
        assert owner.stdout is not None
        pid_text, token = owner.stdout.readline().split()
        guard_pid = int(pid_text)
        assert len(token) >= 16
        cmdline = Path(f"/proc/{guard_pid}/cmdline").read_bytes()
        assert b"guard.py" in cmdline  # the right process
        assert token.encode() not in cmdline
        # Nor in its environment: the guard is no rank, and its sweep must not match itself.
        assert token.encode() not in Path(f"/proc/{guard_pid}/environ").read_bytes()

        wait_until((tmp_path / "0.0.pids").exists)
        pids = [int(x) for x in (tmp_path / "0.0.pids").read_text().split()]
        assert len(pids) == 2 and all(pid_alive(p) for p in pids)
        # The rank's environment does carry the token: that is how the sweep finds strays.
        assert token.encode() in Path(f"/proc/{pids[1]}/environ").read_bytes()
        owner.send_signal(signal.SIGKILL)
        owner.wait()
        # The grandchild left the rank's session: only the token sweep can find it.
        wait_until(lambda: not any(pid_alive(p) for p in pids))
        wait_until(lambda: not pid_alive(guard_pid))
    finally:
        if owner.poll() is None:
            owner.kill()
            owner.wait()
