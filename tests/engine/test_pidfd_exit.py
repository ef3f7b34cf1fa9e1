"""The exit status of a process another process reaped, read through our pidfd.

A real grandchild: a helper process starts it and reaps it, as torchrun's agent reaps its
workers; the test holds only a pidfd.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest
from rankvisor.engine.process.pidfd_exit import reaped_exit_status

from tests.conftest import NEEDS_PIDFD_EXIT, wait_until

pytestmark = [pytest.mark.processes, NEEDS_PIDFD_EXIT]

_PARENT = """
import subprocess, sys
p = subprocess.Popen(["sh", "-c", sys.argv[1]])
print(p.pid, flush=True)
sys.stdin.readline()  # the test says when to reap
p.wait()
print("reaped", flush=True)
sys.stdin.readline()
"""


@pytest.mark.parametrize(
    ("script", "code"),
    [("exit 0", 0), ("exit 3", 3), ("kill -TERM $$", -signal.SIGTERM),
     ("kill -KILL $$", -signal.SIGKILL)],
)
def test_the_status_of_a_grandchild_is_read_after_its_parent_reaped_it(
    script: str, code: int
) -> None:
    parent = subprocess.Popen(
        [sys.executable, "-c", _PARENT, script],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    assert parent.stdin is not None and parent.stdout is not None
    try:
        pid = int(parent.stdout.readline())
        fd = os.pidfd_open(pid)
        try:
            # Exited, not reaped: a zombie, and the pidfd has nothing to say yet.
            wait_until(lambda: open(f"/proc/{pid}/stat").read().split(") ")[1][0] == "Z")
            assert reaped_exit_status(fd) is None
            parent.stdin.write("\n")
            parent.stdin.flush()
            assert parent.stdout.readline() == "reaped\n"
            assert not os.path.exists(f"/proc/{pid}")  # /proc has forgotten it
            assert reaped_exit_status(fd) == code
        finally:
            os.close(fd)
    finally:
        parent.stdin.close()
        parent.wait(timeout=30)
