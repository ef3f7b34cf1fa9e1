"""Slurm's and SkyPilot's environments read as torchrun's flags; Slurm's hostlists expanded."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from rankvisor.engine.cluster.scheduler_env import (
    HostlistError,
    expand_hostlist,
    from_environment,
)


@pytest.mark.parametrize(("hostlist", "hosts"), [
    ("node01", ["node01"]),
    ("node[01-04,07]", ["node01", "node02", "node03", "node04", "node07"]),
    ("gpu-a[1-2],gpu-b3", ["gpu-a1", "gpu-a2", "gpu-b3"]),
    ("n[08-11]", ["n08", "n09", "n10", "n11"]),
    ("n[8-11]", ["n8", "n9", "n10", "n11"]),
    ("r[1-2]n[1-2]", ["r1n1", "r1n2", "r2n1", "r2n2"]),
    ("a[1-2]-ib,b", ["a1-ib", "a2-ib", "b"]),
    (" x , y ", ["x", "y"]),
])
def test_hostlists_expand_as_slurm_does(hostlist: str, hosts: list[str]) -> None:
    assert expand_hostlist(hostlist) == hosts


@pytest.mark.parametrize(("hostlist", "words"), [
    ("node[01-04", "unbalanced"),
    ("node01]", "unbalanced"),
    ("node[a-b]", "not a number"),
    ("node[5-3]", "goes down"),
    ("node[0-99999999]", "too many"),
])
def test_a_bad_hostlist_is_refused_with_the_part_that_is_wrong(hostlist: str, words: str) -> None:
    with pytest.raises(HostlistError, match=words):
        expand_hostlist(hostlist)


@given(st.lists(st.tuples(st.integers(0, 500), st.integers(0, 20), st.integers(1, 4)),
                min_size=1, max_size=5))
def test_a_range_is_every_number_of_it_padded_as_its_lower_bound(
    ranges: list[tuple[int, int, int]]
) -> None:
    parts, want = [], []
    for first, extra, width in ranges:
        last = first + extra
        lo, hi = str(first).zfill(width), str(last).zfill(width)
        parts.append(f"{lo}-{hi}")
        pad = len(lo) if lo.startswith("0") else 0
        want += [f"h{str(n).zfill(pad)}" for n in range(first, last + 1)]
    assert expand_hostlist(f"h[{','.join(parts)}]") == want


SLURM = {
    "SLURM_JOB_ID": "1234", "SLURM_STEP_ID": "0", "SLURM_NNODES": "2",
    "SLURM_JOB_NODELIST": "node[01-02]", "SLURM_NODEID": "1", "SLURM_TASKS_PER_NODE": "1(x2)",
}


def test_srun_with_one_task_per_node_fills_the_rendezvous() -> None:
    found = from_environment(SLURM)
    assert found is not None and found.problem is None
    assert found.flags == {
        "nnodes": "2", "rdzv_id": "1234.0", "rdzv_backend": "c10d",
        "rdzv_endpoint": "node01:29500", "node_rank": "1",
    }
    assert found.describe(("nnodes", "rdzv_endpoint", "rdzv_id")) == (
        "from Slurm: --nnodes 2 --rdzv-id 1234.0 --rdzv-endpoint node01:29500")


def test_gpus_on_the_node_give_the_ranks_per_node() -> None:
    found = from_environment({**SLURM, "SLURM_GPUS_ON_NODE": "8"})
    assert found is not None and found.flags["nproc_per_node"] == "8"


def test_a_task_per_gpu_is_one_line_with_the_fix() -> None:
    found = from_environment({**SLURM, "SLURM_TASKS_PER_NODE": "4(x2)"})
    assert found is not None and found.problem is not None
    assert "4 tasks on this node" in found.problem and "--ntasks-per-node=1" in found.problem
    assert "\n" not in found.problem


def test_a_broken_nodelist_is_said_not_raised() -> None:
    found = from_environment({**SLURM, "SLURM_JOB_NODELIST": "node[01-"})
    assert found is not None and "SLURM_JOB_NODELIST" in (found.problem or "")


def test_skypilot_names_its_first_ip() -> None:
    found = from_environment({
        "SKYPILOT_NODE_IPS": "10.0.0.5\n10.0.0.6\n", "SKYPILOT_NUM_NODES": "2",
        "SKYPILOT_NODE_RANK": "0", "SKYPILOT_NUM_GPUS_PER_NODE": "4", "SKYPILOT_TASK_ID": "t-1",
    })
    assert found is not None and found.source == "SkyPilot"
    assert found.flags == {
        "nnodes": "2", "rdzv_id": "t-1", "rdzv_backend": "c10d",
        "rdzv_endpoint": "10.0.0.5:29500", "node_rank": "0", "nproc_per_node": "4",
    }


def test_no_scheduler_no_flags() -> None:
    assert from_environment({"HOME": "/root"}) is None
