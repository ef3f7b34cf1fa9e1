"""``die_with_parent``: a process that asks for a death signal tied to its parent.

That the signal comes when the parent is SIGKILLed is shown with real processes by
tests/reliability/test_serve_door.py (the browser session's app) and by the function-rank
tests of the multiprocess context.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.processes

REPO = Path(__file__).resolve().parents[2]

CHILD = (
    "import sys; from rankvisor.engine.process import die_with_parent;"
    " print(die_with_parent({pid}))"
)


def _child(pid: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", CHILD.format(pid=pid)],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True, text=True, timeout=60, check=False,
    )


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_set_when_the_parent_is_the_one_named() -> None:
    done = _child(str(os.getpid()))
    assert (done.returncode, done.stdout.strip()) == (0, "True"), done.stderr


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_parent_already_gone_means_exit_at_once() -> None:
    # Another parent than the one named: ours died before the request took effect.
    done = _child(str(os.getpid() + 1))
    assert done.returncode == 128 + signal.SIGKILL and done.stdout == ""
