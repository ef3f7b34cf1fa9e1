"""torch's file-timer watchdog and health check, run by the Supervisor when enabled."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from rankvisor.engine.events import RankStateChanged, TimerExpired
from rankvisor.engine.states import RankState
from rankvisor.engine.supervisor import Supervisor, SupervisorConfig
from rankvisor.engine.supervisor.timer_watchdog import HealthCheck, Watchdog

from tests.conftest import BIN, PYTHON, wait_until
from tests.engine.supervisor_helpers import Recorder

pytestmark = [pytest.mark.processes, pytest.mark.torch]


def test_overrunning_rank_is_killed_and_reported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    timer_file = tmp_path / "timer_pipe"
    monkeypatch.setenv("TORCHELASTIC_ENABLE_FILE_TIMER", "1")
    monkeypatch.setenv("TORCHELASTIC_TIMER_FILE", str(timer_file))
    monkeypatch.setenv("TORCHELASTIC_HEALTH_CHECK_PORT", "0")
    cfg = SupervisorConfig(
        entrypoint=PYTHON, args=("-u", str(BIN / "sv_timer_overrun.py"), "--overrun-rank", "1"),
        nprocs=2, log_dir=str(tmp_path / "logs"), sample_interval=0, term_timeout=5,
        teardown_on_failure=False,
    )
    sup = Supervisor(cfg)
    rec = Recorder()
    sup.subscribe(rec)
    sup.start()
    try:
        rec.wait_state(1, RankState.SIGNALLED, timeout=60)
        (ev,) = rec.of(RankStateChanged, rank=1, new=RankState.SIGNALLED)
        # The overrun is the rank's own failure (a root cause), not something we did.
        assert ev.signal_name == "SIGKILL" and not ev.caused_by_us
        expired = wait_until(lambda: rec.of(TimerExpired, rank=1))
        assert expired[0].scope == "slow_step" and expired[0].pid == ev.pid
        assert not rec.of(TimerExpired, rank=0)
        time.sleep(0.3)
        # We are still here (torch's server would have killed its own process), and rank 0
        # kept running.
        assert sup.snapshot().ranks[0].state is RankState.RUNNING
        out = Path(sup.snapshot().ranks[0].stdout_path).read_text()
        assert "rank 0 quick step done" in out
        assert sup._health is not None and sup._health.server is not None
        assert abs(sup._health.server.alive_callback() - time.time()) < 120
    finally:
        sup.shutdown(timeout_s=2)
    assert not timer_file.exists()  # the server removes its pipe when stopped


def test_disabled_unless_asked() -> None:
    assert Watchdog.from_env("r", env={}) is None
    assert Watchdog.from_env("r", env={"TORCHELASTIC_ENABLE_FILE_TIMER": "0"}) is None
    w = Watchdog.from_env("r", env={"TORCHELASTIC_ENABLE_FILE_TIMER": "1"})
    assert w is not None and os.path.basename(w.file_path).startswith("watchdog_timer_")
    assert w.rank_env == {"TORCHELASTIC_TIMER_FILE": w.file_path}
    assert HealthCheck.from_env(lambda: 0, env={}) is None
    assert HealthCheck.from_env(lambda: 0, env={"TORCHELASTIC_HEALTH_CHECK_PORT": "x"}) is None
    assert HealthCheck.from_env(lambda: 0, env={"TORCHELASTIC_HEALTH_CHECK_PORT": "9"}).port == 9
