"""Every rank from any node, on two hosts of the tests' own (tests/cluster/hosts.py): a
remote rank's log and stack through its node's door, the run's secret (a client without it
gets nothing), a node whose link goes down shown unreachable, and Slurm's environment with
no rendezvous flag given."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.hosts import HOSTNAMES, TwoHosts
from tests.cluster.test_two_hosts import ROOT, Job
from tests.conftest import BIN, wait_until

_PROBLEM = TwoHosts.problem()
pytestmark = [
    pytest.mark.processes,
    pytest.mark.torch, pytest.mark.timeout(300),
    pytest.mark.skipif(_PROBLEM is not None, reason=f"two hosts cannot be made: {_PROBLEM}"),
]

CLI = [sys.executable, "-m", "rankvisor.tui"]


@pytest.fixture
def hosts() -> Iterator[TwoHosts]:
    with TwoHosts() as made:
        yield made


def _status(logs: Path) -> dict[str, Any] | None:
    found = list(logs.glob("*/status.json"))
    if not found:
        return None
    try:
        data: dict[str, Any] = json.loads(found[0].read_text())
    except ValueError:
        return None
    return data


def _all_running(logs: Path) -> dict[str, Any] | None:
    """host's status once it lists every rank of both nodes running, with both doors."""
    status = _status(logs)
    if not status:
        return None
    ranks = status.get("ranks") or []
    doors = (status.get("cluster") or {}).get("doors") or {}
    if len(ranks) == 4 and len(doors) == 2 and all(r["state"] == "running" for r in ranks):
        return status
    return None


def _said(job: Job) -> None:
    """Wait until host 1's ranks have said who they are (before they wait on the file)."""
    def said() -> bool:
        files = list(job.logs[1].glob("*/attempt_0/*/stdout.log"))
        return len(files) == 2 and all(" of 4 " in p.read_text() for p in files)

    wait_until(said, timeout=60)


def _held(hosts: TwoHosts, tmp_path: Path) -> tuple[Job, Path, dict[str, Any]]:
    hold = tmp_path / "hold"
    job = Job(hosts, tmp_path, env={"HOLD_FILE": str(hold)})
    status = wait_until(lambda: _all_running(job.logs[0]), timeout=120, interval=0.2)
    assert isinstance(status, dict)
    _said(job)
    return job, hold, status


def _remote_rank(status: dict[str, Any]) -> tuple[int, str]:
    here = status["node_rank"]
    other = [r for r in status["ranks"] if r["node_rank"] != here]
    return int(other[0]["rank"]), str(other[0]["host"])


_NO_SECRET = """
import sys
from rankvisor.engine.cluster.door import DoorRefused, connect_door
try:
    connect_door(sys.argv[1], "00" * 32)
except DoorRefused as e:
    print("refused:", e)
else:
    print("CONNECTED")
import socket
host, _, port = sys.argv[1].rpartition(":")
s = socket.create_connection((host, int(port)), timeout=5)
s.settimeout(5)
first = s.recv(4096)
s.sendall(b'{"t":"hello","protocol":1,"version":"x","read_only":false,"name":"x"}\\n')
rest = b""
try:
    while chunk := s.recv(4096):
        rest += chunk
except OSError:
    pass
print("first", first.decode())
print("after", len(rest))
"""


def test_a_host_whose_link_goes_down_is_shown_unreachable(hosts: TwoHosts,
                                                           tmp_path: Path) -> None:
    job, hold, status = _held(hosts, tmp_path)
    hosts.link_down()
    try:
        def unreachable() -> dict[str, Any] | None:
            now = _status(job.logs[0])
            if now and (now.get("cluster") or {}).get("unreachable"):
                return now
            return None

        seen = wait_until(unreachable, timeout=30, interval=0.2)
        assert isinstance(seen, dict)
        here = seen["node_rank"]
        remote = [r for r in seen["ranks"] if r["node_rank"] != here]
        assert remote and all(r["state"] == "unreachable" for r in remote), remote
        assert all(r["last_state"] == "running" for r in remote)
        # This host's own ranks are not held up by it.
        assert all(r["state"] == "running" for r in seen["ranks"] if r["node_rank"] == here)
    finally:
        hosts.link_up()
        hold.touch()
    job.wait()


def test_slurm_fills_the_rendezvous(hosts: TwoHosts, tmp_path: Path) -> None:
    slurm = {"SLURM_JOB_ID": "4242", "SLURM_NNODES": "2",
             "SLURM_JOB_NODELIST": "node[01-02]", "SLURM_TASKS_PER_NODE": "1(x2)"}
    per_host = ({"SLURM_NODEID": "0"}, {"SLURM_NODEID": "1"})
    job = Job(hosts, tmp_path, flags=[], env=slurm, per_host_env=per_host)
    results = job.wait()
    for code, _out, err in results:
        assert code == 0, err[-3000:]
        assert err.count("from Slurm:") == 1, err
        assert "from Slurm: --nnodes 2 --rdzv-id 4242 --rdzv-backend c10d " \
               f"--rdzv-endpoint {HOSTNAMES[0]}:29500" in err
    seen = "".join(out for _, out, _ in results)
    assert seen.count(f"master {HOSTNAMES[0]}:") == 4, seen
    assert {job.status(i)["run_id"] for i in range(2)} == {"4242"}


TICKER = str(BIN / "mn_ticker_job.py")
PROBE = [sys.executable, "-m", "tests.cluster.viewer_probe"]


def _probe(hosts: TwoHosts, run_dir: str, seconds: float, *extra: str,
           during: Any = None) -> list[dict[str, Any]]:
    proc = hosts.popen(0, [*PROBE, run_dir, str(seconds), *extra], cwd=ROOT,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if during is not None:
        during()
    out, err = proc.communicate(timeout=seconds + 60)
    assert proc.returncode == 0, err[-3000:]
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def _ticking(hosts: TwoHosts, tmp_path: Path) -> tuple[Job, Path, str, int]:
    hold = tmp_path / "hold"
    job = Job(hosts, tmp_path, env={"HOLD_FILE": str(hold), "TICK_S": "0.2"}, script=TICKER)
    status = wait_until(lambda: _all_running(job.logs[0]), timeout=120, interval=0.2)
    assert isinstance(status, dict)
    run_dir = str(next(job.logs[0].glob("*/status.json")).parent)
    return job, hold, run_dir, _remote_rank(status)[0]


def test_one_viewer_shows_a_line_a_rank_of_the_other_host_wrote(
        hosts: TwoHosts, tmp_path: Path) -> None:
    job, hold, run_dir, remote = _ticking(hosts, tmp_path)
    try:
        # A stack dump holds the link's other answers until py-spy is done (a dump that
        # failed in passing is tried again, within 5 s): the window leaves room after it.
        seen = _probe(hosts, run_dir, 10, "--stack", str(remote), "--release", str(hold))
    finally:
        hold.touch()
    info = next(s for s in seen if s["kind"] == "info")
    assert info["nprocs"] == 4
    assert info["places"][str(remote)] == f"node 1 ({HOSTNAMES[1]})"
    lines = [s for s in seen if s["kind"] == "line" and s["rank"] == remote]
    # Its lines from before the viewer came (read through the door) and live ones.
    assert any(f"rank {remote} of 4 ready" in s["line"] for s in lines), seen[:20]
    assert sum(1 for s in lines if s["line"].startswith("tick")) >= 5
    numbers = [int(s["line"].split()[1]) for s in lines if s["line"].startswith("tick")]
    assert numbers == sorted(numbers) and len(set(numbers)) == len(numbers)  # none twice
    stack = next(s for s in seen if s["kind"] == "answer")
    assert stack["ok"], stack
    assert stack["path"].startswith(str(job.logs[1])), stack  # dumped and saved on node02
    summary = next(s for s in seen if s["kind"] == "summary")
    assert summary["connections"] == 1
    # Its file, mirrored through the door for zoom and search: a copy of node02's so far.
    theirs = next(job.logs[1].glob(f"*/attempt_0/{remote - 2}/stdout.log")).read_bytes()
    mine = (Path(summary["mirror"]) / "node1" / "attempt_0" / str(remote - 2) /
            "stdout.log").read_bytes()
    assert theirs.startswith(mine)
    assert f"rank {remote} of 4 ready\ntick 0 ".encode() in mine
    # The other node's ranks as their node reports them: running, with their pids (not
    # "starting" with none, as the store's record alone would have them).
    remote_ranks = {str(r) for r in range(2, 4)}
    assert set(summary["remote"]) == remote_ranks, summary["remote"]
    assert all(state == "running" and isinstance(pid, int)
               for state, pid in summary["remote"].values()), summary["remote"]
    # ... and a view was told so: at the watch (the viewer may have reached their node
    # first, a loaded machine's order) or by a state event since.
    told = {r for r, (state, pid) in info["remote"].items() if state == "running" and pid}
    told |= {str(s["rank"]) for s in seen
             if s["kind"] == "state" and s["new"] == "running" and s["pid"]}
    assert told == remote_ranks, (info["remote"], [s for s in seen if s["kind"] == "state"])
    # Released, the job ends; the other node's end is its finish, never "unreachable".
    end = next(s for s in seen if s["kind"] == "end")
    assert all(end["finished"].values()) and end["finished"], end
    assert all(state == "succeeded" for state, _ in end["remote"].values()), end
    notices = [s["message"] for s in seen if s["kind"] == "notice"]
    assert f"node 1 ({HOSTNAMES[1]}) finished its part of the run" in notices, notices
    assert not any("unreachable" in m for m in notices), notices
    for code, _out, err in job.wait():
        assert code == 0, err[-3000:]


def test_the_viewer_says_a_node_is_unreachable_and_resumes_it(
        hosts: TwoHosts, tmp_path: Path) -> None:
    job, hold, run_dir, remote = _ticking(hosts, tmp_path)
    marks: dict[str, float] = {}

    def cut() -> None:
        import time

        time.sleep(3)
        marks["down"] = time.time()
        hosts.link_down()
        time.sleep(8)
        # Taken before: the link answers again partway through ``link_up``'s commands, and
        # a loaded run saw the viewer's notice 18 ms before they all returned.
        marks["up"] = time.time()
        hosts.link_up()

    try:
        seen = _probe(hosts, run_dir, 20, during=cut)
    finally:
        hosts.link_up()
        hold.touch()
    notices = [s for s in seen if s["kind"] == "notice"]
    gone = [s for s in notices if "is unreachable" in s["message"]]
    back = [s for s in notices if "answers again" in s["message"]]
    assert gone and back, notices
    assert f"node 1 ({HOSTNAMES[1]})" in gone[0]["message"]
    assert marks["down"] < gone[0]["t"] < marks["up"]
    assert back[0]["t"] > marks["up"]
    # Its panes resume: lines of the remote rank come after it answered again.
    ticks = [s for s in seen if s["kind"] == "line" and s["rank"] == remote
             and s["line"].startswith("tick")]
    assert any(s["t"] > back[0]["t"] for s in ticks), ticks[-5:]
    numbers = [int(s["line"].split()[1]) for s in ticks]
    assert len(set(numbers)) == len(numbers)  # none twice across the outage
    job.wait()


def test_a_command_on_a_remote_rank_is_carried_out_by_its_node(
        hosts: TwoHosts, tmp_path: Path) -> None:
    job, hold, run_dir, remote = _ticking(hosts, tmp_path)
    try:
        seen = _probe(hosts, run_dir, 6, "--terminate", str(remote))
    finally:
        hold.touch()
    answer = next(s for s in seen if s["kind"] == "answer")
    assert answer["ok"], answer
    states = [s["new"] for s in seen if s["kind"] == "state" and s["rank"] == remote]
    assert "terminating" in states and states[-1] in ("signalled", "failed"), states
    # node02's own record says who stopped it: a person, through the viewer on node01. (The
    # other ranks, on their way into a barrier with a dead peer, end with the hosts.)

    def signalled() -> bool:
        events = "".join(p.read_text() for p in job.logs[1].glob("*/events.ndjson"))
        return '"RanksSignalled"' in events and '"person"' in events

    wait_until(signalled, timeout=30, interval=0.2)


@dataclass
class Held:
    """The shared job, held before its end: its hosts, and host 0's status once all ran."""

    hosts: TwoHosts
    job: Job
    status: dict[str, Any]


@pytest.fixture(scope="class")
def held(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Held]:
    """One held job for the tests that only read it (a remote rank's logs and stack, the
    door): a job takes ~15 s to start and ~8 s to end on 2 cores. Released when the class is
    done, and it must then end cleanly on both hosts, as the logs test asked of its own job.
    (The one-viewer test keeps its own: it wants the job's first line among those from before
    the viewer came, and on a job that had run for a while it once got only later ones.)"""
    tmp = tmp_path_factory.mktemp("held")
    with TwoHosts() as hosts:
        job, hold, status = _held(hosts, tmp)
        try:
            yield Held(hosts, job, status)
        finally:
            hold.touch()
        for code, _out, err in job.wait():
            assert code == 0, err[-3000:]


@pytest.mark.xdist_group("two-hosts-held")
class TestOneHeldJob:
    """Tests that read the job and change nothing in it share one (on one worker, in a row:
    the class's job ends before any other test of this file starts beside it)."""

    def test_logs_and_stack_of_a_rank_on_the_other_host(self, held: Held) -> None:
        hosts, job, status = held.hosts, held.job, held.status
        rank, host = _remote_rank(status)
        assert host == HOSTNAMES[1]
        run_dir = str(next(job.logs[0].glob("*/status.json")).parent)
        logs = hosts.run(0, [*CLI, "logs", run_dir, "--rank", str(rank)], cwd=ROOT)
        assert logs.returncode == 0, logs.stderr
        assert f"rank {rank} of 4 " in logs.stdout, logs.stdout
        # The bytes came from node02's file, through its door: no file here holds them.
        here = "".join(p.read_text() for p in job.logs[0].glob("*/attempt_0/*/stdout.log"))
        assert f"rank {rank} of 4 " not in here
        stack = hosts.run(0, [*CLI, "stack", run_dir, "--rank", str(rank), "--json"], cwd=ROOT)
        assert stack.returncode == 0, stack.stderr
        dump = json.loads(stack.stdout)
        frames = json.dumps(dump["groups"])
        assert "main" in frames, frames[:2000]
        assert dump["path"].startswith(str(job.logs[1])), dump["path"]  # saved on its node

    def test_a_client_without_the_secret_gets_nothing(self, held: Held) -> None:
        status = held.status
        doors = status["cluster"]["doors"]
        other = next(d for n, d in doors.items() if int(n) != status["node_rank"])
        probe = held.hosts.run(0, [sys.executable, "-c", _NO_SECRET, other], cwd=ROOT)
        out = probe.stdout
        assert "refused:" in out and "CONNECTED" not in out, out + probe.stderr
        # A hello without a proof: the challenge (a nonce) and then nothing at all.
        assert '"t":"challenge"' in out and "after 0" in out, out
        assert "rank" not in out.split("first", 1)[1]
