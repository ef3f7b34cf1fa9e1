"""The supervisor stopped, killed, or flooded with ranks at once (issue 35.7).

One real supervisor process (``rankvisor run -D``) with two ranks printing steps, a real
viewer on its socket: SIGSTOP of the supervisor with the viewer
attached makes ``status`` say the status is old and the viewer judge no rank, without a
hang; after SIGCONT the viewer shows the ranks live again, and rank 0 stops at a pdb prompt
that is answered. Then SIGKILL of the supervisor while rank 0 is at the prompt: no rank
outlives it (the guard), and what the ranks wrote is on disk. Last, 64 ranks started at
once: each is followed, ``stop`` ends the run; the supervisor's descriptor and thread
counts are printed.
"""

from __future__ import annotations

import json
import os
import re
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from rankvisor.engine.control.client import RemoteHandle
from rankvisor.engine.control.status import NOT_ANSWERING_S, read_status
from rankvisor.engine.events import Event, RankOutput
from rankvisor.tui.model import RunView

from tests.conftest import pid_alive, wait_until
from tests.debug.test_input_cli import START_S, Runs, cli, runs, stdout_of, waiting

pytestmark = pytest.mark.processes

__all__ = ["runs"]  # the fixture, used by name

JOB = """\
import os, time
x, stopped = 41, False
for i in range(100000):
    print(f"step {i}", flush=True)
    time.sleep(0.1)
    if os.environ["RANK"] == "0" and not stopped and os.path.exists(TRIGGER):
        stopped = True
        breakpoint()
"""
"""Both ranks print steps; rank 0 stops at a pdb prompt once the test makes TRIGGER."""


class _Viewer:
    """A viewer's model folded from a real connection's events (the app's RunView)."""

    def __init__(self, handle: RemoteHandle) -> None:
        self.handle = handle
        self.lock = threading.Lock()
        self.steps: list[int] = []
        info, self.unsubscribe = handle.watch(self._sink)
        self.run = RunView(info)

    def _sink(self, event: Event) -> None:
        with self.lock:
            self.run.apply(event)
            if isinstance(event, RankOutput) and event.lines:
                self.run.ranks[event.rank].saw_output(time.monotonic())  # as the app does
                if event.rank == 1:
                    self.steps += [int(m[1]) for m in re.finditer(r"step (\d+)", "\n".join(
                        event.lines))]

    def judged(self) -> set[int]:
        """The ranks the viewer flags now, as the app asks each second."""
        with self.lock:
            self.run.supervisor_silent_s = self.handle.silent_s()
            self.run.update_progress(time.monotonic())
            return {v.rank for v in self.run.ranks if v.straggler}


def _status_json(run_dir: str) -> dict[str, Any]:
    return json.loads(cli("status", run_dir, "--json").stdout)


def test_a_stopped_then_killed_supervisor(runs: Runs) -> None:
    job, trigger = runs.tmp_path / "stop_job.py", runs.tmp_path / "to_the_prompt"
    job.write_text(f"TRIGGER = {str(trigger)!r}\n" + JOB)
    run_dir = runs.start(str(job), 2)
    status = wait_until(lambda: (s := read_status(run_dir)) and all(
        r["pid"] for r in s["ranks"]) and s, START_S)
    assert isinstance(status, dict)
    sup_pid = status["supervisor_pid"]
    ranks = [r["pid"] for r in status["ranks"]]
    viewer = _Viewer(RemoteHandle.connect(status["socket"], name="test viewer"))
    try:
        wait_until(lambda: len(viewer.steps) > 20, START_S)  # both ranks have a cadence
        assert _status_json(run_dir)["supervisor_answering"] is True

        os.kill(sup_pid, signal.SIGSTOP)
        try:
            wait_until(lambda: viewer.handle.silent_s() >= NOT_ANSWERING_S, START_S)
            old = _status_json(run_dir)
            assert old["supervisor_answering"] is False
            assert old["status_age_s"] >= NOT_ANSWERING_S
            assert "is not answering (stopped? kill -CONT" in cli("status", run_dir).stdout
            # The ranks go on writing their files, the viewer hears none of it (5 s, fifty
            # of their steps): no verdict on them.
            assert viewer.judged() == set()
            assert viewer.run.not_answering
            seen = len(viewer.steps)
        finally:
            os.kill(sup_pid, signal.SIGCONT)
        # Live again: new lines of rank 1, an answer to a request, the status fresh.
        wait_until(lambda: len(viewer.steps) > seen + 5, START_S)
        assert viewer.handle.snapshot().run_id
        wait_until(lambda: _status_json(run_dir)["supervisor_answering"], START_S)
        assert viewer.judged() == set() and not viewer.run.not_answering
        trigger.touch()
        waiting(run_dir, (0,))
        assert cli("input", run_dir, "0", "p x").returncode == 0
        wait_until(lambda: "41" in stdout_of(run_dir, 0), START_S)
        waiting(run_dir, (0,))  # back at the prompt
    finally:
        viewer.unsubscribe()
        viewer.handle.detach()

    os.kill(sup_pid, signal.SIGKILL)
    wait_until(lambda: not any(pid_alive(p) for p in ranks), START_S)  # no orphan
    logs = {p.parent.name: p.read_text() for p in Path(run_dir).rglob("stdout.log")}
    assert "(Pdb) 41" in logs["0"], logs["0"]  # what rank 0 printed at its prompt is kept
    assert "step 0" in logs["1"] and len(logs["1"].splitlines()) > seen + 5
    assert "p x" in "".join(p.read_text() for p in Path(run_dir).rglob("stdin.log"))


NPROCS = 64


def test_64_ranks_at_once_are_followed_and_stopped(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    monkeypatch.setenv("RANKVISOR_STATE_DIR", str(state))
    done = cli("run", "-D", "--nproc-per-node", str(NPROCS), "--term-timeout", "2",
               "--log-dir", str(tmp_path / "logs"), "--no-python", "sh", "-c",
               'echo "rank $RANK up"; exec sleep 120', timeout=2 * START_S)
    assert done.returncode == 0, done.stderr
    run_dir = re.search(r"goes on in (\S+)", done.stdout)[1]  # type: ignore[index]
    try:
        def all_followed() -> dict[str, Any] | None:
            s = read_status(run_dir)
            rows = (s or {}).get("ranks") or []
            heard = [r for r in rows if r["state"] == "running"
                     and r.get("last_output_age_s") is not None]
            return s if len(heard) == NPROCS else None

        status = wait_until(all_followed, 2 * START_S)
        assert isinstance(status, dict)
        pid = status["supervisor_pid"]
        fds = len(os.listdir(f"/proc/{pid}/fd"))
        threads = int(re.search(r"^Threads:\s+(\d+)", Path(f"/proc/{pid}/status").read_text(),
                                re.M)[1])  # type: ignore[index]
        print(f"\nsupervisor of {NPROCS} ranks: {fds} open descriptors, {threads} threads")
        ranks = [r["pid"] for r in status["ranks"]]
        stopped = cli("stop", run_dir, "--timeout", "2", timeout=2 * START_S)
        assert stopped.returncode == 0, stopped.stderr
        wait_until(lambda: (read_status(run_dir) or {}).get("finished"), START_S)
        wait_until(lambda: not any(pid_alive(p) for p in ranks), START_S)
        outs = sorted(Path(run_dir).rglob("stdout.log"))
        assert len(outs) == NPROCS
        assert all(p.read_text().startswith("rank ") for p in outs)
    finally:
        s = read_status(run_dir)
        if s is not None and not s.get("finished"):
            cli("stop", run_dir, "--timeout", "1")
