"""status.json while a healthy run lasts: rewritten once a tick (no lifecycle event needed),
so that each rank's ``step`` and ``last_output_age_s`` are fresh for a cron job or a script,
and ``written_at`` moves on; output alone never costs a write per line. The refresh is one
of the readings the Supervisor's run loop takes (its beat), not a thread of its own."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from rankvisor.engine.control.host import RunHost
from rankvisor.engine.supervisor import Supervisor
from rankvisor.engine.supervisor.run_config import SupervisorConfig

from tests.conftest import PYTHON, wait_until

pytestmark = pytest.mark.processes

# A step a tenth of a second for a long while: no rank starts, exits or restarts meanwhile.
JOB = ("import time\n"
       "for i in range(100000):\n"
       "    print(f'step {i}', flush=True)\n"
       "    time.sleep(0.1)\n")


def _status(run_dir: str) -> dict:
    return json.loads(Path(run_dir, "status.json").read_text())


def _all_stepped(status: dict) -> dict | None:
    """``status`` once every rank has a step, else None."""
    return status if all(r["step"] is not None for r in status["ranks"]) else None


def test_a_healthy_run_s_status_carries_fresh_steps(tmp_path: Path) -> None:
    config = SupervisorConfig(entrypoint=PYTHON, args=("-u", "-c", JOB), nprocs=2,
                              log_dir=str(tmp_path), term_timeout=2.0, sample_interval=0,
                              collectives=False)
    sup = Supervisor(config)
    host = RunHost(sup, mode="headless", exit_status=lambda: None)
    try:
        sup.start()
        run_dir = host.started()
        # Every rank has written a step (a rank with no output yet has no output age).
        first = wait_until(lambda: _all_stepped(_status(run_dir)), timeout=30)
        assert first["state"] == "running" and "written_at" in first
        assert all(isinstance(r["last_output_age_s"], float) for r in first["ranks"])
        # Later writes, with no event between them: the steps move, and so does written_at.
        later = wait_until(lambda: (s := _status(run_dir))["ranks"][0]["step"]
                           > first["ranks"][0]["step"] and s, timeout=30)
        assert later["written_at"] > first["written_at"]
        assert later["updated"] == later["written_at"]
        # One write a tick, not one a line: the file was replaced fewer times than the ranks
        # wrote steps in that span (they write ten a second).
        steps = later["ranks"][0]["step"] - first["ranks"][0]["step"]
        writes = 0
        seen = later["written_at"]
        target = later["ranks"][0]["step"] + 30
        while _status(run_dir)["ranks"][0]["step"] < target:
            now = _status(run_dir)["written_at"]
            writes += now != seen
            seen = now
            time.sleep(0.02)
        assert writes < 30 and steps >= 1
        # The refresh rides the run loop's beat (taken on its thread), not a beat of its own.
        assert host._ticker._beat is sup.beat
    finally:
        sup.shutdown()
        host.close()
