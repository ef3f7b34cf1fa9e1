"""A real run served on its control socket from the test's own process, as the supervisor
process serves one: a Supervisor wrapped in a RunHost (socket, registry entry, status.json).

Being in the test's process, the ControlServer's client count can be read directly: each
viewer that attaches (a ``rankvisor serve`` session, an ``attach``) is one client.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from rankvisor.engine.control.host import RunHost
from rankvisor.engine.supervisor import Supervisor
from rankvisor.engine.supervisor.run_config import SupervisorConfig

from tests.conftest import PYTHON

# A rank that waits for a signal: it runs until it is told otherwise.
WAIT = "import signal\nsignal.pause()\n"


@dataclass
class HostedRun:
    sup: Supervisor
    host: RunHost
    run_dir: str

    @property
    def run_id(self) -> str:
        return self.sup.snapshot().run_id

    @property
    def clients(self) -> int:
        """Viewers connected to the run's control socket now."""
        return self.host.clients

    def rank_pids(self) -> list[int | None]:
        return [r.pid for r in self.sup.snapshot().ranks]

    def all_running(self) -> bool:
        return all(r.state.is_alive for r in self.sup.snapshot().ranks)


def hosted_run(log_dir: Path, nprocs: int = 2) -> Iterator[HostedRun]:
    """Generator for a fixture: a running run, shut down (ranks gone, socket closed) after."""
    config = SupervisorConfig(
        entrypoint=PYTHON, args=("-c", WAIT), nprocs=nprocs, log_dir=str(log_dir),
        term_timeout=5.0, sample_interval=0,
    )
    sup = Supervisor(config)
    host = RunHost(sup, mode="headless", exit_status=lambda: None)
    try:
        sup.start()
        run_dir = host.started()
        yield HostedRun(sup, host, run_dir)
    finally:
        sup.shutdown()
        host.close()
