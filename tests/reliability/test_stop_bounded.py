"""``stop`` returns when SIGKILL cannot end a rank (issue 23, case 12).

A rank in D state (a FROZEN v1 freezer group, an NFS server gone) outlives even SIGKILL: the
supervisor said "rank(s) 0 did not exit after SIGKILL", and ``stop`` waited for an end that
never came. Here the rank ignores SIGTERM and the supervisor's SIGKILL is withheld (its
signal sender drops it, as the kernel holds it for a rank in D state), so the rank stays
alive past the supervisor's bounded wait after SIGKILL; ``stop`` must then say so in one
line and exit non-zero, not hang.
"""

from __future__ import annotations

import contextlib
import io
import os
import signal
import threading
from pathlib import Path

import pytest
from rankvisor.engine.control.server import ControlServer
from rankvisor.engine.handle import TerminateRanks
from rankvisor.engine.supervisor import Supervisor
from rankvisor.engine.supervisor.run_config import SupervisorConfig
from rankvisor.tui.cli.command import EXIT_REFUSED
from rankvisor.tui.cli.supervisor_call import connect_and_run

from tests.conftest import BIN, PYTHON, wait_until
from tests.control.runs import make_run, state_dir
from tests.reliability.cli_runs import private_state_dir

pytestmark = pytest.mark.processes

__all__ = ["private_state_dir", "state_dir"]  # fixtures, used by name


def test_stop_returns_non_zero_when_sigkill_does_not_end_a_rank(tmp_path: Path) -> None:
    entry = make_run(tmp_path, "stuck", pid=os.getpid())
    pid_dir = tmp_path / "pids"
    pid_dir.mkdir()
    sup = Supervisor(SupervisorConfig(
        entrypoint=PYTHON, args=("-u", str(BIN / "sv_rank.py"), "--pid-dir", str(pid_dir),
                                 "--ignore-term"),
        nprocs=1, log_dir=str(tmp_path / "logs"), sample_interval=0, term_timeout=5.0,
        kill_wait_s=0.5,
    ))
    real = sup._stopper.signal_slots
    sup._stopper.signal_slots = lambda slots, sig: (  # type: ignore[method-assign]
        [s.rank for s in slots] if sig == signal.SIGKILL else real(slots, sig))
    server = ControlServer(sup, entry.socket)
    server.start()
    sup.start()
    out = io.StringIO()
    codes: list[int] = []

    def stop() -> None:
        with contextlib.redirect_stderr(out):
            codes.append(connect_and_run(
                "stop", entry, lambda _h: TerminateRanks(None, timeout_s=0.2), wait=True))

    try:
        wait_until(lambda: (pid_dir / "0.0.pids").exists())
        t = threading.Thread(target=stop, daemon=True)
        t.start()
        t.join(60)
        assert not t.is_alive(), "stop did not return"
        assert codes == [EXIT_REFUSED]
        assert "rank(s) 0 did not exit after SIGKILL" in out.getvalue()
        assert len(out.getvalue().strip().splitlines()) == 1, out.getvalue()
    finally:
        sup._stopper.signal_slots = real  # type: ignore[method-assign]
        server.close()
        sup.shutdown(timeout_s=2)
