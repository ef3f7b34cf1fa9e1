"""A person at rank 0's pdb prompt in a gloo job whose peer waits for it in an all_reduce
(torch's Flight Recorder says rank 0 never entered it): rank 0 is never the live suspect,
neither while it sits at the prompt, nor between the commands a person types there, nor
after ``c``; and nothing calls the ranks quiet once it continued (the rules:
tests/engine/test_live_rule.py)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from rankvisor.engine.events import RunFinished, SupervisorNotice
from rankvisor.engine.handle import SendInput
from rankvisor.engine.supervisor import Supervisor
from rankvisor.engine.supervisor.run_config import SupervisorConfig

from tests.conftest import BIN, GLOO_JOBS, PYTHON, wait_until
from tests.engine.supervisor_helpers import Recorder

pytestmark = [pytest.mark.processes, pytest.mark.gloo, pytest.mark.torch, GLOO_JOBS]


def test_a_rank_at_a_prompt_is_never_the_live_suspect(tmp_path: Path) -> None:
    config = SupervisorConfig(
        entrypoint=PYTHON, args=("-u", str(BIN / "gloo_prompt_steps.py"), "3"), nprocs=2,
        log_dir=str(tmp_path), term_timeout=2.0, sample_interval=0, stdin="pipe",
    )
    rec = Recorder()
    readings = []
    with Supervisor(config) as sup:
        sup.subscribe(rec)

        def at_prompt() -> bool:
            readings.append(sup.live_suspect)
            return sup.snapshot().ranks[0].input_wait is not None

        wait_until(at_prompt, timeout=60)
        # A person reads for longer than a wait that names a rank (4 s), then types.
        deadline = time.monotonic() + 6
        while time.monotonic() < deadline:
            readings.append(sup.live_suspect)
            time.sleep(0.05)
        for line in ("p x", "p step", "c"):
            assert sup.execute(SendInput((0,), line)).ok
            if line != "c":
                wait_until(at_prompt, timeout=30)
            for _ in range(20):  # between the answer and the next prompt
                readings.append(sup.live_suspect)
                time.sleep(0.05)
        finished = sup.wait(timeout=60)
    assert isinstance(finished, RunFinished) and not finished.result.failures
    assert not any(r is not None and r.suspect is not None for r in readings), readings
    said = [n.message for n in rec.of(SupervisorNotice)]
    assert not [m for m in said if m.startswith("live suspect") or "quiet" in m], said
