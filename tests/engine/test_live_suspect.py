"""The live suspect's quiet spells on real processes: a rank still starting up is no hang."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from rankvisor.engine.supervisor import Supervisor
from rankvisor.engine.supervisor.run_config import SupervisorConfig

from tests.conftest import PYTHON, wait_until

pytestmark = pytest.mark.processes

# Four start-up lines, a quiet start (as a rank importing torch, in DDP's set-up, waiting in
# the rendezvous), then a step a tenth of a second five times (a cadence), then a hang.
JOB = (
    "import sys, time\n"
    "for line in ('starting', 'importing', 'loading', 'ready'):\n"
    "    print(line, flush=True)\n"
    "    time.sleep(0.1)\n"
    "time.sleep(6)\n"
    "for i in range(5):\n"
    "    print(f'step {i}', flush=True)\n"
    "    time.sleep(0.1)\n"
    "time.sleep(600)\n"
)


def test_a_quiet_start_is_no_hang_and_a_quiet_spell_after_a_cadence_is(tmp_path: Path) -> None:
    config = SupervisorConfig(
        entrypoint=PYTHON, args=("-u", "-c", JOB), nprocs=2, log_dir=str(tmp_path),
        term_timeout=2.0, sample_interval=0, collectives=False,
    )
    config.live_quiet_s = 2.0
    with Supervisor(config) as sup:
        run_dir = Path(sup.snapshot().log_dir)
        files = lambda: list(run_dir.glob("attempt_0/*/stdout.log"))  # noqa: E731
        wait_until(lambda: len(files()) == 2 and all(b"ready" in f.read_bytes()
                                                     for f in files()))
        # Quiet for 6 s after four lines (no cadence yet): three times the 2 s a hang after
        # a cadence needs.
        readings = []
        while not all(b"step 0" in f.read_bytes() for f in files()):
            readings.append(sup.live_suspect)
            time.sleep(0.1)
        assert len(readings) > 30 and not any(readings)
        reading = wait_until(lambda: sup.live_suspect, timeout=30)
        assert all(b"step 4" in f.read_bytes() for f in files())
        assert reading.since_ns >= min(f.stat().st_mtime_ns for f in files()) - 10**9
