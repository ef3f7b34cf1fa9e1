"""Two "nodes" on one machine: two ``rankvisor run --nnodes 2`` processes (``--headless``, or
``-D``: the supervisor process of the default path), a real c10d rendezvous on loopback and a
real gloo all_reduce across the four ranks.

Each node logs to a directory of its own (one run in it, so the directory names the run);
the node numbers are the rendezvous's to give, so each test finds which process is node 0
from its status.json. Every wait is bounded; every process is killed in ``finally``.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rankvisor.engine.states import RankState

from tests.conftest import BIN, GLOO_JOBS, wait_until

ROOT = Path(__file__).parents[2]
JOB = str(BIN / "mn_gloo_job.py")
RDZV_CONF = "join_timeout=60,last_call_timeout=1,close_timeout=5"
END_S = 150.0
"""The longest a node may take from start to exit (a rendezvous, two rounds on 2 cores)."""
_FINAL = frozenset(s.value for s in RankState if s.is_final)
"""The words status.json gives a rank whose process is gone (not "terminating": SIGTERM sent)."""

pytestmark = [
    pytest.mark.processes,
    pytest.mark.gloo,
    pytest.mark.torch,
    GLOO_JOBS,
    pytest.mark.timeout(300),
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class TwoNodes:
    """Two rankvisor processes of one job; ``logs[i]`` holds process i's run."""

    def __init__(self, tmp: Path, *, run_id: str, max_restarts: int = 0,
                 env: dict[str, str] | None = None, mode: str = "--headless",
                 script: str = JOB) -> None:
        self.port = _free_port()
        self.logs = [tmp / "n0", tmp / "n1"]
        self.procs: list[subprocess.Popen[str]] = []
        self.outs = [(tmp / f"out{i}", tmp / f"err{i}") for i in range(2)]
        child_env = {**os.environ, "GLOO_SOCKET_IFNAME": "lo", **(env or {})}
        child_env["PYTHONPATH"] = str(ROOT) + os.pathsep + child_env.get("PYTHONPATH", "")
        for log, (out, err) in zip(self.logs, self.outs, strict=True):
            cmd = [sys.executable, "-m", "rankvisor.tui", "run", mode, "--nnodes", "2",
                   "--nproc-per-node", "2", "--rdzv-backend", "c10d",
                   "--rdzv-endpoint", f"127.0.0.1:{self.port}", "--rdzv-id", run_id,
                   "--rdzv-conf", RDZV_CONF, "--max-restarts", str(max_restarts),
                   "--term-timeout", "5", "--log-dir", str(log), script]
            self.procs.append(subprocess.Popen(
                cmd, cwd=ROOT, env=child_env, stdout=out.open("w"), stderr=err.open("w"),
                text=True, start_new_session=True,
            ))

    def wait(self) -> list[tuple[int, str, str]]:
        """Each process's (exit status, stdout, stderr)."""
        codes = [p.wait(END_S) for p in self.procs]
        outs = zip(codes, self.outs, strict=True)
        return [(c, o.read_text(), e.read_text()) for c, (o, e) in outs]

    def status(self, i: int) -> dict[str, Any] | None:
        runs = [d for d in self.logs[i].glob("*/status.json")] if self.logs[i].exists() else []
        if not runs:
            return None
        try:
            data: dict[str, Any] = json.loads(runs[0].read_text())
        except ValueError:
            return None  # never torn (renamed into place); an empty dir glob race only
        return data

    def supervisors(self) -> list[int]:
        """The supervisor processes' pids, as their status.json files name them."""
        pids = []
        for i in range(2):
            status = self.status(i)
            if status is not None and isinstance(status.get("supervisor_pid"), int):
                pids.append(int(status["supervisor_pid"]))
        return pids

    def kill(self) -> None:
        for pid in self.supervisors():
            # A detached supervisor leads a session of its own; its guard ends its ranks.
            if pid not in (p.pid for p in self.procs):
                try:
                    os.killpg(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
        for p in self.procs:
            if p.poll() is None:
                # The whole session: the supervisor and, through its guard, its ranks.
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                pass


def test_clean_run_exits_zero_on_both_nodes(tmp_path: Path) -> None:
    nodes = TwoNodes(tmp_path, run_id="mn-clean")
    try:
        results = nodes.wait()
        for code, _out, err in results:
            assert code == 0, err[-3000:]
        seen = "".join(out for _, out, _ in results)
        for rank in range(4):
            assert f"rank {rank} of 4 " in seen
        statuses = [nodes.status(i) for i in range(2)]
        assert sorted(s["node_rank"] for s in statuses if s) == [0, 1]
    finally:
        nodes.kill()


def test_failure_on_node_one_is_the_root_cause_on_both(tmp_path: Path) -> None:
    # Global rank 3 lives on node 1 (ranks 2, 3), whichever process the rendezvous makes it.
    nodes = TwoNodes(tmp_path, run_id="mn-fail", env={"FAIL_RANK": "3"})
    try:
        results = nodes.wait()
        for code, _out, err in results:
            assert code != 0
            assert "cluster root cause: rank 3 on node 1" in err, err[-3000:]
        for i in range(2):
            status = nodes.status(i)
            assert status is not None and status["finished"]
            root = status["root_cause"]
            assert (root["rank"], root["node_rank"]) == (3, 1), root
            assert "fails on purpose" in root["message"]
            assert [r["rank"] for r in status["ranks"]] == [0, 1, 2, 3]
    finally:
        nodes.kill()


def test_with_one_restart_both_nodes_start_attempt_one(tmp_path: Path) -> None:
    nodes = TwoNodes(tmp_path, run_id="mn-restart", max_restarts=1,
                     env={"FAIL_RANK": "3", "FAIL_ATTEMPTS": "1"})
    try:
        results = nodes.wait()
        for code, out, err in results:
            assert code == 0, err[-3000:]
            assert "restart 1 " in out  # TORCHELASTIC_RESTART_COUNT of the second round
        for i in range(2):
            status = nodes.status(i)
            assert status is not None and status["attempt"] == 1
            assert (Path(status["run_dir"]) / "attempt_1").is_dir()
    finally:
        nodes.kill()


def _ctl(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rankvisor.tui", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=90)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_supervisor_processes_commands_take_global_ranks(tmp_path: Path) -> None:
    """The default path (a supervisor process per node, here started with ``-D``): status
    lists both nodes, a command's RANKS are global (another node's rank is refused with its
    node and host), ``stop`` on each node ends everything."""
    hold = tmp_path / "go"
    nodes = TwoNodes(tmp_path, run_id="mn-detached", mode="-D", env={"HOLD_FILE": str(hold)})
    try:
        for code, out, err in nodes.wait():  # the launchers return once their ranks run
            assert code == 0, err[-3000:]
            assert "rankvisor: started; the run goes on in" in out
        zero = next(i for i in range(2) if (nodes.status(i) or {}).get("node_rank") == 0)
        one = 1 - zero
        logs = [str(d) for d in nodes.logs]
        supervisors = nodes.supervisors()
        assert len(supervisors) == 2

        def all_running() -> dict[str, Any] | None:
            res = _ctl("status", logs[zero], "--json")
            data: dict[str, Any] = json.loads(res.stdout) if res.returncode == 0 else {}
            running = [r for r in data.get("ranks", []) if r["state"] == "running"]
            return data if len(running) == 4 else None

        data = wait_until(all_running, timeout=60, interval=0.5)
        assert isinstance(data, dict) and data["nnodes"] == 2
        host = data["ranks"][2]["host"]
        text = _ctl("status", logs[one]).stdout
        assert "node        1 of 2" in text and "NODE" in text
        rows = [ln.split() for ln in text.splitlines() if ln.startswith("  ") and
                ln.split()[0].isdigit()]
        assert [(r[0], r[1], r[3]) for r in rows] == [
            ("0", "0", "0"), ("1", "0", "1"), ("2", "1", "0"), ("3", "1", "1")]

        # Global rank 3 is node 1's local rank 1: asked of node 0, refused where it runs.
        for argv in (("terminate", logs[zero], "3"), ("signal", logs[zero], "2-3", "CONT"),
                     ("restart", logs[zero], "2")):
            res = _ctl(*argv)
            assert res.returncode == 1, res
            assert f"runs on node 1 ({host}): run the command there" in res.stderr, res.stderr
        res = _ctl("restart", logs[one], "2")  # the supervisor's own refusal (a lone rank)
        assert res.returncode == 1 and "multi-node run" in res.stderr, res
        res = _ctl("signal", logs[one], "2", "CONT")
        assert res.returncode == 0, res.stderr
        res = _ctl("terminate", logs[one], "3", "--timeout", "5")
        assert res.returncode == 0, res.stderr

        def rank3_gone() -> bool:
            s = nodes.status(one) or {}
            by = {r["rank"]: r for r in s.get("ranks", [])}
            return by.get(3, {}).get("state") in _FINAL and by.get(2, {}).get("state") == "running"

        wait_until(rank3_gone, timeout=60, interval=0.2)
        mine = {r["rank"]: r for r in (nodes.status(one) or {})["ranks"]}
        assert (mine[3]["node_rank"], mine[3]["local_rank"]) == (1, 1)
        # A str, not the dict: pytest cuts a dict's repr short, and which field was off is
        # what a rare failure under load needs to say.
        assert mine[3]["signal"] == "SIGTERM", json.dumps(mine[3], sort_keys=True)

        # A node may already be stopping as its stop is typed (stop then waits for that
        # end): either way nobody's failure ended it, every rank was stopped by a person
        # or by the run.
        for i in (one, zero):
            res = _ctl("stop", logs[i], "--timeout", "5")
            assert res.returncode == 0, res.stderr
        wait_until(lambda: not any(_alive(p) for p in supervisors), timeout=60, interval=0.2)
        for i in range(2):
            status = nodes.status(i)
            assert status is not None and status["finished"]
            assert not any(_alive(r["pid"]) for r in status["ranks"] if r["pid"])
            assert status["root_cause"] is None, json.dumps(status, sort_keys=True)
    finally:
        hold.touch()
        nodes.kill()


def _store_host(nodes: TwoNodes) -> int:
    """Which of the two processes listens on the rendezvous port (hosts the c10d store)."""
    import psutil

    for i, p in enumerate(nodes.procs):
        conns = psutil.Process(p.pid).net_connections(kind="tcp")
        if any(c.status == psutil.CONN_LISTEN and c.laddr.port == nodes.port for c in conns):
            return i
    raise AssertionError("neither node listens on the rendezvous port")


def test_store_gone_the_other_node_says_so_once_and_keeps_its_ranks(tmp_path: Path) -> None:
    """SIGKILL of the rankvisor that hosts the c10d store: the other node says so in one
    notice; torch's agent there (its monitor asks the store every interval) then ends its run,
    as under torchrun: its ranks are stopped and it exits 1, its status.json keeping its own
    ranks, and the other node's last known ones as "unknown"."""
    hold = tmp_path / "go"
    nodes = TwoNodes(tmp_path, run_id="mn-store-gone", env={"HOLD_FILE": str(hold)})
    try:
        def both_running() -> bool:
            statuses = [nodes.status(i) or {} for i in range(2)]
            return all(sum(r["state"] == "running" for r in s.get("ranks", [])) == 4
                       for s in statuses)

        wait_until(both_running, timeout=END_S, interval=0.2)
        # On one machine both nodes match the endpoint's address: the first to bind its port
        # hosts the store, whatever node rank the rendezvous then gives it.
        host = _store_host(nodes)
        one = 1 - host
        os.killpg(nodes.procs[host].pid, signal.SIGKILL)  # its guard ends its ranks
        code = nodes.procs[one].wait(END_S)
        err = nodes.outs[one][1].read_text()
        assert code == 1, err[-3000:]
        assert err.count("the rendezvous store stopped answering") == 1, err[-3000:]
        assert "torch's agent ended this node's run" in err
        assert "Traceback" not in err, err[-3000:]
        status = nodes.status(one)
        assert status is not None and status["finished"]
        assert status["cluster"]["store"] == "gone"
        mine = [r for r in status["ranks"] if r["node_rank"] == status["node_rank"]]
        theirs = [r for r in status["ranks"] if r["node_rank"] != status["node_rank"]]
        assert len(mine) == len(theirs) == 2
        assert {r["state"] for r in theirs} == {"unknown"}
        assert {r["last_state"] for r in theirs} == {"running"}
        for r in mine:  # stopped by the agent's teardown, listed with their pids
            assert isinstance(r["pid"], int)
            assert r["state"] in _FINAL, r
    finally:
        hold.touch()
        nodes.kill()


@pytest.fixture(scope="class")
def ticking(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TwoNodes]:
    """One ticking job for the tests that only read it (its status, a viewer's lines): a job
    takes ~15 s to start on 2 cores. Released when the class is done, and it must then end
    cleanly on both nodes, as each of them asked of its own job."""
    tmp = tmp_path_factory.mktemp("ticking")
    hold = tmp / "hold"
    nodes = TwoNodes(tmp, run_id="viewer", script=str(BIN / "mn_ticker_job.py"),
                     env={"HOLD_FILE": str(hold), "TICK_S": "0.2"})
    try:
        try:
            yield nodes
        finally:
            hold.touch()
        for code, _out, err in nodes.wait():
            assert code == 0, err[-3000:]
    finally:
        nodes.kill()


class TestOneTickingJob:
    """Tests that read the job and change nothing in it share one (in a row, in the
    gloo-jobs group: the class's job ends before the group's next test starts)."""

    def test_node_zero_status_lists_every_rank_of_both_nodes(self, ticking: TwoNodes) -> None:
        nodes = ticking

        def node_zero() -> int | None:
            for i in range(2):
                s = nodes.status(i)
                if s is not None and s.get("node_rank") == 0:
                    return i
            return None

        wait_until(lambda: node_zero() is not None, timeout=END_S, interval=0.2)
        zero = node_zero()
        assert zero is not None

        def listed() -> dict[str, Any] | None:
            res = subprocess.run(
                [sys.executable, "-m", "rankvisor.tui", "status", str(nodes.logs[zero]), "--json"],
                cwd=ROOT, capture_output=True, text=True, timeout=30,
            )
            if res.returncode != 0:
                return None
            data: dict[str, Any] = json.loads(res.stdout)
            running = [r for r in data["ranks"] if r["state"] == "running"]
            return data if len(running) == 4 else None

        data = wait_until(listed, timeout=60, interval=0.5)
        assert isinstance(data, dict)
        ranks = data["ranks"]
        assert [(r["rank"], r["node_rank"], r["local_rank"]) for r in ranks] == [
            (0, 0, 0), (1, 0, 1), (2, 1, 0), (3, 1, 1)]
        assert all(isinstance(r["pid"], int) for r in ranks[:2])
        assert all(r["pid"] is None for r in ranks[2:])

    def test_one_viewer_shows_the_other_nodes_lines_on_loopback(self, ticking: TwoNodes) -> None:
        # The two-host test's viewer (tests/cluster/test_cluster_viewer.py), where namespaces
        # cannot be made: the door on 127.0.0.1, the same handshake, renumbering and mirror.
        nodes = ticking

        def running() -> dict[str, Any] | None:
            status = nodes.status(0)
            ranks = (status or {}).get("ranks") or []
            doors = ((status or {}).get("cluster") or {}).get("doors") or {}
            ok = len(ranks) == 4 and len(doors) == 2 and all(
                r["state"] == "running" for r in ranks)
            return status if ok else None

        status = wait_until(running, timeout=120, interval=0.2)
        assert isinstance(status, dict)
        other = next(r["rank"] for r in status["ranks"] if r["node_rank"] != status["node_rank"])
        run_dir = str(next(nodes.logs[0].glob("*/status.json")).parent)
        wait_until(lambda: any("tick " in p.read_text()
                               for p in nodes.logs[1].glob("*/attempt_0/*/stdout.log")),
                   timeout=60, interval=0.2)
        probe = subprocess.run(
            [sys.executable, "-m", "tests.cluster.viewer_probe", run_dir, "4"], cwd=ROOT,
            capture_output=True, text=True, timeout=90)
        assert probe.returncode == 0, probe.stderr[-3000:]
        seen = [json.loads(x) for x in probe.stdout.splitlines() if x.startswith("{")]
        lines = [s["line"] for s in seen if s["kind"] == "line" and s["rank"] == other]
        assert any(x.startswith("tick ") and f" rank {other} " in x for x in lines), lines
        # The summary, not the last record: a line may still come between it and the detach.
        summary = next(s for s in seen if s["kind"] == "summary")
        assert summary["connections"] == 1
