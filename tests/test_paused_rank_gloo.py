"""A person at rank 0's pdb prompt while rank 1's gloo all_reduce times out: the suspect is
rank 0, paused by a person at gloo_prompt.py:N, not the rank that timed out nor a silent one.

The ranks' stdin is the pipe the supervisor holds for each (``--stdin pipe``), and nobody
answers: the engine's own detector finds rank 0 blocked reading it and publishes the wait.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from rankvisor.engine.events import RunFinished
from rankvisor.engine.supervisor import Supervisor
from rankvisor.engine.supervisor.run_config import SupervisorConfig

from tests.conftest import BIN, GLOO_JOBS, PYTHON, wait_until

pytestmark = [pytest.mark.processes, pytest.mark.gloo, pytest.mark.torch, GLOO_JOBS]

JOB = BIN / "gloo_prompt.py"


def test_a_rank_at_a_prompt_when_its_peer_times_out_is_the_suspect_paused(
    tmp_path: Path,
) -> None:
    config = SupervisorConfig(
        entrypoint=PYTHON, args=("-u", str(JOB), "4"), nprocs=2, log_dir=str(tmp_path),
        term_timeout=2.0, sample_interval=0, stdin="pipe",
    )
    with Supervisor(config) as sup:
        wait_until(lambda: sup.snapshot().ranks[0].input_wait is not None, timeout=60)
        finished = sup.wait(timeout=120)
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
