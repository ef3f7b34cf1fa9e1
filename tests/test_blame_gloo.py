"""Blame on a real gloo job: rankvisor's own teardown SIGTERM is never "from outside".

Rank 1 prints a knock-on's traceback (a peer closed its connection) and is slow to exit;
rank 0 then raises, the first failure; the teardown's SIGTERM ends rank 1 in its exit. Its
failure is torch's (it raised before the signal), but the signal is rankvisor's: its cause
says so, and it is not the first domino (the rules: tests/engine/test_exit_cause.py,
tests/engine/test_suspect_rules.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from rankvisor.engine.events import RunFinished
from rankvisor.engine.supervisor import Supervisor
from rankvisor.engine.supervisor.run_config import SupervisorConfig

from tests.conftest import BIN, GLOO_JOBS, PYTHON

pytestmark = [pytest.mark.processes, pytest.mark.gloo, pytest.mark.torch, GLOO_JOBS]


def test_the_teardown_s_sigterm_is_rankvisors_and_the_raiser_is_the_suspect(
    tmp_path: Path,
) -> None:
    marker = tmp_path / "dying"
    config = SupervisorConfig(
        entrypoint=PYTHON,
        args=("-u", str(BIN / "sv_gloo_suspect.py"), "--dying", "1", "--after", "0",
              "--marker", str(marker), "--timeout", "30"),
        nprocs=3, log_dir=str(tmp_path / "logs"), term_timeout=5.0, sample_interval=0,
        collectives=False,
    )
    with Supervisor(config) as sup:
        finished = sup.wait(timeout=120)
        ranks = sup.snapshot().ranks
    assert isinstance(finished, RunFinished)
    assert finished.root_cause_rank == 0
    one = ranks[1]
    assert one.exitcode == -15
    assert one.exit_cause is not None
    assert "from outside" not in one.exit_cause.text, one.exit_cause
    assert "rankvisor's SIGTERM" in one.exit_cause.text, one.exit_cause
    s = finished.suspect
    assert s is not None and s.rank == 0 and s.ranks == (0,), s
    assert "RuntimeError: rank 0 raised on purpose" in s.reason
    assert "rank 1" not in s.reason, s.reason
