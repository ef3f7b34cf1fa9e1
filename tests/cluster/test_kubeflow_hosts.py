"""A Kubeflow pod's way of starting torchrun, on two hosts of the tests' own
(tests/cluster/hosts.py): no flag at all, only the five variables the training operator
sets (PET_NNODES, PET_NODE_RANK, PET_MASTER_ADDR, PET_MASTER_PORT, PET_NPROC_PER_NODE).
One world of 4 under ``rankvisor run``, and the same job under torchrun as the oracle."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster.hosts import IFNAME, TwoHosts
from tests.conftest import BIN, GLOO_JOBS

ROOT = Path(__file__).parents[2]
JOB = str(BIN / "mn_gloo_job.py")
PORT = 29455
END_S = 150.0

_PROBLEM = TwoHosts.problem()
pytestmark = [
    pytest.mark.torch, GLOO_JOBS, pytest.mark.timeout(300),
    pytest.mark.skipif(_PROBLEM is not None, reason=f"two hosts cannot be made: {_PROBLEM}"),
]


@pytest.fixture
def hosts() -> Iterator[TwoHosts]:
    with TwoHosts() as made:
        yield made


def _kubeflow(hosts: TwoHosts, tmp: Path, launcher: list[str]) -> list[tuple[int, str, str]]:
    base = {k: v for k, v in os.environ.items()
            if not k.startswith(("PET_", "SLURM_", "SKYPILOT_", "TORCHELASTIC_"))}
    procs, outs = [], []
    for node in range(2):
        env = {**base, "GLOO_SOCKET_IFNAME": IFNAME, "PET_NNODES": "2",
               "PET_NODE_RANK": str(node), "PET_MASTER_ADDR": hosts.addrs[0],
               "PET_MASTER_PORT": str(PORT), "PET_NPROC_PER_NODE": "2",
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
    assert seen.count(f"master {hosts.addrs[0]}:{PORT}") == 4, seen
