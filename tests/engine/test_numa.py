"""NUMA placement from a fake sysfs tree (these machines have one node), applied for real."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from rankvisor.engine import DefaultLogsSpecs, start_processes
from rankvisor.engine.process import numa
from rankvisor.engine.process.numa import (
    AffinityMode,
    NumaOptions,
    cpus_for_rank,
    parse_cpulist,
    plan,
)

pytestmark = pytest.mark.processes

ALL = set(range(16))


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")


def fake_sysfs(
    root: Path,
    nodes: dict[int, str],
    *,
    smt: bool = True,
    packages: dict[int, int] | None = None,
    l3_groups: list[str] | None = None,
    gpus: list[tuple[str, int]] = (),  # type: ignore[assignment]
) -> Path:
    """Nodes given as cpulists; CPU c and c+8 are SMT siblings when ``smt``."""
    for node, cpulist in nodes.items():
        _write(root / f"devices/system/node/node{node}/cpulist", cpulist)
        for cpu in parse_cpulist(cpulist):
            topo = root / f"devices/system/cpu/cpu{cpu}/topology"
            siblings = f"{cpu % 8},{cpu % 8 + 8}" if smt else str(cpu)
            _write(topo / "thread_siblings_list", siblings)
            _write(topo / "physical_package_id", str((packages or {}).get(node, node)))
            cache = root / f"devices/system/cpu/cpu{cpu}/cache"
            _write(cache / "index0/type", "Data")
            _write(cache / "index0/level", "1")
            _write(cache / "index0/shared_cpu_list", siblings)
            _write(cache / "index1/type", "Instruction")
            _write(cache / "index1/level", "9")  # ignored: not a data cache
            _write(cache / "index1/shared_cpu_list", "0-15")
            group = next((g for g in (l3_groups or [cpulist]) if cpu in parse_cpulist(g)), cpulist)
            _write(cache / "index3/type", "Unified")
            _write(cache / "index3/level", "3")
            _write(cache / "index3/shared_cpu_list", group)
    for addr, node in gpus:
        dev = root / "bus/pci/devices" / addr
        _write(dev / "vendor", "0x10de")
        _write(dev / "class", "0x030200")
        _write(dev / "numa_node", str(node))
    other = root / "bus/pci/devices/0000:00:1f.0"  # not a GPU
    _write(other / "vendor", "0x8086")
    _write(other / "class", "0x060100")
    _write(other / "numa_node", "1")
    return root


def two_nodes(tmp_path: Path, **kw: object) -> str:
    # node 0: cores 0-3 (+ siblings 8-11), node 1: cores 4-7 (+ 12-15)
    return str(fake_sysfs(tmp_path / "sys", {0: "0-3,8-11", 1: "4-7,12-15"}, **kw))  # type: ignore[arg-type]


def opts(mode: str, fallback: bool = False) -> NumaOptions:
    return NumaOptions(AffinityMode(mode), fallback)


def test_parse_cpulist() -> None:
    assert parse_cpulist("0-3,8,10-11\n") == {0, 1, 2, 3, 8, 10, 11}
    assert parse_cpulist("") == set()


def test_cpu_only_ranks_are_dealt_round_robin_over_nodes(tmp_path: Path) -> None:
    root = two_nodes(tmp_path)
    got = plan(opts("node"), 4, sysfs_root=root, allowed=ALL)
    assert got[0] == got[2] == frozenset({0, 1, 2, 3, 8, 9, 10, 11})
    assert got[1] == got[3] == frozenset({4, 5, 6, 7, 12, 13, 14, 15})


def test_gpu_ranks_follow_their_gpu_node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    root = two_nodes(
        tmp_path, gpus=[("0000:1b:00.0", 1), ("0000:a1:00.0", 0), ("0000:c1:00.0", -1)]
    )
    node0, node1 = {0, 1, 2, 3, 8, 9, 10, 11}, {4, 5, 6, 7, 12, 13, 14, 15}
    got = plan(opts("node"), 3, sysfs_root=root, allowed=ALL)
    assert [set(got[r] or ()) for r in range(3)] == [node1, node0, node0]  # -1 counts as 0
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,0")
    got = plan(opts("node"), 2, sysfs_root=root, allowed=ALL)
    assert [set(got[r] or ()) for r in range(2)] == [node0, node1]


def test_results_are_limited_to_allowed_cpus(tmp_path: Path) -> None:
    root = two_nodes(tmp_path)
    assert cpus_for_rank(0, opts("node"), nprocs=1, sysfs_root=root, allowed={1, 2, 5}) == {1, 2}


def test_socket_takes_every_node_of_the_package(tmp_path: Path) -> None:
    root = str(
        fake_sysfs(
            tmp_path / "sys", {0: "0-1", 1: "2-3", 2: "4-5"}, smt=False, packages={0: 0, 1: 0, 2: 1}
        )
    )
    assert cpus_for_rank(0, opts("socket"), nprocs=3, sysfs_root=root, allowed=ALL) == {0, 1, 2, 3}
    assert cpus_for_rank(2, opts("socket"), nprocs=3, sysfs_root=root, allowed=ALL) == {4, 5}


def test_exclusive_splits_physical_cores_lower_ranks_get_the_remainder(tmp_path: Path) -> None:
    root = two_nodes(tmp_path)
    # 6 ranks: 3 per node; node 0 has 4 physical cores (0..3, each with its sibling +8).
    got = plan(opts("exclusive"), 6, sysfs_root=root, allowed=ALL)
    assert got[0] == frozenset({0, 8, 1, 9})  # first rank on node 0: 2 cores
    assert got[2] == frozenset({2, 10})
    assert got[4] == frozenset({3, 11})
    assert got[1] == frozenset({4, 12, 5, 13})


def test_exclusive_with_more_ranks_than_cores_fails_or_falls_back(tmp_path: Path) -> None:
    root = two_nodes(tmp_path)
    with pytest.raises(RuntimeError, match="only 4 physical cores"):
        plan(opts("exclusive"), 10, sysfs_root=root, allowed=ALL)
    assert plan(
        opts("exclusive", fallback=True), 10, sysfs_root=root, allowed=ALL
    ) == dict.fromkeys(range(10))


def test_core_complex_takes_cache_groups_in_turn(tmp_path: Path) -> None:
    root = str(fake_sysfs(tmp_path / "sys", {0: "0-5"}, smt=False, l3_groups=["0-3", "4-5"]))
    got = plan(opts("core-complex"), 3, sysfs_root=root, allowed=ALL)
    assert got[0] == frozenset({0, 1, 2, 3})  # the largest group first
    assert got[1] == frozenset({4, 5})
    assert got[2] == got[0]


def test_torch_style_options_and_none(tmp_path: Path) -> None:
    class TorchLike:  # the shape of torch.numa.binding.NumaOptions
        affinity_mode = type("Mode", (), {"value": "node"})()
        should_fall_back_if_binding_fails = False

    root = two_nodes(tmp_path)
    assert plan(TorchLike(), 1, sysfs_root=root, allowed=ALL)[0] == frozenset(
        {0, 1, 2, 3, 8, 9, 10, 11}
    )
    assert plan(None, 2) == {0: None, 1: None}


def test_no_nodes_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="no NUMA node"):
        plan(opts("node"), 1, sysfs_root=str(tmp_path), allowed=ALL)


def test_binary_ranks_are_bound_for_real(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two fake nodes with one of our CPUs each: each rank runs on its node's CPU only."""
    ours = sorted(os.sched_getaffinity(0))
    if len(ours) < 2:
        pytest.skip("needs two CPUs")
    root = fake_sysfs(tmp_path / "sys", {0: str(ours[0]), 1: str(ours[1])}, smt=False)
    monkeypatch.setattr(numa, "DEFAULT_SYSFS_ROOT", str(root))
    ctx = start_processes(
        "w",
        "sleep",
        {0: ("600",), 1: ("600",)},
        {0: {}, 1: {}},
        DefaultLogsSpecs(log_dir=str(tmp_path / "logs")),
        numa_options=opts("node"),
    )
    try:
        pids = ctx.pids()
        assert os.sched_getaffinity(pids[0]) == {ours[0]}
        assert os.sched_getaffinity(pids[1]) == {ours[1]}
        assert os.sched_getaffinity(0) == set(ours)  # the parent is untouched
    finally:
        ctx.close()


def test_impossible_binding_starts_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(numa, "DEFAULT_SYSFS_ROOT", str(tmp_path / "empty"))
    with pytest.raises(RuntimeError, match="NUMA binding"):
        start_processes(
            "w",
            "sleep",
            {0: ("600",)},
            {0: {}},
            DefaultLogsSpecs(log_dir=str(tmp_path / "logs")),
            numa_options=opts("node"),
        )


def test_bind_current_process_in_a_child(tmp_path: Path) -> None:
    import subprocess
    import sys

    cpu = min(os.sched_getaffinity(0))
    code = (
        "import os, threading; from rankvisor.engine.process.numa import bind_current_process;"
        "bind_current_process({%d}); print(sorted(os.sched_getaffinity(0)))" % cpu
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == f"[{cpu}]"
