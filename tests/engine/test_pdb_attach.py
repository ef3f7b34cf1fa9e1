"""pdb attached to a running rank (PEP 768): on Python 3.14+ a real attach through
``python -m pdb -p PID``; before it, one line that says it needs 3.14 and offers the stacks."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from rankvisor.engine.forensics.pdb_attach import (
    attach_command,
    attach_pdb,
    attach_problem,
    python_version,
)

from tests.conftest import PYTHON

pytestmark = pytest.mark.processes


@pytest.fixture
def sleeper():
    proc = subprocess.Popen([PYTHON, "-c", "import time; time.sleep(120)"])
    yield proc
    proc.kill()
    proc.wait()


def test_an_older_python_is_told_in_one_line_with_the_stacks_offered(sleeper) -> None:
    problem = attach_problem(sleeper.pid, version=(3, 11), label="rank 0")
    assert problem == (
        "attaching pdb to a running rank needs Python 3.14 or later (PEP 768); rank 0 runs "
        "Python 3.11: press S in the TUI, or run `rankvisor stack`, for its Python stack instead"
    )
    if sys.version_info < (3, 14):
        # The rank's own interpreter is asked: this one.
        assert attach_problem(sleeper.pid) is not None
        with pytest.raises(RuntimeError, match="needs Python 3.14"):
            attach_pdb(sleeper.pid)
    assert python_version(PYTHON) == tuple(sys.version_info[:2])


def test_the_rank_s_own_interpreter_attaches(sleeper) -> None:
    assert attach_command(sleeper.pid)[1:] == ["-m", "pdb", "-p", str(sleeper.pid)]
    assert attach_command(sleeper.pid)[0] == os.path.realpath(PYTHON)


def test_a_gone_or_non_python_process_is_said_plainly() -> None:
    done = subprocess.Popen(["sleep", "0"])
    done.wait()
    assert attach_problem(done.pid, label="rank 2") == f"rank 2 (pid {done.pid}) is not running"
    sh = subprocess.Popen(["sleep", "60"])
    try:
        assert attach_problem(sh.pid).startswith("the rank does not run Python (sleep); ")
    finally:
        sh.kill()
        sh.wait()


def test_yama_scope_1_lets_only_ancestors_attach(sleeper, monkeypatch) -> None:
    from rankvisor.engine.forensics import pdb_attach

    monkeypatch.setattr(pdb_attach, "yama_ptrace_scope", lambda: 1)
    monkeypatch.setattr(pdb_attach.os, "geteuid", lambda: 1000)
    # The test started the sleeper: its parent may attach.
    assert attach_problem(sleeper.pid, version=(3, 14)) is None
    # Its grandparent too; a sibling may not.
    assert pdb_attach._is_ancestor(os.getppid(), sleeper.pid)
    sibling = subprocess.Popen([PYTHON, "-c", "import time; time.sleep(60)"])
    try:
        assert not pdb_attach._is_ancestor(sibling.pid, sleeper.pid)
    finally:
        sibling.kill()
        sibling.wait()
    monkeypatch.setattr(pdb_attach, "_is_ancestor", lambda me, pid: False)
    assert attach_problem(sleeper.pid, version=(3, 14)).startswith(
        "the kernel (Yama ptrace_scope=1) lets only the rank's supervisor"
    )


@pytest.mark.skipif(sys.version_info < (3, 14), reason="PEP 768 remote attach needs Python 3.14")
def test_pdb_attaches_to_a_running_process(sleeper) -> None:  # pragma: no cover - 3.14 only
    out = subprocess.run(attach_command(sleeper.pid), input="where\ndetach\n", text=True,
                         capture_output=True, timeout=60)
    assert "time.sleep" in out.stdout or "<module>" in out.stdout
