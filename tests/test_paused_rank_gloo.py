"""A person at rank 0's pdb prompt while rank 1's gloo all_reduce times out: the suspect is
rank 0, paused by a person at gloo_prompt.py:N, not the rank that timed out nor a silent one.

The ranks' stdin is a pipe of the test's own that nobody writes to. The wait is found as the
engine's detector finds it (pdb's ``> file(line)`` line and ``(Pdb)`` prompt in the output,
the rank blocked reading its stdin pipe) and published as the detector publishes it: a
``RankInputWait`` through the Supervisor's own event stream.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import pytest
from rankvisor.engine.events import InputWait, RankInputWait, RunFinished
from rankvisor.engine.supervisor import Supervisor
from rankvisor.engine.supervisor.run_config import SupervisorConfig

from tests.conftest import BIN, GLOO_JOBS, PYTHON, wait_until

pytestmark = [pytest.mark.torch, GLOO_JOBS]

JOB = BIN / "gloo_prompt.py"
_WHERE = re.compile(r"^> (?P<file>\S+)\((?P<line>\d+)\)(?P<func>\S+)\(\)$", re.M)


def _reading_stdin(pid: int) -> bool:
    """The rank sleeps in a read of its stdin pipe (what the detector checks)."""
    try:
        wchan = Path(f"/proc/{pid}/wchan").read_text()
        fd0 = os.readlink(f"/proc/{pid}/fd/0")
    except OSError:
        return False
    return "pipe" in wchan and fd0.startswith("pipe:")


def test_a_rank_at_a_prompt_when_its_peer_times_out_is_the_suspect_paused(
    tmp_path: Path,
) -> None:
    read_end, write_end = os.pipe()
    config = SupervisorConfig(
        entrypoint=PYTHON, args=("-u", str(JOB), "4"), nprocs=2, log_dir=str(tmp_path),
        term_timeout=2.0, sample_interval=0,
    )
    try:
        with Supervisor(config, stdin=read_end) as sup:
            out = Path(sup.snapshot().ranks[0].stdout_path)
            wait_until(lambda: out.exists() and "(Pdb) " in out.read_text(), timeout=60)
            pid = sup.snapshot().ranks[0].pid
            assert pid is not None
            wait_until(lambda: _reading_stdin(pid), timeout=10)
            m = _WHERE.search(out.read_text())
            assert m is not None
            where = f"{Path(m['file']).name}:{m['line']} in {m['func']}"
            wait = InputWait(since=time.time(), prompt="(Pdb) ", where=where)
            sup._events.publish_now(RankInputWait(0, wait, attempt=0))  # the detector's event
            finished = sup.wait(timeout=120)
    finally:
        os.close(read_end)
        os.close(write_end)
    assert isinstance(finished, RunFinished)
    # pdb stops at the line after ``breakpoint()``: the next one to run.
    line = 1 + next(
        n for n, text in enumerate(JOB.read_text().splitlines(), 1)
        if text.strip().startswith("breakpoint()")
    )
    s = finished.suspect
    assert s is not None and (s.rank, s.kind, s.ranks) == (0, "paused", (0,)), s
    assert s.reason.startswith(
        f'rank 0: paused by a person at gloo_prompt.py:{line} in <module> '
        f'(waiting at "(Pdb)" since '
    ), s.reason
    # torch's root cause is unchanged: rank 1, whose all_reduce timed out.
    assert finished.root_cause_rank == 1
    assert 0 in finished.result.stopped and 1 in finished.result.failures
