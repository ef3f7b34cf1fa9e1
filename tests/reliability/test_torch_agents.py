"""torch's LocalElasticAgent over the engine, two agents (issue 23, case 14).

Two agents of torch's own ``LocalElasticAgent`` (c10d rendezvous, 4 function ranks each,
the engine's ``start_processes``) failed about one round in four, up to every round on a
loaded machine: one rank of the eight died of SIGABRT ("terminate called without an active
exception", then the other agent lost the store). The core dump showed why: the rank's
interpreter was finalizing while gloo's worker thread was still dropping the last
collective's work, whose tensors need the GIL; CPython ends such a thread with a forced
unwind, through a C++ destructor, and ``std::terminate`` aborts. The engine's rank exited
the moment its function returned; torch's waits until its parent has read every rank's
return value. Now the engine's does too (``RankSpec.release_file``).

The first test holds the mechanism by ordering, the second runs the two agents (each in an
interpreter of its own, as two nodes) ``ROUNDS`` times; every round must succeed.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from rankvisor.engine import DefaultLogsSpecs, start_processes

from tests.conftest import pid_alive, wait_until

pytestmark = [pytest.mark.processes, pytest.mark.gloo, pytest.mark.torch]

ROOT = Path(__file__).resolve().parents[2]
ROUNDS = int(os.environ.get("RANKVISOR_AGENT_ROUNDS", "3"))
"""Rounds of the two agents (each ~15-40 s on the 2-core VM); 3 by default, more by hand."""


def return_when_told(flag: str, rank: int) -> int:
    """Rank 0 returns at once, saying when its interpreter begins to exit; rank 1 returns
    once ``flag`` exists."""
    if rank == 0:
        import atexit

        atexit.register(Path(flag + ".0-exiting").touch)
    while rank == 1 and not os.path.exists(flag):
        time.sleep(0.01)  # a barrier on a file the test creates, not a wait time
    return os.getpid()


def _sleeping(pid: int) -> bool:
    """Whether ``pid``'s main thread sleeps in ``time.sleep`` (the wait for its release)."""
    try:
        with open(f"/proc/{pid}/wchan") as f:
            return "nanosleep" in f.read()
    except OSError:
        return False


def test_a_rank_that_returned_stays_until_every_rank_has(tmp_path: Path) -> None:
    flag = tmp_path / "go"
    exiting = Path(str(flag) + ".0-exiting")
    ctx = start_processes("t", return_when_told, {0: (str(flag), 0), 1: (str(flag), 1)},
                          {0: {}, 1: {}}, DefaultLogsSpecs(log_dir=str(tmp_path / "logs")))
    try:
        pid0 = ctx.pids()[0]
        ret0 = os.path.join(str(ctx._return_dir), "0.ret")
        wait_until(lambda: os.path.exists(ret0), timeout=60)  # rank 0 returned
        # Either it goes on to exit (its exit handlers run), or it waits to be released.
        wait_until(lambda: exiting.exists() or _sleeping(pid0), timeout=60)
        assert ctx.wait(0) is None
        assert not exiting.exists() and pid_alive(pid0), "rank 0 exited before rank 1 returned"
        flag.touch()
        result = ctx.wait(60)
        assert result is not None and not result.is_failed()
        assert set(result.return_values) == {0, 1}
        assert exiting.exists()  # released: it exited as usual, exit handlers and all
    finally:
        ctx.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize("round_", range(ROUNDS))
def test_two_agents_over_the_engine(tmp_path: Path, round_: int) -> None:
    port, run_id = free_port(), f"agents{os.getpid()}x{round_}"
    nodes = [subprocess.Popen(
        [sys.executable, "-m", "tests.reliability.two_agents", str(node), str(port), run_id,
         str(tmp_path / f"node{node}")],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    ) for node in (0, 1)]
    outs = []
    try:
        for proc in nodes:
            out, _ = proc.communicate(timeout=300)
            outs.append(out)
    finally:
        for proc in nodes:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    results = [json.loads(line.split(" ", 1)[1]) for out in outs
               for line in out.splitlines() if line.startswith("RESULT ")]
    assert [p.returncode for p in nodes] == [0, 0], "\n".join(o[-3000:] for o in outs)
    assert sorted(r for res in results for r in res["returned"]) == list(range(8))
