"""Shared helpers for the Supervisor tests: start a run of sv_rank.py and record its events."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any, Callable

import pytest
from rankvisor.engine.events import Event, RankStateChanged
from rankvisor.engine.states import RankState
from rankvisor.engine.supervisor import Supervisor
from rankvisor.engine.supervisor.run_config import SupervisorConfig

from tests.conftest import BIN, PYTHON, wait_until


class Recorder:
    """An event sink that keeps every event (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.events: list[Event] = []

    def __call__(self, event: Event) -> None:
        with self._lock:
            self.events.append(event)

    def of(self, kind: type, **match: Any) -> list[Any]:
        with self._lock:
            return [
                e for e in self.events
                if isinstance(e, kind) and all(getattr(e, k) == v for k, v in match.items())
            ]

    def states(self, rank: int) -> list[RankState]:
        """The states ``rank`` moved into, in order."""
        return [e.new for e in self.of(RankStateChanged, rank=rank)]

    def wait_state(self, rank: int, state: RankState, count: int = 1, timeout: float = 15) -> None:
        wait_until(lambda: self.states(rank).count(state) >= count, timeout=timeout)


class Run:
    """A started Supervisor over ``tests/bin/sv_rank.py`` with a pid directory."""

    def __init__(self, sup: Supervisor, rec: Recorder, pid_dir: Path) -> None:
        self.sup = sup
        self.rec = rec
        self.pid_dir = pid_dir

    def pids(self, rank: int, restart_count: int = 0, timeout: float = 15) -> list[int]:
        """The pids rank wrote (itself first, then its children), once it wrote them."""
        path = self.pid_dir / f"{rank}.{restart_count}.pids"
        wait_until(path.exists, timeout=timeout)
        return [int(x) for x in path.read_text().split()]

    def env(self, rank: int, restart_count: int = 0) -> dict[str, str]:
        self.pids(rank, restart_count)
        return json.loads((self.pid_dir / f"{rank}.{restart_count}.env.json").read_text())


@pytest.fixture(name="supervise")
def supervise_fixture(tmp_path: Path) -> Any:
    """``supervise(nprocs, *sv_rank_args, **config)`` -> a started Run; shut down after."""
    runs: list[Supervisor] = []

    def make(nprocs: int = 2, *args: str, **config: Any) -> Run:
        pid_dir = tmp_path / "pids"
        pid_dir.mkdir(exist_ok=True)
        config.setdefault("log_dir", str(tmp_path / "logs"))
        config.setdefault("term_timeout", 5.0)
        config.setdefault("sample_interval", 0)
        cfg = SupervisorConfig(
            entrypoint=PYTHON,
            args=("-u", str(BIN / "sv_rank.py"), "--pid-dir", str(pid_dir), *args),
            nprocs=nprocs,
            **config,
        )
        sup = Supervisor(cfg)
        rec = Recorder()
        sup.subscribe(rec)
        runs.append(sup)
        sup.start()
        return Run(sup, rec, pid_dir)

    yield make
    for sup in runs:
        sup.shutdown(timeout_s=1.0)


def attempt_dir(run: Run, attempt: int) -> Path:
    return Path(run.sup.snapshot().log_dir) / f"attempt_{attempt}"


Factory = Callable[..., Run]
