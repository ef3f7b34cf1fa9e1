"""Runs on disk for the control tests: real status.json files, real "supervisor" processes.

A live ``sleep`` stands in for a running supervisor; a killed and reaped one for a
supervisor that died (its run reads as stale).
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rankvisor.engine.control import registry
from rankvisor.engine.control.status import build_status, process_start_time, write_status
from rankvisor.engine.errors import ProcessFailure
from rankvisor.engine.events import RunFinished
from rankvisor.engine.handle import RankInfo, RunInfo
from rankvisor.engine.result import RunProcsResult
from rankvisor.engine.states import RankState


class Supervisors:
    """Starts stand-in supervisor processes and ends them all at the end of the test."""

    def __init__(self) -> None:
        self._procs: list[subprocess.Popen[bytes]] = []

    def live(self) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(["sleep", "300"])
        self._procs.append(proc)
        return proc

    def dead(self) -> tuple[int, int]:
        """The pid and start time of a process that has exited and been reaped."""
        proc = self.live()
        start = process_start_time(proc.pid)
        assert start is not None
        proc.kill()
        proc.wait()
        return proc.pid, start

    def close(self) -> None:
        for proc in self._procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


@pytest.fixture
def supervisors() -> Iterator[Supervisors]:
    s = Supervisors()
    yield s
    s.close()


@pytest.fixture
def state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private state directory for the test (RANKVISOR_STATE_DIR)."""
    path = tmp_path / "state"
    monkeypatch.setenv("RANKVISOR_STATE_DIR", str(path))
    return path


def run_info(run_id: str, run_dir: str, states: list[RankState], *,
             exitcodes: list[int | None] | None = None, attempt: int = 0,
             finished: bool = False) -> RunInfo:
    codes = exitcodes or [None] * len(states)
    ranks = tuple(
        RankInfo(rank=i, state=s, pid=(1000 + i) if s.is_alive else None, restart_count=0,
                 attempt=attempt, stdout_path="", stderr_path="", error_file="",
                 exitcode=codes[i])
        for i, s in enumerate(states)
    )
    return RunInfo(name="default", nprocs=len(states), run_id=run_id, log_dir=run_dir,
                   attempt=attempt, term_timeout_s=30.0, ranks=ranks, finished=finished)


def failed_finish(rank: int, exitcode: int, nprocs: int, attempt: int = 0) -> RunFinished:
    failure = ProcessFailure(rank, 4242, exitcode, "")
    result = RunProcsResult(failures={rank: failure},
                            stdouts=dict.fromkeys(range(nprocs), ""),
                            stderrs=dict.fromkeys(range(nprocs), ""))
    return RunFinished(result=result, attempt=attempt, root_cause_rank=rank)


def make_run(
    log_dir: Path,
    run_id: str,
    *,
    pid: int,
    start: int | None = None,
    states: list[RankState] | None = None,
    finished: RunFinished | None = None,
    exitcode: int | None = None,
    started: float | None = None,
    register: bool = True,
    attempt: int = 0,
) -> registry.RunEntry:
    """A run dir ``<log_dir>/<run_id>_<8 hex>`` with a status.json, registered unless told."""
    run_dir = log_dir / f"{run_id}_{os.urandom(4).hex()}"
    (run_dir / f"attempt_{attempt}").mkdir(parents=True)
    start = process_start_time(pid) if start is None else start
    started = time.time() if started is None else started
    states = states or [RankState.RUNNING, RankState.RUNNING]
    codes: list[int | None] = [0 if s is RankState.SUCCEEDED else None for s in states]
    if finished is not None and finished.root_cause_rank is not None:
        codes[finished.root_cause_rank] = finished.result.failures[
            finished.root_cause_rank].exitcode
    info = run_info(run_id, str(run_dir), states, exitcodes=codes, attempt=attempt,
                    finished=finished is not None)
    socket = registry.new_socket_path()
    status = build_status(info, finished, socket=socket, supervisor_pid=pid,
                          supervisor_start=start or 0, exitcode=exitcode, started=started)
    write_status(str(run_dir), status)
    if register:
        return registry.register(run_id, str(run_dir), socket, supervisor_pid=pid,
                                 supervisor_start=start, started=started, mode="headless")
    return registry.RunEntry(run_id, str(run_dir), socket, pid, start, started)


def status_of(entry: registry.RunEntry) -> dict[str, Any]:
    from rankvisor.engine.control.status import read_status

    status = read_status(entry.run_dir)
    assert status is not None
    return status
