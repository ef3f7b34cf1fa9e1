"""A 2 x 2 job on two hosts of the tests' own (tests/cluster/hosts.py): node01 and node02,
each with its own address, hostname and /etc/hosts, one real link between them.

The same job as test_two_nodes.py's (tests/bin/mn_gloo_job.py: c10d rendezvous on node01,
gloo all_reduce over the link), started by ``rankvisor run`` on each host. Skipped, with the
reason, where network namespaces cannot be made; the loopback tests stay for those machines.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.hosts import HOSTNAMES, IFNAME, TwoHosts
from tests.conftest import BIN, GLOO_JOBS

ROOT = Path(__file__).parents[2]
JOB = str(BIN / "mn_gloo_job.py")
RDZV_CONF = "join_timeout=60,last_call_timeout=1,close_timeout=5"
END_S = 150.0

_PROBLEM = TwoHosts.problem()
pytestmark = [
    pytest.mark.processes,
    pytest.mark.gloo,
    pytest.mark.torch, GLOO_JOBS, pytest.mark.timeout(300),
    pytest.mark.skipif(_PROBLEM is not None, reason=f"two hosts cannot be made: {_PROBLEM}"),
]


@pytest.fixture
def hosts() -> Iterator[TwoHosts]:
    with TwoHosts() as made:
        yield made


class Job:
    """``rankvisor run --nnodes 2`` on each host; ``logs[i]`` holds host i's run."""

    def __init__(self, hosts: TwoHosts, tmp: Path, *, flags: list[str] | None = None,
                 env: dict[str, str] | None = None,
                 per_host_env: tuple[dict[str, str], dict[str, str]] = ({}, {}),
                 script: str = JOB, args: tuple[str, ...] = ()) -> None:
        self.logs = [tmp / "h0", tmp / "h1"]
        self.outs = [(tmp / f"out{i}", tmp / f"err{i}") for i in range(2)]
        if flags is None:
            flags = ["--nnodes", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint",
                     f"{HOSTNAMES[0]}:29400", "--rdzv-id", "two-hosts"]
        self.procs = []
        for i in range(2):
            child_env = {**os.environ, "GLOO_SOCKET_IFNAME": IFNAME, **(env or {}),
                         **per_host_env[i]}
            cmd = [sys.executable, "-m", "rankvisor.tui", "run", "--headless", *flags,
                   "--nproc-per-node", "2", "--rdzv-conf", RDZV_CONF, "--term-timeout", "5",
                   "--log-dir", str(self.logs[i]), script, *args]
            out, err = self.outs[i]
            self.procs.append(hosts.popen(i, cmd, cwd=ROOT, env=child_env,
                                          stdout=out.open("w"), stderr=err.open("w")))

    def wait(self) -> list[tuple[int, str, str]]:
        codes = [p.wait(END_S) for p in self.procs]
        return [(c, o.read_text(), e.read_text())
                for c, (o, e) in zip(codes, self.outs, strict=True)]

    def status(self, i: int) -> dict[str, Any]:
        found = list(self.logs[i].glob("*/status.json"))
        assert found, f"host {i} wrote no status.json"
        data: dict[str, Any] = json.loads(found[0].read_text())
        return data


def test_a_clean_job_crosses_the_link(hosts: TwoHosts, tmp_path: Path) -> None:
    job = Job(hosts, tmp_path)
    results = job.wait()
    for code, _out, err in results:
        assert code == 0, err[-3000:]
    seen = "".join(out for _, out, _ in results)
    for rank in range(4):
        assert f"rank {rank} of 4 " in seen
    # The rendezvous ran on node01: every rank was told its address, none loopback.
    assert seen.count(f"master {HOSTNAMES[0]}:") == 4, seen
    statuses = [job.status(i) for i in range(2)]
    assert sorted(s["node_rank"] for s in statuses) == [0, 1]


def test_a_failure_on_the_second_host_is_named_with_its_host_on_the_first(
        hosts: TwoHosts, tmp_path: Path) -> None:
    # Global rank 3 lives on node 1, whichever host the rendezvous makes node 1.
    job = Job(hosts, tmp_path, env={"FAIL_RANK": "3"})
    results = job.wait()
    statuses = [job.status(i) for i in range(2)]
    second = HOSTNAMES[[s["node_rank"] for s in statuses].index(1)]
    for code, _out, err in results:
        assert code != 0
        assert f"cluster root cause: rank 3 on node 1 ({second}) failed first" in err, (
            err[-3000:])
    for status in statuses:  # the same root cause on both hosts, with the host it ran on
        root = status["root_cause"]
        assert (root["rank"], root["node_rank"], root["host"]) == (3, 1, second), root
    assert "fails on purpose" in root["message"]


def _status_or_none(job: Job, i: int) -> dict[str, Any] | None:
    try:
        return job.status(i)
    except (AssertionError, ValueError, OSError):  # not written yet, or mid-replace
        return None


def _entered_5_at(job: Job, i: int) -> float:
    """When the first of host ``i``'s ranks entered all_reduce #5, as torch's Flight
    Recorder says in the dumps saved with the live suspect (collectives/fr/)."""
    times = [e["time_created_ns"] / 1e9
             for p in job.logs[i].glob("*/collectives/fr/*.json")
             for e in json.loads(p.read_text())["entries"] if e.get("collective_seq_id") == 5]
    assert times, "no Flight Recorder dump saved on node 0"
    return min(times)


def test_a_whole_second_host_that_skips_all_reduce_5_is_named_from_the_first(
        hosts: TwoHosts, tmp_path: Path) -> None:
    # Both ranks of node 1 (global 2 and 3) sleep where the job's all_reduce #5 is; node 0's
    # ranks wait in it. Every rank prints a heartbeat: no silence, only the Flight Recorder
    # of both nodes together says who is missing.
    job = Job(hosts, tmp_path, script=str(BIN / "fr_gloo_job.py"),
              args=("--skip", "2,3", "--at", "5", "--timeout", "60", "--heartbeat"))
    deadline = time.monotonic() + 90
    named: dict[int, dict[str, Any]] = {}
    while time.monotonic() < deadline and len(named) < 2:
        for i in range(2):
            status = _status_or_none(job, i)
            if status is None:
                continue
            suspect = status.get("suspect")
            if isinstance(suspect, dict) and i not in named:
                named[i] = {**suspect, "seen_at": time.time(), "node": status["node_rank"],
                            "host": i}
        assert all(p.poll() is None for p in job.procs), job.wait()
        time.sleep(0.2)
    assert len(named) == 2, named
    for suspect in named.values():
        assert suspect["rank"] == 2 and suspect["ranks"] == [2, 3], suspect
        assert "never entered all_reduce #5 on pg 0, where ranks 0 and 1 waited" in (
            suspect["reason"])
    first = next(s for s in named.values() if s["node"] == 0)
    assert first.get("live") is True, first
    # `rankvisor collectives` on node 0 judges the whole job too: node 1's ranks by their
    # global numbers, not numbered as node 0's own.
    run_dir = next(job.logs[first["host"]].glob("*/status.json")).parent
    got = hosts.run(first["host"], [sys.executable, "-m", "rankvisor.tui", "collectives",
                                    "--json", str(run_dir)], cwd=ROOT, env=dict(os.environ))
    assert got.returncode == 0, got.stderr
    data = json.loads(got.stdout)
    assert sorted(r["rank"] for r in data["ranks"]) == [0, 1, 2, 3], data["ranks"]
    assert [(v["op"], v["seq"], v["entered"], v["missing"]) for v in data["verdicts"]] == [
        ("all_reduce", 5, [0, 1], [2, 3])], data["verdicts"]
    entered = _entered_5_at(job, first["host"])
    print(f"named from node 0 {first['seen_at'] - entered:.1f} s after its ranks entered "
          "all_reduce #5")
    assert first["seen_at"] - entered < 30  # bounded: the figure is the print's


# A Kubeflow pod's way of starting torchrun: no flag at all, only the five variables the
# training operator sets (PET_NNODES, PET_NODE_RANK, PET_MASTER_ADDR, PET_MASTER_PORT,
# PET_NPROC_PER_NODE). One world of 4 under rankvisor, and under torchrun as the oracle.

KUBEFLOW_PORT = 29455


def _kubeflow(hosts: TwoHosts, tmp: Path, launcher: list[str]) -> list[tuple[int, str, str]]:
    base = {k: v for k, v in os.environ.items()
            if not k.startswith(("PET_", "SLURM_", "SKYPILOT_", "TORCHELASTIC_"))}
    procs, outs = [], []
    for node in range(2):
        env = {**base, "GLOO_SOCKET_IFNAME": IFNAME, "PET_NNODES": "2",
               "PET_NODE_RANK": str(node), "PET_MASTER_ADDR": hosts.addrs[0],
               "PET_MASTER_PORT": str(KUBEFLOW_PORT), "PET_NPROC_PER_NODE": "2",
               "TMPDIR": str(tmp)}
        out, err = tmp / f"out{node}", tmp / f"err{node}"
        outs.append((out, err))
        procs.append(hosts.popen(node, [sys.executable, "-m", *launcher, JOB], cwd=ROOT,
                                 env=env, stdout=out.open("w"), stderr=err.open("w")))
    codes = [p.wait(END_S) for p in procs]
    return [(c, o.read_text(), e.read_text()) for c, (o, e) in zip(codes, outs, strict=True)]


def _world(results: list[tuple[int, str, str]]) -> list[tuple[int, int]]:
    """(global rank, group rank) of every rank that joined the world of 4."""
    for code, _out, err in results:
        assert code == 0, err[-3000:]
    seen = "".join(out for _, out, _ in results)
    return sorted((int(m[1]), int(m[2])) for m in _RANK_LINE.finditer(seen))


_RANK_LINE = re.compile(r"rank (\d+) of 4 group (\d+) ")


@pytest.mark.parametrize("launcher", [["torch.distributed.run"],
                                      ["rankvisor.tui", "run", "--headless"]],
                         ids=["torchrun", "rankvisor"])
def test_five_pet_variables_and_no_flag_make_one_world_of_4(
        hosts: TwoHosts, tmp_path: Path, launcher: list[str]) -> None:
    results = _kubeflow(hosts, tmp_path, launcher)
    # PET_NODE_RANK i holds global ranks 2i and 2i + 1 (the static rendezvous).
    assert _world(results) == [(0, 0), (1, 0), (2, 1), (3, 1)], results
    # Every rank was told node 0's address and the port given.
    seen = "".join(out for _, out, _ in results)
    assert seen.count(f"master {hosts.addrs[0]}:{KUBEFLOW_PORT}") == 4, seen
