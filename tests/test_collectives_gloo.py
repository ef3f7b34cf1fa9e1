"""torch's Flight Recorder read live from real gloo jobs of 3 ranks (tests/bin/fr_gloo_job.py).

Rank 1 never enters all_reduce #5 while every rank prints a heartbeat from a thread (the hang
output silence cannot explain): while it hangs, ``rankvisor collectives --json`` has the
verdict; after the timeout the suspect is rank 1 with torch's record as its reason. Also: a
script under ``worker_main()`` and one without both serve; a rank restarted alone gets a fresh
socket and answers again; ranks in one all_reduce line at different collective numbers are
two groups of the merged stacks.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import tarfile
from pathlib import Path
from typing import Any

import pytest
from rankvisor.engine.entry.bundle import make_bundle
from rankvisor.engine.events import RunFinished
from rankvisor.engine.forensics.collectives_run import read_run
from rankvisor.engine.forensics.worker_server import ask, socket_path
from rankvisor.engine.handle import DumpStacks, RestartRank
from rankvisor.engine.process.py_bootstrap import ENV_WORKER_SOCKET
from rankvisor.engine.supervisor import Supervisor
from rankvisor.engine.supervisor.run_config import SupervisorConfig

from tests.conftest import BIN, PYTHON, wait_until

pytestmark = [pytest.mark.processes, pytest.mark.gloo, pytest.mark.torch]

JOB = str(BIN / "fr_gloo_job.py")
REASON = "rank 1: never entered all_reduce #5 on pg 0, where ranks 0 and 2 waited"


def _config(tmp_path: Path, *args: str, nprocs: int = 3) -> SupervisorConfig:
    return SupervisorConfig(entrypoint=PYTHON, args=("-u", JOB, *args), nprocs=nprocs,
                            log_dir=str(tmp_path), term_timeout=2.0, sample_interval=0)


@pytest.mark.parametrize("heartbeat", [True, False], ids=["heartbeat", "quiet"])
def test_the_rank_that_never_entered_is_the_suspect(tmp_path: Path, heartbeat: bool) -> None:
    args = ("--skip", "1", "--timeout", "5") + (("--heartbeat",) if heartbeat else ())
    with Supervisor(_config(tmp_path, *args)) as sup:
        finished = sup.wait(timeout=120)
        run_dir = sup.snapshot().log_dir
    assert isinstance(finished, RunFinished)
    s = finished.suspect
    assert s is not None and s.rank == 1 and s.kind == "collective", s
    assert s.reason.startswith(REASON)
    saved = json.loads(Path(run_dir, "collectives", "latest.json").read_text())
    assert [(v["seq"], v["missing"]) for v in saved["verdicts"]] == [(5, [1])]
    # torch's dumps as it wrote them, one per rank, and in the bundle as torchfrtrace reads
    # them (a gloo dump as written makes it fail: its pg_config is keyed "").
    assert sorted(os.listdir(Path(run_dir, "collectives", "fr"))) == ["0.json", "1.json", "2.json"]
    if heartbeat:
        made = make_bundle(run_dir, str(tmp_path / "b.tar.gz"))
        with tarfile.open(made.path) as tar:
            tar.extractall(tmp_path / "b", filter="data")
        (folder,) = (tmp_path / "b").glob("*/collectives/torchfrtrace")
        out = subprocess.run([PYTHON, "-m", "torch.distributed.flight_recorder.fr_trace",
                              str(folder), "--prefix", "rank_"],
                             capture_output=True, text=True, timeout=120)
        assert "missing ranks: {1}" in out.stdout + out.stderr, out


@pytest.mark.parametrize("case", ["mismatch", "barrier"])
def test_torch_s_own_texts_name_the_odd_rank(tmp_path: Path, case: str) -> None:
    if case == "mismatch":
        config = _config(tmp_path, "--mismatch", "1", "--timeout", "5")
        config.env = {"TORCH_DISTRIBUTED_DEBUG": "DETAIL"}
        words = "rank 1: ran BROADCAST where ranks 0 and 2 ran ALLREDUCE"
    else:
        config = _config(tmp_path, "--barrier", "1", "--timeout", "4")
        words = "rank 1: failed to pass monitored_barrier (torch's own check, in rank 0's error)"
    with Supervisor(config) as sup:
        finished = sup.wait(timeout=120)
    assert isinstance(finished, RunFinished)
    s = finished.suspect
    assert s is not None and s.rank == 1 and s.ranks == (1,), s
    assert s.reason.startswith(words), s.reason


def test_while_it_hangs_rankvisor_collectives_has_the_verdict(tmp_path: Path) -> None:
    log_dir = tmp_path / "logs"
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state")}
    run = subprocess.Popen(
        [PYTHON, "-m", "rankvisor.tui", "run", "--headless", "--nproc-per-node", "3",
         "--log-dir", str(log_dir), "--term-timeout", "2", JOB, "--skip", "1", "--heartbeat",
         "--timeout", "60"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        wait_until(lambda: any(log_dir.glob("*/status.json")), timeout=60)
        run_dir = str(next(log_dir.glob("*/status.json")).parent)

        def verdict() -> dict | None:
            out = subprocess.run(
                [PYTHON, "-m", "rankvisor.tui", "collectives", run_dir, "--json"],
                env=env, capture_output=True, text=True, timeout=60,
            )
            data = json.loads(out.stdout) if out.stdout.strip() else {}
            found = data.get("verdicts") or []
            return found[0] if found and data.get("source") == "live" else None

        v = wait_until(verdict, timeout=60)
        assert v is not None
        assert (v["op"], v["seq"], v["entered"], v["missing"]) == ("all_reduce", 5, [0, 2], [1])
        text = subprocess.run([PYTHON, "-m", "rankvisor.tui", "collectives", run_dir],
                              env=env, capture_output=True, text=True, timeout=60).stdout
        assert ("all_reduce #5 on pg 0 (default_pg): ranks 0 and 2 entered it; rank 1 did not "
                "(its last was #4)") in text

        # Every rank still prints, nothing failed: the live suspect is in status.json.
        def live() -> dict | None:
            status = json.loads(Path(run_dir, "status.json").read_text())
            s = status.get("suspect")
            return status if s and s.get("live") else None

        status = wait_until(live, timeout=60)
        assert status["suspect"]["rank"] == 1 and status["suspect"]["kind"] == "collective"
        assert status["suspect"]["reason"].startswith(REASON)
        assert all(Path(p).exists() for p in status["suspect"]["dumps"])
        assert all(r["step"] == 4 for r in status["ranks"]), status["ranks"]
        assert all(isinstance(r["last_output_age_s"], float) for r in status["ranks"])
    finally:
        run.send_signal(signal.SIGINT)
        try:
            run.wait(60)
        except subprocess.TimeoutExpired:
            run.kill()
            run.wait()


@pytest.mark.parametrize("fr", [True, False], ids=["flight-recorder", "stacks-only"])
def test_a_hang_before_any_timeout_names_a_live_suspect(tmp_path: Path, fr: bool) -> None:
    config = _config(tmp_path, "--skip", "1", "--timeout", "120")
    config.collectives = fr
    config.live_quiet_s = 2.0
    with Supervisor(config) as sup:
        run_dir = Path(sup.snapshot().log_dir)

        def hung_since_ns() -> int | None:
            """When the ranks stopped at step 4: the earliest write of its lines."""
            files = list(run_dir.glob("attempt_0/*/stdout.log"))
            if len(files) < 3 or not all(b"step 4" in f.read_bytes() for f in files):
                return None
            return min(f.stat().st_mtime_ns for f in files)

        def hang_reading() -> Any:
            # On a loaded machine a quiet spell at the start (a rank still importing torch,
            # after a warning of its import, while its peers wait in init_process_group) can
            # name that rank for a moment; the reading wanted is the hang's, at step 5.
            r, since = sup.live_suspect, hung_since_ns()
            return r is not None and r.suspect and since and r.since_ns >= since and r

        reading = wait_until(hang_reading, timeout=90)
        s = reading.suspect  # type: ignore[union-attr]
        assert s.rank == 1, s
        if fr:
            assert s.kind == "collective" and s.reason.startswith(REASON)
        else:
            assert s.kind == "stack"
            assert s.reason.startswith("rank 1: its main thread is outside any collective")
            assert "while ranks 0 and 2 wait in all_reduce" in s.reason
        assert reading.dumps and all(os.path.exists(p) for p in reading.dumps)  # type: ignore[union-attr]
        sup.shutdown(5)


def test_a_person_s_restart_of_one_rank_is_named_not_its_peers(tmp_path: Path) -> None:
    # The others' collective breaks when rank 1 goes ("Connection closed by peer"): the
    # rank the person restarted is the first domino, as a signal would be.
    config = _config(tmp_path, "--steps", "100000", "--step-s", "0.05", "--timeout", "10")
    with Supervisor(config) as sup:
        rank1 = sup.snapshot().ranks[1]
        wait_until(lambda: "step 3\n" in Path(rank1.stdout_path).read_text(), timeout=90)
        assert sup.execute(RestartRank(1)).ok
        finished = sup.wait(timeout=120)
    assert isinstance(finished, RunFinished)
    s = finished.suspect
    assert s is not None and s.rank == 1 and s.kind == "signal", s
    assert s.reason.startswith("rank 1: restarted by your SIGTERM at "), s.reason


def test_a_rank_a_collective_behind_in_the_same_line_is_a_group_of_its_own(
    tmp_path: Path,
) -> None:
    """Every main thread in the same all_reduce line, rank 2's one collective behind (a
    thread of its own holds the GIL, so it cannot return from the all_reduce gloo completed):
    py-spy alone sees one stack; with the Flight Recorder the merged stacks are two groups,
    each with its collective number, rank 2's first (the assertions of the synthetic test in
    tests/engine/test_collectives.py, on a real job)."""
    from rankvisor.engine.forensics.stacks import StackDump, find_py_spy, merge

    if find_py_spy() is None:
        pytest.skip("py-spy is not installed")
    with Supervisor(_config(tmp_path, "--behind", "2", "--timeout", "120")) as sup:
        watch = sup.collectives
        assert watch is not None
        # While rank 2 waits in #4 the others sleep: a verdict then says *they* had not
        # entered it yet. The state to read is the one after: they wait in #5, rank 2 not.
        v = wait_until(lambda: next((v for v in watch.verdicts() if v.missing == (2,)), None),
                       timeout=90)
        assert v is not None and v.entered == (0, 1) and v.last_of[2] == v.seq - 1
        result = sup.execute(DumpStacks(nonblocking=True))
        assert result.ok and result.data is not None, result.message
        dump = StackDump.from_dict(result.data)
        assert [g.ranks for g in merge(dump.ranks)] == [(0, 1, 2)]  # one line, one stack
        behind, ahead = f"all_reduce #{v.seq - 1} on pg 0", f"all_reduce #{v.seq} on pg 0"
        assert [(g.ranks, g.collective, g.odd) for g in dump.groups] == [
            ((2,), behind, True), ((0, 1), ahead, False)]
        assert dump.groups[0].who() == f"rank 2 (in {behind})"
        assert dump.groups[0].frames == dump.groups[1].frames
        sup.shutdown(5)


@pytest.mark.parametrize("worker_main", [False, True], ids=["plain", "worker_main"])
def test_a_rank_serves_with_or_without_worker_main_and_again_after_a_restart(
    tmp_path: Path, worker_main: bool
) -> None:
    args = ("--steps", "100000", "--step-s", "0.02") + (("--worker-main",) if worker_main else ())
    with Supervisor(_config(tmp_path, *args, nprocs=1)) as sup:
        def path() -> str:
            return sup._state.slots[0].env.get(ENV_WORKER_SOCKET, "")  # noqa: SLF001

        rank_dir = os.path.dirname(sup._state.slots[0].error_file)  # noqa: SLF001
        first = path()
        assert first == socket_path(rank_dir)
        wait_until(lambda: b"all_reduce" in ask(first, "fr_trace_json").body, timeout=60)
        assert sup.execute(RestartRank(0)).ok
        wait_until(lambda: path() != first, timeout=60)
        second = path()
        assert second == socket_path(os.path.join(rank_dir, "restart_1"))
        assert not os.path.exists(first)  # the first incarnation's, removed once it exited
        wait_until(lambda: b"all_reduce" in ask(second, "fr_trace_json").body, timeout=60)
        data, source = read_run(sup.snapshot().log_dir, 0)
        assert source == "live" and data["ranks"][0]["groups"][0]["last_enqueued"]["seq"] > 0
        sup.shutdown(5)
