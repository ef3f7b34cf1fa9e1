"""The suspect on real gloo jobs: a silent hang, a raise, a segfault, a SIGKILL from outside,
a person's signal, two ranks failing together, and the demo itself.

Each job is ``tests/bin/sv_gloo_suspect.py`` on 3 ranks (an all_reduce a step, a ``waiting``
redraw while a collective waits), with a short gloo timeout and term timeout.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from rankvisor.engine.events import RankOutput, RanksSignalled, RunFinished
from rankvisor.engine.handle import SignalRanks
from rankvisor.engine.supervisor import Supervisor
from rankvisor.engine.supervisor.run_config import SupervisorConfig

from tests.conftest import BIN, GLOO_JOBS, PYTHON, wait_until
from tests.engine.supervisor_helpers import Recorder

pytestmark = [pytest.mark.processes, pytest.mark.gloo, pytest.mark.torch, GLOO_JOBS]

ROOT = Path(__file__).parents[1]
JOB = str(BIN / "sv_gloo_suspect.py")


def _config(tmp_path: Path, *args: str) -> SupervisorConfig:
    return SupervisorConfig(
        entrypoint=PYTHON, args=("-u", JOB, *args), nprocs=3, log_dir=str(tmp_path),
        term_timeout=2.0, sample_interval=0,
        # The rules read from output and signals; the Flight Recorder's verdict, which ranks
        # above them, has its own tests (tests/test_collectives_gloo.py).
        collectives=False,
    )


def _run(tmp_path: Path, *args: str) -> RunFinished:
    with Supervisor(_config(tmp_path, *args)) as sup:
        finished = sup.wait(timeout=120)
    assert isinstance(finished, RunFinished)
    return finished


def _stdout(sup: Supervisor, rank: int) -> str:
    path = sup.snapshot().ranks[rank].stdout_path
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def test_a_silent_hang_names_the_silent_rank_not_the_first_timeout(tmp_path: Path) -> None:
    # The hang must be three times the peers' silence before the failure began. That
    # silence runs from when the peers last wrote (not when their lines were read) to when
    # the first of them recorded its error (not its exit): a loaded machine moves neither
    # (the next test holds the pump and slows the exits).
    finished = _run(tmp_path, "--hang", "1", "--timeout", "5")
    s = finished.suspect
    assert s is not None and s.rank == 1 and s.kind == "silence", s
    assert re.match(
        r"rank 1: silent \d+\.\d s before the first failure; last line: step 4", s.reason
    )
    # torch's root cause is unchanged: a rank whose collective timed out first.
    assert finished.root_cause_rank in (0, 2)
    assert 1 not in finished.result.failures  # stopped by the teardown: not a failure


def test_a_silent_hang_is_named_though_the_peers_last_lines_are_read_after_the_failure(
    tmp_path: Path,
) -> None:
    # A loaded machine, as a full run under load made it:
    # - the pump reads the peers' last "waiting" redraws only after the first failure. A
    #   sink stands for that: it holds the pump's thread (which delivers to the sinks) from a
    #   peer's redraw at 2 s until the supervisor has seen a peer fail. Those lines are still
    #   what the peers did before it; timed by when they were read, the peers looked silent
    #   for three seconds;
    # - the peers exit 3 s after their errors are recorded (--slow-exit). Measured to their
    #   exits, they looked silent for 3 s, and 5 s of hang was not three times that.
    # Either way the hang was called "outlived".
    held: list[str] = []

    def failed(sup: Supervisor) -> bool:
        return any(sup.snapshot().ranks[r].state.is_final for r in (0, 2))

    def sink(event: object) -> None:
        if held or not isinstance(event, RankOutput) or event.rank not in (0, 2):
            return
        m = re.search(r"waiting\s+(\d+\.\d)s", event.partial)
        if m and float(m.group(1)) >= 2.0:
            held.append(event.partial)
            wait_until(lambda: failed(sup), timeout=60)

    with Supervisor(_config(tmp_path, "--hang", "1", "--timeout", "5", "--slow-exit", "3")) as sup:
        sup.subscribe(sink)
        finished = sup.wait(timeout=120)
    assert isinstance(finished, RunFinished) and held
    s = finished.suspect
    assert s is not None and s.rank == 1 and s.kind == "silence", s


def test_a_hang_without_output_names_the_rank_that_outlived_the_timeouts(
    tmp_path: Path,
) -> None:
    finished = _run(tmp_path, "--hang", "1", "--timeout", "3", "--no-heartbeat")
    s = finished.suspect
    assert s is not None and s.rank == 1 and s.ranks == (1,), s
    # Every rank stopped writing together, but the others' tracebacks (written before they
    # exited) make rank 1 the silent one; were they not read in time, rank 1 is still the
    # one that was running, without an error, when the others' collectives timed out.
    assert (s.kind, s.reason.split(":")[1].split()[0]) in (
        ("silence", "silent"), ("outlived", "still"),
    )


def test_a_raise_is_the_suspect_and_the_peers_knock_on_errors_are_not(tmp_path: Path) -> None:
    finished = _run(tmp_path, "--raise", "2", "--timeout", "30")
    s = finished.suspect
    assert s is not None and s.rank == 2 and s.kind == "failure", s
    assert s.ranks == (2,)
    assert "RuntimeError: rank 2 raised on purpose at step 5" in s.reason
    assert finished.root_cause_rank == 2


def test_a_segfault_is_the_suspect(tmp_path: Path) -> None:
    finished = _run(tmp_path, "--segv", "1", "--timeout", "30")
    s = finished.suspect
    assert s is not None and s.rank == 1 and s.kind == "failure", s
    assert "SIGSEGV" in s.reason


def test_a_sigkill_from_outside_is_the_suspect(tmp_path: Path) -> None:
    with Supervisor(_config(tmp_path, "--wait", "1", "--timeout", "30")) as sup:
        wait_until(lambda: "waiting to be killed" in _stdout(sup, 1), timeout=60)
        pid = sup.snapshot().ranks[1].pid
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        finished = sup.wait(timeout=60)
    assert isinstance(finished, RunFinished)
    s = finished.suspect
    assert s is not None and s.rank == 1 and s.kind == "failure", s
    assert "killed by SIGKILL, not sent by rankvisor" in s.reason


def test_a_rank_a_person_killed_first_is_the_suspect(tmp_path: Path) -> None:
    rec = Recorder()
    with Supervisor(_config(tmp_path, "--wait", "1", "--timeout", "30")) as sup:
        sup.subscribe(rec)
        wait_until(lambda: "waiting to be killed" in _stdout(sup, 1), timeout=60)
        assert sup.execute(SignalRanks((1,), signal.SIGUSR1)).ok
        finished = sup.wait(timeout=60)
    assert isinstance(finished, RunFinished)
    s = finished.suspect
    assert s is not None and s.rank == 1 and s.kind == "signal", s
    assert re.match(r"rank 1: killed by your SIGUSR1 at \d\d:\d\d:\d\d; the others failed after",
                    s.reason)
    # Rank 1's death was our doing, so torch's root cause is a knock-on rank.
    assert 1 in finished.result.stopped and finished.root_cause_rank in (0, 2)
    sent = rec.of(RanksSignalled)
    assert (sent[0].ranks, sent[0].signal_name, sent[0].by) == ((1,), "SIGUSR1", "person")
    assert all(e.by == "rankvisor" for e in sent[1:])  # the teardown after the failure


def test_two_ranks_failing_together_are_both_named_the_earlier_first(tmp_path: Path) -> None:
    finished = _run(tmp_path, "--raise", "1,2", "--timeout", "30")
    s = finished.suspect
    assert s is not None and s.kind == "failure", s
    # The second's exit may be seen after the first's teardown began: it is then "stopped",
    # yet its error file, written before the teardown reached it, says it failed on its own.
    ended = {**finished.result.stopped, **finished.result.failures}
    first = min((1, 2), key=lambda r: ended[r].exit_time_ns or 0)
    assert s.ranks == (first, 3 - first) and s.rank == first
    assert s.reason.startswith(f"rank {first}: failed on its own first (exit code 1): "
                               f"RuntimeError: rank {first} raised on purpose")
    assert f"; also rank {3 - first}: failed on its own" in s.reason
    assert f"rank {3 - first} raised on purpose" in s.reason


def test_the_demo_names_rank_3_with_its_silence(tmp_path: Path) -> None:
    # The silence rule's words: the Flight Recorder, which ranks above it, would name rank 3
    # as never entering its all_reduce (tests/test_collectives_gloo.py).
    cmd = [sys.executable, "-m", "rankvisor.tui", "demo", "--headless", "--log-dir", str(tmp_path),
           "--term-timeout", "2", "--no-collectives"]
    env = {**os.environ, "DEMO_STALL_STEP": "10", "PYTHONPATH": str(ROOT)}
    res = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=240, env=env)
    assert res.returncode == 1, res.stderr[-3000:]
    assert re.search(
        r"^rankvisor: suspect: rank 3: silent \d+\.\d s before the first failure; last line: "
        r"UserWarning: rank 3: WARNING data loader worker has not answered \(stalled\)$",
        res.stderr, re.M,
    ), res.stderr[-3000:]
    assert "rankvisor: root cause: rank 2 failed first" in res.stderr
    # Rank 2 raised: the root-cause line says so, no cause line repeats it. The report names
    # every stack dump saved for the run (rank 3 is SIGKILLed after it ignored SIGTERM).
    assert not re.search(r"^rankvisor: rank 2: ", res.stderr, re.M), res.stderr[-3000:]
    (run_dir,) = tmp_path.iterdir()
    said = re.findall(r"^rankvisor: stacks saved: (.+)$", res.stderr, re.M)
    assert said == sorted(str(p) for p in (run_dir / "stacks").glob("*.txt"))
    status = json.loads((run_dir / "status.json").read_text())
    assert status["suspect"]["rank"] == 3 and status["suspect"]["ranks"] == [3]
    assert status["suspect"]["reason"].startswith("rank 3: silent ")
    assert status["root_cause"]["rank"] == 2
    # events.ndjson carries it too (every viewer, and a replay, reads the same).
    events = (run_dir / "events.ndjson").read_text().splitlines()
    finished = [json.loads(x) for x in events if '"RunFinished"' in x]
    assert finished[-1]["e"]["suspect"]["rank"] == 3
