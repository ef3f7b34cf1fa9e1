"""Real supervisor processes for the lifecycle tests, and the cleanup that ends them all.

Each run's ranks are ``tests/bin/sv_rank.py`` with ``--pid-dir``: every incarnation writes
its pid and its descendants' pids there, so a test can check that each one is gone and the
cleanup can end any that is not (by pid *and* start time: a recycled pid is never hit).
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from rankvisor.engine.control.status import read_status
from rankvisor.engine.entry.daemon import Request
from rankvisor.engine.entry.spawn import Started, start_supervisor
from rankvisor.engine.process.guard import starttime
from rankvisor.engine.supervisor.run_config import SupervisorConfig

from tests.conftest import BIN, PYTHON, pid_alive, wait_until

SV_RANK = str(BIN / "sv_rank.py")

START_S = 30.0
"""Bound on a run's start, and on the other waits: the machine is shared and busy."""


@dataclass
class LiveRun:
    """A supervisor process started by a test, and where its ranks write their pids."""

    started: Started
    pid_dir: Path
    nprocs: int
    seen: dict[int, int | None] = field(default_factory=dict)
    """Every pid the test learnt of, with its start time (for the cleanup)."""

    @property
    def pid(self) -> int:
        return self.started.pid

    @property
    def run_dir(self) -> str:
        return self.started.run_dir

    @property
    def process(self) -> subprocess.Popen[bytes] | None:
        """None for a supervisor another process started (it is not our child)."""
        return self.started.process if self.started.process.pid == self.pid else None

    def exited(self) -> bool:
        """The supervisor process has exited (and, when it is our child, been reaped)."""
        if self.process is not None:
            return self.process.poll() is not None
        return not pid_alive(self.pid) or starttime(self.pid) != self.seen.get(self.pid)

    def pids(self, rank: int, restart: int = 0) -> list[int]:
        """The pids of one incarnation of ``rank``: the rank first, then its descendants."""
        path = self.pid_dir / f"{rank}.{restart}.pids"
        wait_until(path.exists, START_S)
        pids = [int(x) for x in path.read_text().split()]
        for pid in pids:
            self.seen.setdefault(pid, starttime(pid))
        return pids

    def all_pids(self) -> list[int]:
        """Every pid any incarnation wrote so far, and the supervisor's (first)."""
        for path in self.pid_dir.glob("*.pids"):
            rank, restart, _ = path.name.split(".")
            self.pids(int(rank), int(restart))
        return list(self.seen)

    def status(self) -> dict[str, Any]:
        status = read_status(self.run_dir)
        assert status is not None
        return status

    def wait_status(self, predicate: Callable[[dict[str, Any]], object],
                    timeout: float = START_S) -> dict[str, Any]:
        def check() -> dict[str, Any] | None:
            status = read_status(self.run_dir)
            return status if status is not None and predicate(status) else None

        found = wait_until(check, timeout)
        assert isinstance(found, dict)
        return found

    def wait_gone(self, timeout: float = START_S) -> None:
        """The supervisor exited and every process of the run is gone."""
        wait_until(self.exited, timeout)
        pids = self.all_pids()
        wait_until(lambda: not [p for p in pids if pid_alive(p)], timeout)

    def kill_all(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self.all_pids()
        for pid, start in self.seen.items():
            # The guard should have done it; a leftover must not outlive the test either.
            if start is not None and pid_alive(pid) and starttime(pid) == start:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass


class Daemons:
    """Starts supervisor processes (``start_supervisor``) and ends them all at the end."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.runs: list[LiveRun] = []

    def config(self, *rank_args: str, nprocs: int = 2, pid_dir: Path,
               only: dict[int, tuple[str, ...]] | None = None, **kw: Any) -> SupervisorConfig:
        """sv_rank.py with ``rank_args`` for every rank, plus ``only[r]`` for rank r."""
        kw.setdefault("term_timeout", 2.0)
        kw.setdefault("sample_interval", 0)
        kw.setdefault("log_dir", str(self.tmp_path / "logs"))
        args = (SV_RANK, "--pid-dir", str(pid_dir), *rank_args)
        return SupervisorConfig(
            entrypoint=PYTHON, args=args, nprocs=nprocs,
            rank_args={r: (*args, *extra) for r, extra in (only or {}).items()}, **kw,
        )

    def start(self, *rank_args: str, nprocs: int = 2, expect_viewer: bool = False,
              on_failure: str | None = None, wait_ranks: bool = True,
              only: dict[int, tuple[str, ...]] | None = None, **kw: Any) -> LiveRun:
        pid_dir = self.tmp_path / f"pids{len(self.runs)}"
        pid_dir.mkdir()
        config = self.config(*rank_args, nprocs=nprocs, pid_dir=pid_dir, only=only, **kw)
        started = start_supervisor(
            Request(config, on_failure=on_failure, expect_viewer=expect_viewer))
        run = LiveRun(started, pid_dir, nprocs, {started.pid: starttime(started.pid)})
        self.runs.append(run)
        if wait_ranks:
            for rank in range(nprocs):
                run.pids(rank)
        return run

    def adopt(self, started: Started, pid_dir: Path, nprocs: int) -> LiveRun:
        """A supervisor another process started (``started.process`` is then some other
        process of ours, or a placeholder): cleaned up all the same, by pid and start time."""
        run = LiveRun(started, pid_dir, nprocs, {started.pid: starttime(started.pid)})
        self.runs.append(run)
        return run

    def close(self) -> None:
        for run in self.runs:
            run.kill_all()


@pytest.fixture
def daemons(tmp_path: Path) -> Iterator[Daemons]:
    d = Daemons(tmp_path)
    yield d
    d.close()
